"""`bamasc reproduce` end to end: on the fake, on a cassette of the local model, killed and resumed, its estimate and refusals."""

from __future__ import annotations

import csv
import io
import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest

from bamasc.cli import main
from bamasc.evaluate.bench import percentile
from bamasc.evaluate.paper_table import PUBLISHED
from tests.conftest import ROOT
from tests.runtime.servers import openai_server  # noqa: F401 (fixture)

FIXTURES = os.path.join(ROOT, "tests", "fixtures")
GSM8K = os.path.join(ROOT, "examples", "paper", "gsm8k.bam")
TINY = os.path.join(FIXTURES, "reproduce", "tiny.bam")
LOCAL = os.path.join(FIXTURES, "reproduce", "local.bam")
CASSETTE = os.path.join(FIXTURES, "reproduce", "local.cassette.jsonl")
TASKS = os.path.join(FIXTURES, "datasets", "gsm8k.jsonl")
QUICK = ["--limit", "3", "--embedding", "hashed", "--epochs", "2"]


def reproduce(path: str, out, *extra: str) -> list[str]:
    return ["reproduce", path, "--dataset", TASKS, "-o", str(out), *QUICK, *extra]


@pytest.fixture(autouse=True)
def cache(monkeypatch, tmp_path):
    monkeypatch.setenv("BAMASC_CACHE", str(tmp_path / "cache"))


@pytest.fixture(scope="module")
def paper_run(tmp_path_factory):
    """The GSM8K paper file on the fake provider at two budgets: (output folder, stdout)."""
    out = tmp_path_factory.mktemp("paper") / "out"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("BAMASC_CACHE", str(out.parent / "cache"))
        stdout = io.StringIO()
        patch.setattr(sys, "stdout", stdout)
        code = main(reproduce(GSM8K, out, "--budgets", "875,1625", "--fake", "echo"))
    assert code == 0, stdout.getvalue()
    return out, stdout.getvalue()


def table(out) -> dict:
    return json.loads((out / "table.json").read_text(encoding="utf-8"))


def cells(out) -> list[dict]:
    return [json.loads(line) for line in (out / "bench" / "cells.jsonl").read_text(encoding="utf-8").splitlines()]


# ---------------------------------------------------------------- the paper file on the fake


def test_every_system_of_the_file_and_the_greedy_ablation_get_a_row_at_every_budget(paper_run):
    out, _ = paper_run
    rows = table(out)["rows"]
    labels = ["gsm8k_reference", "gsm8k_reference (policy)", "gsm8k_bamasc", "gsm8k_bamasc (policy)",
              "gsm8k_bamasc (greedy)"] + [
        f"gsm8k_{style}_style_{model}" for style in ("autogen", "metagpt", "chatdev") for model in ("deepseek", "gpt41_nano")
    ]
    assert [(row["row"], row["budget"]) for row in rows] == [(label, b) for label in labels for b in (875.0, 1625.0)]
    binders = {row["row"]: row["binder"] for row in rows}
    assert binders["gsm8k_reference"] == binders["gsm8k_reference (policy)"] == "paper"
    assert binders["gsm8k_bamasc"] == "lexicographic" and binders["gsm8k_bamasc (greedy)"] == "greedy"
    # Each learned system was collected at every budget and template, and trained.
    for system in ("gsm8k_reference", "gsm8k_bamasc"):
        collected = (out / "collect" / f"{system}.jsonl").read_text().splitlines()
        assert len(collected) == 3 * 2 * 4
        metadata = json.loads((out / "train" / f"{system}.json").read_text())
        assert metadata["system"] == system and metadata["embedding_model"].startswith("hashed-words")


