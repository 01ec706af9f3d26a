"""A system's `objective` and a role's `weight`: read, reported at the value when wrong, and known to the editor."""

from __future__ import annotations

import pytest

from bamasc.check import check
from bamasc.diagnostics import render_text
from bamasc.fmt import format_source
from bamasc.lint import lint_paths
from bamasc.loader import load
from bamasc.lsp.analysis import Analysis
from bamasc.lsp.bounds import COMPUTING
from bamasc.lsp.complete import completions
from bamasc.lsp.hover import hover_text
from tests.fmt.roundtrip import check_round_trip

SOURCE = """model m {{
  provider = fake
  name     = "m"
  price    {{ input = 0  output = 0 }}
  tier     = 1
}}

role Solver {{
  max_output = 64
  {weight}
  prompt     = "Solve: {{{{task}}}}"
}}

topology single {{
  slot solver : Solver [1..1]
  flow {{ answer solver(task) }}
}}

system demo {{
  models     = [m]
  topologies = [single]
  budget     = 1000
  {objective}
}}
"""


def test_the_objective_and_the_weight_are_read(write_bam):
    program, diagnostics = check(load(write_bam(SOURCE.format(weight="weight = 2.5", objective="objective = value"))))
    assert not diagnostics
    assert program.roles["Solver"].weight == 2.5
    assert program.systems["demo"].objective == "value"


def test_without_them_the_system_binds_by_tiers_and_the_role_takes_the_default_weight(write_bam):
    program, diagnostics = check(load(write_bam(SOURCE.format(weight="", objective=""))))
    assert not diagnostics
    assert program.roles["Solver"].weight is None
    assert program.systems["demo"].objective == "tiers"


@pytest.mark.parametrize(
    "weight, objective, code, at, words",
    [
        ("weight = 0", "", "BAM209", "0", "weight must be a positive number"),
        ("weight = -2", "", "BAM209", "-2", "weight must be a positive number"),
        ('weight = "heavy"', "", "BAM209", '"heavy"', "weight must be a positive number"),
        ("weight = high", "", "BAM209", "high", "weight must be a positive number"),
        ("weight = 2 µ$", "", "BAM209", "2 µ$", "weight must be a positive number"),
        ("weight = 1001", "", "BAM210", "1001", "above the limit of 1000"),
        ("weight = 1e999", "", "BAM210", "1e999", "above the limit of 1000"),
        ("", "objective = valu", "BAM110", "valu", "'valu' is not a valid objective"),
        ("", 'objective = "value"', "BAM108", '"value"', "objective"),
    ],
)
def test_a_wrong_objective_or_weight_is_reported_at_the_value(write_bam, weight, objective, code, at, words):
    source = SOURCE.format(weight=weight, objective=objective)
    path = write_bam(source)
    result = lint_paths([path])
    text = render_text(result.diagnostics, result.sources)
    assert [d.code for d in result.diagnostics if d.severity == "error"] == [code], text
    number = 10 if weight else 23  # the line of the wrong attribute
    line = source.split("\n")[number - 1]
    assert f"main.bam:{number}:{line.index(at) + 1}: error[{code}]" in text, text
    assert words in text


def test_the_editor_completes_the_objectives_and_knows_the_weight():
    text = SOURCE.format(weight="weight = 3", objective="objective = ")
    labels = {item.label for item in completions(text, text.index("objective = ") + len("objective = "))}
    assert labels >= {"tiers", "value"}
    inside_role = text.index("  weight") + 2
    assert "weight" in {item.label for item in completions(text[:inside_role] + "\n}\n", inside_role)}


def test_hover_shows_the_weight_and_the_objective(write_bam):
    path = write_bam(SOURCE.format(weight="weight = 3", objective="objective = value"))
    analysis = Analysis(path, {})
    assert not analysis.errors
    uses = [o for found in analysis.index.by_file.values() for o in found]
    role = next(o for o in uses if o.kind == "role" and o.name == "Solver")
    system = next(o for o in uses if o.kind == "system" and o.name == "demo")
    assert "weight 3" in hover_text(analysis, role, (COMPUTING, None))
    assert "objective: value" in hover_text(analysis, system, (COMPUTING, None))


def test_the_formatter_keeps_them():
    text = SOURCE.format(weight="weight=3", objective="objective=value")
    formatted = format_source(text)
    check_round_trip(text, formatted)
    assert "  weight     = 3\n" in formatted and "  objective  = value\n" in formatted
