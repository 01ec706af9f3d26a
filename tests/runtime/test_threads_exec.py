"""Threads in `bamasc exec --dataset`: rows with the same `thread` run in order as one conversation, within its
`thread_budget`, and `--resume` after a kill -9 between turns continues it with its history and charges."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from bamasc.cli import main
from tests.conftest import ROOT
from tests.helpers.threads import TURNS, desk_source, expected_answers, trace_lines, trace_spend, trace_threads

BUDGET = 5000.0
KILL_WAIT_S = 120.0  # how long a loaded machine may take to finish two turns


def _dataset(folder, rows) -> str:
    path = os.path.join(folder, "tickets.jsonl")
    with open(path, "w", encoding="utf-8") as handle:
        handle.writelines(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)
    return path


def _ticket_rows(thread="ticket-777"):
    return [{"id": f"t{n}", "task": text, "thread": thread, **({"thread_budget": BUDGET} if n == 1 else {})}
            for n, text in enumerate(TURNS, start=1)]


def _last_task_lines(trace: str) -> dict[str, dict]:
    return {line["task_id"]: line for line in trace_lines(trace) if line["type"] == "task"}


def test_a_dataset_thread_runs_in_order_with_its_history(tmp_path):
    folder = str(tmp_path)
    source = desk_source(folder)
    # Another thread's rows between the ticket's, and concurrency: the ticket's turns still run in file order.
    rows = _ticket_rows()
    rows.insert(2, {"id": "other", "task": "Where is my parcel 5?", "thread": 42})
    trace = os.path.join(folder, "trace.jsonl")
    code = main(["exec", source, "--dataset", _dataset(folder, rows), "--trace", trace, "--fake", "echo",
                 "--concurrency", "4"])
    assert code == 0
    tasks = _last_task_lines(trace)
    assert [tasks[f"t{n}"]["answer"] for n in range(1, 5)] == expected_answers()
    assert [tasks[f"t{n}"]["turn"] for n in range(1, 5)] == [1, 2, 3, 4]
    assert tasks["other"]["thread_id"] == "42" and tasks["other"]["turn"] == 1
    assert tasks["other"]["answer"] == expected_answers(["Where is my parcel 5?"])[0]
    threads = trace_threads(trace)
    assert sorted(threads) == ["42", "ticket-777"] and len(threads["ticket-777"]) == 4
    assert trace_spend(trace, [f"t{n}" for n in range(1, 5)]) <= BUDGET


@pytest.mark.parametrize("rows, message", [
    ([{"task": "a", "thread": "t", "thread_budget": 900}, {"task": "b", "thread": "t", "thread_budget": 901}],
     "tickets.jsonl:2: thread 't' has thread_budget 900 in its first row, not 901"),
    ([{"task": "a", "thread": "t"}, {"task": "b", "thread": "t", "thread_budget": 901}],
     "tickets.jsonl:2: thread 't' has no thread_budget in its first row"),
    ([{"task": "a", "thread_budget": 900}], "tickets.jsonl:1: thread_budget needs a thread"),
    ([{"task": "a", "thread": "x" * 300}], "tickets.jsonl:1: thread is 300 characters"),
    ([{"task": "a", "thread": "t", "thread_budget": -1}], "tickets.jsonl:1: thread_budget must be"),
    ([{"task": "a", "thread": True}], "tickets.jsonl:1: thread must be a string"),
])
def test_a_thread_row_that_is_wrong_stops_the_run_naming_its_line(tmp_path, capsys, rows, message):
    folder = str(tmp_path)
    trace = os.path.join(folder, "trace.jsonl")
    code = main(["exec", desk_source(folder), "--dataset", _dataset(folder, rows), "--trace", trace, "--fake", "echo"])
    assert code != 0
    assert message in capsys.readouterr().err
    assert not os.path.exists(trace) or not trace_lines(trace)  # nothing ran, nothing was spent


def test_a_turn_past_the_thread_budget_is_thread_exhausted_and_spends_nothing(tmp_path):
    folder = str(tmp_path)
    rows = [{"id": f"t{n}", "task": text, "thread": "small", **({"thread_budget": 1} if n == 1 else {})}
            for n, text in enumerate(TURNS[:2], start=1)]
    trace = os.path.join(folder, "trace.jsonl")
    main(["exec", desk_source(folder), "--dataset", _dataset(folder, rows), "--trace", trace, "--fake", "echo"])
    tasks = _last_task_lines(trace)
    assert [tasks[t]["status"] for t in ("t1", "t2")] == ["thread_exhausted"] * 2
    assert trace_spend(trace, ["t1", "t2"]) == 0
    assert not [line for line in trace_lines(trace) if line["type"] in ("reserve", "call")]


def test_a_kill_9_between_turns_resumes_the_thread(tmp_path):
    folder = str(tmp_path)
    source = desk_source(folder, latency_s=0.5)  # each reply takes half a second: the kill lands mid-thread
    dataset = _dataset(folder, _ticket_rows())
    trace = os.path.join(folder, "trace.jsonl")
    command = [sys.executable, "-m", "bamasc", "exec", source, "--dataset", dataset, "--trace", trace, "--fake", "echo"]
    process = subprocess.Popen(command, cwd=folder, env={**os.environ, "PYTHONPATH": ROOT},
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        waited = time.monotonic() + KILL_WAIT_S
        while time.monotonic() < waited and process.poll() is None:
            if os.path.exists(trace) and sum(1 for line in trace_lines(trace) if line["type"] == "task") >= 2:
                break
            time.sleep(0.05)
    finally:
        process.send_signal(signal.SIGKILL)  # kill -9 after turn 2
        process.wait(timeout=60)
    before = _last_task_lines(trace)
    assert {"t1", "t2"} <= set(before) and "t4" not in before
    assert main(["exec", source, "--dataset", dataset, "--trace", trace, "--fake", "echo", "--resume"]) == 0
    tasks = _last_task_lines(trace)
    # Turns 3 and 4, run after the kill, saw turns 1 and 2 in their prompts.
    assert [tasks[f"t{n}"]["answer"] for n in range(1, 5)] == expected_answers()
    assert [tasks[f"t{n}"]["status"] for n in range(1, 5)] == ["ok"] * 4
    threads = trace_threads(trace)
    assert list(threads) == ["ticket-777"] and sorted({line["turn"] for line in threads["ticket-777"]}) == [1, 2, 3, 4]
    # The thread's charges are everything the trace holds for its turns (a reservation the kill left open in
    # full), across the kill, and stay within its budget.
    spent = trace_spend(trace, [f"t{n}" for n in range(1, 5)])
    assert 0 < spent <= BUDGET
    assert sum(tasks[f"t{n}"]["cost"] for n in range(1, 5)) == pytest.approx(spent)


def test_resume_with_another_budget_for_a_thread_the_trace_holds_stops_before_any_turn(tmp_path, capsys):
    folder = str(tmp_path)
    source = desk_source(folder)
    trace = os.path.join(folder, "trace.jsonl")
    rows = _ticket_rows()
    assert main(["exec", source, "--dataset", _dataset(folder, rows[:2]), "--trace", trace, "--fake", "echo"]) == 0
    written = len(trace_lines(trace))
    rows[0]["thread_budget"] = BUDGET * 2
    capsys.readouterr()
    code = main(["exec", source, "--dataset", _dataset(folder, rows), "--trace", trace, "--fake", "echo", "--resume"])
    assert code != 0
    assert "thread 'ticket-777' has a budget of 5000 µ$; a turn cannot give it 10000 µ$" in capsys.readouterr().err
    assert len(trace_lines(trace)) == written  # nothing ran, nothing was spent