def test_the_table_holds_what_the_cells_measured(paper_run):
    out, stdout = paper_run
    data = table(out)
    by_cell = {(cell["label"], cell["budget"]): cell for cell in cells(out)}
    assert len(by_cell) == len(data["rows"])  # one line per cell: none lost, none twice
    for row in data["rows"]:
        cell = by_cell[(row["row"], row["budget"])]
        if "items" not in cell:  # a baseline whose one shape does not fit this budget: a row, marked so
            assert not row["feasible"] and "_style_deepseek" in row["row"] and row["budget"] == 875.0
            assert row["mean_cost"] is None
            continue
        costs = [item["cost"] for item in cell["items"]]
        assert row["tasks"] == 3 == len(costs)
        assert row["accuracy"] == pytest.approx(sum(item["correct"] for item in cell["items"]) / 3)
        assert row["mean_cost"] == pytest.approx(sum(costs) / 3, abs=1e-5) and row["mean_cost"] > 0
        assert row["overruns"] == sum(item["overran"] for item in cell["items"]) == 0
        mix = {}
        for item in cell["items"]:
            mix[item["template"]] = mix.get(item["template"], 0) + 1 / 3
        assert row["template_mix"] == pytest.approx(mix)
        assert max(costs) <= row["budget"] and percentile(costs, 100) == max(costs)
    # The published numbers stand beside the trained policies' rows at the headline budget, and only there.
    beside = [(row["row"], row["budget"]) for row in data["rows"] if row["paper"]]
    assert beside == [("gsm8k_reference (policy)", 1625.0), ("gsm8k_bamasc (policy)", 1625.0)]
    assert data["rows"][3]["paper"] == {"accuracy": 0.953, "mean_cost": 542.9}
    markdown = (out / "table.md").read_text(encoding="utf-8")
    assert markdown in stdout
    assert "| gsm8k_reference (policy) | 1625 |" in markdown and "| 95.3% | 542.9 |" in markdown
    first = data["rows"][0]
    assert f"| {first['row']} | 875 | {first['accuracy']:.1%} ({first['correct']}/3) | {first['mean_cost']:.1f} | 0 (0.0%) |" \
        in markdown
    with open(out / "table.csv", encoding="utf-8", newline="") as handle:
        written = list(csv.DictReader(handle))
    assert [(line["row"], float(line["budget"]), float(line["mean_cost"]) if line["mean_cost"] else None) for line in written] == [
        (row["row"], row["budget"], row["mean_cost"]) for row in data["rows"]
    ]
    assert written[3]["paper_accuracy"] == "0.953" and written[0]["paper_accuracy"] == ""


def test_the_plot_draws_one_series_per_row_and_the_published_point(paper_run):
    import matplotlib.pyplot as plt

    out, _ = paper_run
    pixels = plt.imread(str(out / "plot.png"))
    assert pixels.shape[:2] == (500, 800) and pixels[..., :3].std() > 0.05
    svg = (out / "plot.svg").read_text(encoding="utf-8")
    legend = set(re.findall(r"<text[^>]*>([^<]*\((?:policy|greedy)\)|gsm8k_\w+|published[^<]*)</text>", svg))
    rows = {row["row"] for row in table(out)["rows"] if row["feasible"]}
    assert legend == rows | {"published (GSM8K, 1625 µ$)"}
    assert svg.count('id="line2d_') >= len(rows)


def test_the_offline_estimate_is_an_upper_bound_on_what_the_run_spent(paper_run):
    out, stdout = paper_run
    found = re.search(r"estimate: at most ([\d,.]+) µ\$ \(\$[\d.]+\) for (\d+) task runs in 22 bench cells", stdout)
    assert found and "nothing is spent" in stdout
    bound, runs = float(found.group(1).replace(",", "")), int(found.group(2))
    collected = [json.loads(line) for system in ("gsm8k_reference", "gsm8k_bamasc")
                 for line in (out / "collect" / f"{system}.jsonl").read_text().splitlines()]
    benched = [item for cell in cells(out) for item in cell.get("items", ())]
    spent = sum(row["cost"] for row in collected) + sum(item["cost"] for item in benched)
    assert 0 < spent <= bound
    assert runs == sum(row["feasible"] for row in collected) + len(benched)


def test_a_rerun_of_a_finished_reproduction_runs_nothing_and_writes_the_same_table(paper_run, capsys):
    out, _ = paper_run
    before = (out / "table.json").read_text()
    lines_before = (out / "bench" / "cells.jsonl").read_text()
    assert main(reproduce(GSM8K, out, "--budgets", "875,1625", "--fake", "echo")) == 0
    captured = capsys.readouterr()
    assert "for 0 task runs in 0 bench cells" in captured.out and "22 of 22 cells already done" in captured.out
    assert "collect gsm8k_bamasc: done before" in captured.err and "train gsm8k_bamasc: done before" in captured.err
    assert (out / "table.json").read_text() == before
    assert (out / "bench" / "cells.jsonl").read_text() == lines_before


def test_a_system_that_selects_by_policy_selects_with_the_one_trained_here(write_bam, tmp_path, capsys):
    # Its own checkpoint does not exist: the rows must come from the policy trained into the folder.
    text = open(TINY, encoding="utf-8").read().replace(
        "  budgets     = [500, 900]\n", '  budgets     = [500, 900]\n  select      = policy("policies/missing.msgpack")\n'
    )
    out = tmp_path / "out"
    assert main(reproduce(write_bam(text, "learned.bam"), out, "--fake", "echo", "--systems", "tiny_bamasc")) == 0
    capsys.readouterr()
    rows = table(out)["rows"]
    assert [row["row"] for row in rows] == ["tiny_bamasc"] * 2 + ["tiny_bamasc (greedy)"] * 2  # no second policy row
    assert (out / "train" / "tiny_bamasc.msgpack").exists() and not (tmp_path / "policies").exists()
    assert all(cell["by_policy"] == (cell["label"] == "tiny_bamasc") for cell in cells(out))


