"""The progress of long runs: on a terminal (a pseudo-terminal here) a bar with the time left and the money
spent against the most the run may spend; piped, the lines these commands always printed, and no bar."""

from __future__ import annotations

import json
import os
import re

import pytest

from bamasc.cli import main, output
from tests.conftest import ROOT
from tests.helpers.terminal import on_a_terminal

GSM8K = os.path.join(ROOT, "examples", "gsm8k.bam")
TASKS = os.path.join(ROOT, "tests", "fixtures", "cli", "inputs", "tasks.jsonl")
DATASET = os.path.join(ROOT, "tests", "fixtures", "datasets", "gsm8k.jsonl")
SPENT = re.compile(r"spent ([\d,]+\.\d) of ([\d,]+\.\d) µ\$")
BAR = re.compile(r"\|\s*(\d+)/(\d+) \[\d\d:\d\d<\d\d:\d\d")  # done/total [elapsed<left


def test_exec_dataset_draws_a_bar_with_the_spend_on_a_terminal(monkeypatch, capsys, tmp_path):
    trace = tmp_path / "trace.jsonl"
    code, seen = on_a_terminal(monkeypatch, ["exec", GSM8K, "--fake", "echo", "--dataset", TASKS, "--trace", str(trace)])
    assert code == 0, seen
    # The bar: done/total with the elapsed time and the time left, redrawn in place.
    assert [match for match in BAR.findall(seen)][-1] == ("3", "3"), seen
    assert "\r" in seen
    spent, limit = SPENT.findall(seen)[-1]
    charged = sum(line["charged"] for line in map(json.loads, trace.read_text().splitlines()) if line["type"] == "call")
    assert float(spent.replace(",", "")) == round(charged, 1)
    assert float(limit.replace(",", "")) == 3 * 1625  # three tasks at the system's budget
    assert "tasks run: 3" in capsys.readouterr().out  # the report itself is unchanged, on standard output


def test_exec_dataset_piped_prints_the_plain_count_only(capsys, tmp_path):
    code = main(["exec", GSM8K, "--fake", "echo", "--dataset", TASKS, "--trace", str(tmp_path / "t.jsonl")])
    err = capsys.readouterr().err
    assert code == 0
    assert err == ("\r[##########....................] 1/3\n"
                   "\r[####################..........] 2/3\n"
                   "\r[##############################] 3/3\n")


def test_the_total_budget_is_the_limit(monkeypatch, capsys, tmp_path):
    code, seen = on_a_terminal(monkeypatch, ["exec", GSM8K, "--fake", "echo", "--dataset", TASKS, "--total-budget", "4000",
                                             "--trace", str(tmp_path / "t.jsonl")])
    assert code == 0, seen
    assert SPENT.findall(seen)[-1][1] == "4,000.0"


def test_collect_draws_a_bar_with_the_spend(monkeypatch, capsys, tmp_path):
    rows = tmp_path / "rows.jsonl"
    code, seen = on_a_terminal(monkeypatch, ["collect", GSM8K, "--dataset", DATASET, "--budgets", "875,1625",
                                             "--fake", "echo", "-o", str(rows)])
    assert code == 0, seen
    done, total = BAR.findall(seen)[-1]
    assert done == total and int(total) > 0
    spent, limit = SPENT.findall(seen)[-1]
    written = [json.loads(line) for line in rows.read_text().splitlines()]
    assert float(spent.replace(",", "")) == pytest.approx(sum(row["cost"] for row in written), abs=0.06)
    runs = [row for row in written if row["feasible"]]
    assert float(limit.replace(",", "")) == sum(row["budget"] for row in runs)


def test_bench_draws_one_bar_over_every_run(monkeypatch, capsys, tmp_path):
    results = tmp_path / "results.json"
    code, seen = on_a_terminal(monkeypatch, ["bench", GSM8K, "--dataset", DATASET, "--budgets", "500,1625",
                                             "--fake", "echo", "-o", str(results)])
    assert code == 0, seen
    data = json.loads(results.read_text())
    tasks = data["tasks"]
    assert BAR.findall(seen)[-1] == (str(2 * tasks), str(2 * tasks))
    spent, limit = SPENT.findall(seen)[-1]
    assert float(limit.replace(",", "")) == tasks * (500 + 1625)
    assert float(spent.replace(",", "")) == pytest.approx(sum(run["mean_cost"] * tasks for run in data["runs"]), abs=0.2)
    # The lines it always printed are still there, above the bar.
    assert "ran gsm8k at 500 µ$: " in seen and "ran gsm8k at 1625 µ$: " in seen


def test_bench_piped_prints_what_it_always_printed(capsys, tmp_path):
    code = main(["bench", GSM8K, "--dataset", DATASET, "--budgets", "500", "--fake", "echo"])
    err = capsys.readouterr().err
    assert code == 0
    assert re.fullmatch(r"ran gsm8k at 500 µ\$: \d+/\d+ correct\n", err), err


def test_the_pace_and_the_plain_fallback():
    assert output.spend_text(100.0, 2, 8, 1000.0) == "spent 100.0 of 1,000.0 µ$, on pace for 400.0"
    assert output.spend_text(0.0, 0, 8, None) == "spent 0.0 µ$"
    assert output.spend_text(400.0, 8, 8, 1000.0) == "spent 400.0 of 1,000.0 µ$"


def test_reproduce_draws_one_bar_against_its_estimate(monkeypatch, capsys, tmp_path):
    monkeypatch.setenv("BAMASC_CACHE", str(tmp_path / "cache"))
    tiny = os.path.join(ROOT, "tests", "fixtures", "reproduce", "tiny.bam")
    code, seen = on_a_terminal(monkeypatch, ["reproduce", tiny, "--dataset", DATASET, "-o", str(tmp_path / "out"),
                                             "--limit", "3", "--fake", "echo", "--systems", "tiny_solo",
                                             "--budgets", "900"])
    assert code == 0, seen
    estimate = re.search(r"estimate: at most ([\d,]+\.\d) µ\$ .* for (\d+) task runs", capsys.readouterr().out)
    bound, runs = estimate.groups()
    assert BAR.findall(seen)[-1] == (runs, runs)
    spent, limit = SPENT.findall(seen)[-1]
    assert limit == bound and 0 < float(spent.replace(",", "")) <= float(bound.replace(",", ""))
    assert "bench 1/1: tiny_solo at 900 µ$: " in seen  # its stage lines, above the bar
