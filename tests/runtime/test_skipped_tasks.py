"""Tasks that do not start say so: a skip has its status and reason, `--resume` runs it once it can afford it,
`overran` means charges passed the budget, and `exec` exits 3 when tasks were left undone."""

from __future__ import annotations

import json
import shutil

import pytest

from bamasc.cli import main
from bamasc.cli.report import EXIT_ERRORS, EXIT_OK, EXIT_SKIPPED
from tests.helpers.runtime import GSM8K, charged, task_lines


@pytest.fixture
def batch(tmp_path):
    """gsm8k (per-task budget 1625, lower budgets 500, 875, 1250) on six tasks, answered at the full output cap."""
    shutil.copy(GSM8K, tmp_path / "gsm8k.bam")
    data = tmp_path / "tasks.jsonl"
    data.write_text("".join(json.dumps({"id": f"q{i}", "question": f"What is {i} plus {i}?"}) + "\n" for i in range(6)))
    trace = str(tmp_path / "trace.jsonl")
    return ["exec", str(tmp_path / "gsm8k.bam"), "--fake", "verbose", "--dataset", str(data), "--trace", trace], trace


def _last_lines(trace: str) -> dict:
    return {line["task_id"]: line for line in task_lines(trace)}


def _open_reservations(trace: str, task_id: str, *amounts: float) -> None:
    """What a run killed with `amounts` in flight for `task_id` leaves in the trace."""
    with open(trace, "a", encoding="utf-8") as handle:
        for n, amount in enumerate(amounts, start=1):
            handle.write(json.dumps({"type": "reserve", "id": f"killed.{task_id}.{n}", "task_id": task_id, "node": "n",
                                     "model": "m", "attempt": n, "reserved": amount}) + "\n")


def test_a_run_that_skips_every_task_or_some_exits_3_and_one_that_finishes_exits_0(batch, capsys):
    common, trace = batch
    assert main([*common, "--total-budget", "100"]) == EXIT_SKIPPED  # every task skipped: nothing was done
    out = capsys.readouterr().out
    assert "total budget: $0.0001 (100 µ$)" in out and "skipped for the total: 6" in out
    assert {line["status"] for line in task_lines(trace)} == {"skipped_total"}
    assert main([*common, "--resume", "--total-budget", "2000"]) == EXIT_SKIPPED  # some ran, some skipped
    statuses = {line["status"] for line in _last_lines(trace).values()}
    assert "skipped_total" in statuses and statuses - {"skipped_total"}
    assert main([*common, "--resume", "--total-budget", "$0.02"]) == EXIT_OK
    assert "skipped_total" not in {line["status"] for line in _last_lines(trace).values()}
    assert "total budget: $0.02 (20,000 µ$)" in capsys.readouterr().out


def test_a_failed_task_outranks_a_skipped_one(batch):
    common, trace = batch
    _open_reservations(trace, "q0", 1625.0)  # q0's whole budget is spent: it cannot start
    _open_reservations(trace, "q1", 1624.5)  # q1 has 0.5 µ$ left, too little for any call: it starts and fails
    assert main([*common, "--resume"]) == EXIT_ERRORS
    last = _last_lines(trace)
    assert last["q0"]["status"] == "skipped_budget" and not last["q0"]["overran"]
    assert last["q1"]["status"] == "failed" and not last["q1"]["overran"]


def test_a_task_resumed_under_a_total_that_fits_only_a_spent_level_is_skipped_and_runs_later(batch):
    """Two 500 µ$ reservations left open by a kill: 1000 µ$ spent, more than the 875 and 500 levels. The total's
    rest (100 µ$) fits no level the task can still run at, so it is skipped, not run at 875 µ$ and called overrun;
    a resume with a larger total runs it at a level above what it spent."""
    common, trace = batch
    _open_reservations(trace, "q0", 500.0, 500.0)
    assert main([*common, "--resume", "--total-budget", "1100", "--concurrency", "1"]) == EXIT_SKIPPED
    line = _last_lines(trace)["q0"]
    assert line["status"] == "skipped_total" and not line["overran"] and line["budget"] is None
    assert line["cost"] == pytest.approx(1000.0) and "total budget" in line["error"]
    assert main([*common, "--resume", "--total-budget", "20000"]) in (EXIT_OK, EXIT_ERRORS)  # 625 µ$ may not do
    line = _last_lines(trace)["q0"]
    assert line["status"] in ("ok", "exhausted", "failed") and not line["overran"]
    assert line["budget"] > line["earlier_runs"] == pytest.approx(1000.0)
    assert line["cost"] <= line["budget"] + 1e-6 and charged(trace) <= 20000


def test_a_task_whose_budget_earlier_runs_spent_is_skipped_until_a_larger_budget(batch, tmp_path):
    common, trace = batch
    _open_reservations(trace, "q3", 1000.0, 700.0)  # 1700 µ$: past the 1625 µ$ budget it ran under
    assert main([*common, "--resume"]) == EXIT_SKIPPED
    line = _last_lines(trace)["q3"]
    assert line["status"] == "skipped_budget" and not line["overran"] and "1700.0 µ$" in line["error"]
    assert main([*common, "--resume"]) == EXIT_SKIPPED  # run again, still with nothing to run on
    assert main([*common, "--resume", "--budget", "2500"]) in (EXIT_OK, EXIT_ERRORS)
    line = _last_lines(trace)["q3"]
    assert line["status"] != "skipped_budget" and line["budget"] == 2500 and not line["overran"]