# ---------------------------------------------------------------- killed and resumed


def _run_until(out, ready, env) -> None:
    """Start the reproduction in its own process and SIGKILL it once `ready()` holds."""
    command = [sys.executable, "-m", "bamasc", *reproduce(TINY, out, "--fake", "echo", "--concurrency", "1")]
    process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while not ready() and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.005)
    assert process.poll() is None, "the run ended before it could be killed"
    process.send_signal(signal.SIGKILL)
    process.wait()


def _lines(path) -> int:
    return len(path.read_text().splitlines()) if path.exists() else 0


def test_a_run_killed_in_collect_and_again_in_bench_resumes_to_the_uninterrupted_table(tmp_path, capsys):
    whole = tmp_path / "whole"
    assert main(reproduce(TINY, whole, "--fake", "echo")) == 0
    capsys.readouterr()
    env = {**os.environ, "PYTHONPATH": ROOT, "BAMASC_CACHE": str(tmp_path / "cache")}
    out = tmp_path / "killed"
    rows = out / "collect" / "tiny_bamasc.jsonl"
    _run_until(out, lambda: _lines(rows) >= 5, env)
    assert 5 <= _lines(rows) < 12 and not (out / "bench").exists()
    _run_until(out, lambda: _lines(out / "bench" / "cells.jsonl") >= 2, env)
    assert 2 <= _lines(out / "bench" / "cells.jsonl") < 8
    assert main(reproduce(TINY, out, "--fake", "echo")) == 0
    err = capsys.readouterr().err
    assert "collect tiny_bamasc: done before" in err and "train tiny_bamasc: done before" in err
    assert table(out)["rows"] == table(whole)["rows"]
    keys = [(row["task_id"], row["budget"], row["template"]) for row in map(json.loads, rows.read_text().splitlines())]
    assert len(keys) == len(set(keys)) == 3 * 2 * 2
    assert sorted(cell["label"] + str(cell["budget"]) for cell in cells(out)) == sorted(
        cell["label"] + str(cell["budget"]) for cell in cells(whole)
    )


# ---------------------------------------------------------------- a cassette of the local model


def test_a_cassette_recorded_from_the_local_model_replays_the_whole_reproduction(tmp_path):
    out = tmp_path / "out"
    script = (
        "import sys; from bamasc.cli import main; "
        f"code = main({reproduce(LOCAL, out, '--cassette', CASSETTE, '--epochs', '3')!r}); "
        "assert 'llama_cpp' not in sys.modules, 'the model was loaded'; sys.exit(code)"
    )
    env = {**os.environ, "PYTHONPATH": ROOT, "BAMASC_CACHE": str(tmp_path / "cache")}
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "nothing is spent" in done.stdout
    rows = table(out)["rows"]
    assert [row["row"] for row in rows] == ["local_bamasc"] * 2 + ["local_bamasc (policy)"] * 2 + \
        ["local_bamasc (greedy)"] * 2 + ["local_solo"] * 2
    for row in rows:
        assert row["feasible"] and row["tasks"] == 3 and 0 < row["mean_cost"] <= row["budget"]
        assert sum(row["template_mix"].values()) == pytest.approx(1.0)
    # The model's own words, played back: every answer came from the cassette.
    recorded = {json.loads(line)["text"] for line in open(CASSETTE, encoding="utf-8")}
    answers = [item for cell in cells(out) for item in cell["items"]]
    assert all(item["status"] == "ok" for item in answers)
    assert any(text and any(ch.isalpha() for ch in text) for text in recorded)
    assert (out / "plot.png").stat().st_size > 10_000 and (out / "plot.svg").read_text().count("local_solo") == 1


# ---------------------------------------------------------------- the estimate and the confirmation


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def paid_file(write_bam, url: str) -> str:
    return write_bam(f"""
import "std/linear"

model remote {{
  provider = openai
  base_url = "{url}"
  api_key  = env("REPRODUCE_TEST_KEY")
  name     = "gpt-4.1-nano"
  price    {{ input = 100  output = 400 }}
  tier     = 1
}}

role Executor {{
  max_output = 64
  reads      = answer
  prompt     = "Solve: {{{{task}}}}\\n{{{{previous?}}}}"
}}

system paid {{
  models      = [remote]
  topologies  = [linear]
  budget      = 60000
  budgets     = [60000]
  task_tokens = 100
  answer      = number
}}
""")


