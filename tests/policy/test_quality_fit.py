"""`bamasc fit-weights`: qualities per role estimated from offline rows, counted by hand, and pasted back in."""

from __future__ import annotations

import json
import re
import subprocess
import sys

from bamasc.check import check
from bamasc.loader import load
from bamasc.policy.data import OfflineRow, row_data
from bamasc.policy.quality_fit import fit_quality
from tests.conftest import ROOT

SOURCE = """model strong {{
  provider = fake
  name     = "strong"
  price    {{ input = 1  output = 4 }}
  tier     = 1
{quality}}}

model weak {{
  provider = fake
  name     = "weak"
  price    {{ input = 0.1  output = 0.4 }}
  tier     = 2
}}

role Solver {{
  max_output = 100
  prompt     = "Solve: {{{{task}}}}"
}}

topology single {{
  slot solver : Solver [1..1]
  flow {{ answer solver(task) }}
}}

system demo {{
  models      = [strong, weak]
  topologies  = [single]
  budget      = 1000
  task_tokens = 100
}}
"""
# At 1000 µ$ the strong model fits (100 x 1 + 100 x 4 plus the prompt); at 100 µ$ only the weak one.
RICH, POOR = 1000.0, 100.0


def row(task: str, budget: float, success: bool, template: str = "single", feasible: bool = True) -> OfflineRow:
    return OfflineRow(task, task, budget, template, success, 0.0, feasible)


ROWS = [
    row("a", RICH, True), row("b", RICH, True), row("c", RICH, False),
    row("a", POOR, False), row("b", POOR, False),
    row("c", 10.0, False, feasible=False),  # nothing fits: no run
    row("a", RICH, True, template="other"),  # not a template of the system
]


def test_each_models_quality_is_the_smoothed_share_of_the_runs_it_took_part_in(write_bam):
    program, diagnostics = check(load(write_bam(SOURCE.format(quality=""))))
    assert not diagnostics
    fit = fit_quality(program, program.systems["demo"], ROWS)
    assert (fit.rows, fit.ignored) == (5, 2)
    found = {(e.model, e.role): (e.runs, e.solved, e.quality) for e in fit.estimates}
    # strong: 3 runs, 2 solved -> (2 + 1) / (3 + 2); weak: 2 runs, none solved -> 1 / 4.
    assert found == {("strong", "Solver"): (3, 2, 0.6), ("weak", "Solver"): (2, 0, 0.25)}


def test_the_command_writes_blocks_that_paste_back_into_the_models(write_bam, tmp_path):
    path = write_bam(SOURCE.format(quality=""))
    data = tmp_path / "offline.jsonl"
    data.write_text("".join(json.dumps(row_data(r)) + "\n" for r in ROWS), encoding="utf-8")
    written = tmp_path / "quality.bam"
    done = subprocess.run(
        [sys.executable, "-m", "bamasc", "fit-weights", path, "--data", str(data), "-o", str(written)],
        cwd=ROOT, capture_output=True, text=True,
    )
    assert done.returncode == 0, done.stderr
    text = written.read_text(encoding="utf-8")
    assert "// model strong: Solver 3 runs, 2 solved" in text
    block = re.search(r"// model strong:.*\n(quality \{.*\})\n", text).group(1)
    assert block == "quality { Solver = 0.600 }"
    program, diagnostics = check(load(write_bam(SOURCE.format(quality=f"  {block}\n"), "pasted.bam")))
    assert not diagnostics
    assert program.models["strong"].quality == {"Solver": 0.6}


def test_rows_of_no_template_of_the_system_are_an_error(write_bam, tmp_path):
    path = write_bam(SOURCE.format(quality=""))
    data = tmp_path / "offline.jsonl"
    data.write_text(json.dumps(row_data(row("a", RICH, True, template="other"))) + "\n", encoding="utf-8")
    done = subprocess.run([sys.executable, "-m", "bamasc", "fit-weights", path, "--data", str(data)],
                          cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 1 and "no feasible row of a template of system 'demo'" in done.stderr