@pytest.mark.parametrize("answer", ["n\n", "\n"])
def test_above_the_threshold_a_terminal_is_asked_and_no_means_nothing_is_spent(
    write_bam, openai_server, monkeypatch, tmp_path, capsys, answer
):
    monkeypatch.setenv("REPRODUCE_TEST_KEY", "sk-test")
    monkeypatch.setattr(sys, "stdin", Terminal(answer))
    out = tmp_path / "out"
    code = main(["reproduce", paid_file(write_bam, openai_server.base_url), "--dataset", TASKS, "--limit", "3",
                 "-o", str(out), "--confirm-above", "0.01"])
    captured = capsys.readouterr()
    assert code == 1
    assert "an upper bound" in captured.out and "spend up to $0.1116? [y/N]" in captured.out
    assert "not confirmed; nothing was spent" in captured.err
    assert openai_server.requests == [] and not out.exists()


def test_yes_on_the_terminal_runs_it(write_bam, openai_server, monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("REPRODUCE_TEST_KEY", "sk-test")
    monkeypatch.setattr(sys, "stdin", Terminal("y\n"))
    out = tmp_path / "out"
    code = main(["reproduce", paid_file(write_bam, openai_server.base_url), "--dataset", TASKS, "--limit", "3",
                 "-o", str(out), "--confirm-above", "0.01"])
    assert code == 0, capsys.readouterr().err
    assert len(openai_server.requests) == 3  # one call per task: the one-executor chain
    assert [row["row"] for row in table(out)["rows"]] == ["paid"]


def test_without_a_terminal_or_yes_it_refuses_and_spends_nothing(write_bam, openai_server, monkeypatch, tmp_path,
                                                                  capsys):
    monkeypatch.setenv("REPRODUCE_TEST_KEY", "sk-test")
    monkeypatch.setattr(sys, "stdin", io.StringIO("y\n"))  # not a terminal: never read
    out = tmp_path / "out"
    args = ["reproduce", paid_file(write_bam, openai_server.base_url), "--dataset", TASKS, "--limit", "3", "-o", str(out)]
    assert main(args + ["--confirm-above", "0.01"]) == 1
    err = capsys.readouterr().err
    assert "is above --confirm-above $0.01 and there is no terminal to ask on; give --yes" in err
    assert openai_server.requests == [] and not out.exists()
    # Below the threshold (the default $1), or with --yes, it runs without asking.
    assert main(args) == 0 and len(openai_server.requests) == 3


# ---------------------------------------------------------------- bad input


def one_error(capsys) -> str:
    err = capsys.readouterr().err
    assert "Traceback" not in err
    errors = [line for line in err.splitlines() if line.startswith("bamasc: error:")]
    assert len(errors) == 1, err
    return errors[0]


def test_a_missing_dataset_is_a_usage_error(tmp_path, capsys):
    args = ["reproduce", GSM8K, "--dataset", str(tmp_path / "nope.jsonl"), "-o", str(tmp_path / "out"), "--fake", "echo"]
    assert main(args) == 2
    assert one_error(capsys) == f"bamasc: error: no such file: {tmp_path / 'nope.jsonl'}"
    assert not (tmp_path / "out").exists()


def test_a_file_without_budgets_says_to_give_them(write_bam, tmp_path, capsys):
    text = open(TINY, encoding="utf-8").read().replace("  budgets     = [500, 900]\n", "")
    path = write_bam(text, "nobudgets.bam")
    assert main(["reproduce", path, "--dataset", TASKS, "-o", str(tmp_path / "out"), "--fake", "echo"]) == 2
    assert "declares `budgets`" in one_error(capsys) and not (tmp_path / "out").exists()
    # Given on the command line, they are enough.
    assert main(["reproduce", path, "--dataset", TASKS, "-o", str(tmp_path / "out"), "--fake", "echo", *QUICK,
                 "--budgets", "900", "--learn", "none"]) == 0


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--systems", "tiny_bamasc,nosuch"], "--systems: no system 'nosuch'; the file declares: tiny_bamasc, tiny_solo"),
        (["--learn", "tiny_solo"], "--learn: system 'tiny_solo' has one template, so a policy has nothing to choose"),
        (["--systems", "tiny_solo", "--greedy", "tiny_bamasc"], "--greedy: system 'tiny_bamasc' is not among --systems"),
    ],
)
def test_unknown_or_unsuitable_systems_are_usage_errors(tmp_path, capsys, extra, message):
    assert main(["reproduce", TINY, "--dataset", TASKS, "-o", str(tmp_path / "out"), "--fake", "echo", *extra]) == 2
    assert message in one_error(capsys)


def test_an_output_folder_of_another_reproduction_is_refused(tmp_path, capsys):
    out = tmp_path / "out"
    assert main(reproduce(TINY, out, "--fake", "echo", "--systems", "tiny_solo", "--budgets", "900")) == 0
    capsys.readouterr()
    assert main(reproduce(TINY, out, "--fake", "echo", "--systems", "tiny_solo", "--budgets", "500")) == 2
    assert "holds a reproduction with other settings (budgets, systems, training)" in one_error(capsys)
    assert len(cells(out)) == 1


def test_the_published_numbers_are_docs_papers():
    text = open(os.path.join(ROOT, "docs", "paper.md"), encoding="utf-8").read()
    for published in PUBLISHED.values():
        row = (f"| {published['dataset']} | {published['budget']:,.0f} | {published['accuracy']:.1%} | "
               f"{published['mean_cost']:.1f} |")
        assert row in text


# ---------------------------------------------------------------- the scorer each table used


def test_math_is_scored_strictly_by_default_and_the_scorer_is_pinned(write_bam, tmp_path, capsys):
    text = open(TINY, encoding="utf-8").read().replace("answer      = number", "answer      = boxed")
    path = write_bam(text, "tinymath.bam")
    math = os.path.join(FIXTURES, "datasets", "math")
    out = tmp_path / "out"
    args = ["reproduce", path, "--dataset", math, "-o", str(out), "--fake", "echo", "--systems", "tiny_solo",
            "--budgets", "900", "--limit", "2"]
    assert main(args) == 0
    assert "scoring math with the math-strict scorer" in capsys.readouterr().err
    assert [cell["scorer"] for cell in cells(out)] == ["math-strict"]
    assert json.loads((out / "manifest.json").read_text())["pinned"]["scorer"] == "math-strict"
    # Another scorer on the same folder would mix verdicts: refused, nothing rerun.
    assert main([*args, "--scorer", "math"]) == 2
    assert "holds a reproduction with other scorer" in one_error(capsys)


def test_a_scorer_that_does_not_read_the_kind_is_a_usage_error(tmp_path, capsys):
    out = tmp_path / "out"
    assert main(reproduce(TINY, out, "--fake", "echo", "--scorer", "math-strict")) == 2
    assert "the scorer 'math-strict' does not read gsm8k datasets" in one_error(capsys)
    assert not out.exists()


def test_every_table_and_the_plot_say_the_numbers_are_not_a_measurement(paper_run):
    out, stdout = paper_run
    data = table(out)
    assert {key: data["source"][key] for key in ("providers", "measured", "tasks", "scorer")} == {
        "providers": "fake echo", "measured": False, "tasks": 3, "scorer": "gsm8k"}
    assert "**Not a measurement.** 3 tasks per row, scored with `gsm8k`; offline: the fake provider (echo)" in stdout
    assert (out / "table.md").read_text(encoding="utf-8").count("Not a measurement") == 1
    rows = list(csv.DictReader(io.StringIO((out / "table.csv").read_text(encoding="utf-8"))))
    assert {(row["providers"], row["measured"], row["scorer"]) for row in rows} == {("fake echo", "False", "gsm8k")}
    assert "not a measurement" in (out / "plot.svg").read_text(encoding="utf-8")


def test_a_run_on_the_models_is_labelled_measured():
    from bamasc.evaluate.paper_table import provenance

    assert provenance("models", False, 500, "math-strict")["measured"] is True
    assert provenance("cassette", True, 6, "gsm8k")["measured"] is False
    assert provenance("fake verbose", True, 6, None)["measured"] is False


def test_baseline_rows_run_unguarded_and_say_so(tmp_path, capsys):
    """The paper files' framework baselines declare `budget_check = none`: their real cost is recorded,
    never capped by the guard, and their rows say so (their overruns do not fail the run)."""
    from bamasc.plan.compile import check_file

    program, _, _ = check_file(GSM8K)
    baselines = [name for name in program.systems if "_style_" in name]
    assert baselines and all(program.systems[name].budget_check == "none" for name in baselines)
    out = tmp_path / "out"
    baseline = baselines[0]
    assert main(reproduce(GSM8K, out, "--fake", "verbose", "--systems", baseline, "--budgets", "2000")) == 0
    assert f"{baseline} [not guarded: real cost]" in capsys.readouterr().out
