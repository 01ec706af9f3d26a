"""One budget for a batch: the ledger, the running totals, the hard cap under failures, kills and resumes, and the allocator."""

from __future__ import annotations

import asyncio
import json
import math
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import time

import pytest

from bamasc.cli import main
from bamasc.cli.report import EXIT_SKIPPED
from bamasc.plan.compile import compile_file
from bamasc.rows import drop_torn_line
from bamasc.runtime.allocate import DualAllocator, Estimates, uniform_budget
from bamasc.runtime.batch import BatchBudget, BatchTotals, BudgetLevel, ExactSum, RoundedValues
from bamasc.runtime.execute import DatasetStream, ExecOptions, Task
from bamasc.runtime.workers import run_tasks
from tests.conftest import ROOT
from tests.helpers.runtime import GSM8K, charged, task_lines


# ---------------------------------------------------------------- the ledger and the totals


def test_the_ledger_holds_only_what_fits_and_gives_back_the_unused_rest():
    ledger = BatchBudget(1000, spent=100)
    assert asyncio.run(ledger.reserve(600)) and ledger.remaining == pytest.approx(300)
    assert not asyncio.run(ledger.reserve(300.5))  # would pass the total
    asyncio.run(ledger.settle(600, 150))
    assert ledger.spent == pytest.approx(250) and ledger.held == 0 and ledger.remaining == pytest.approx(750)


def test_running_totals_print_as_the_whole_list_would():
    rng = random.Random(7)
    for size in (1, 2, 19, 20, 21, 500):
        costs = [rng.choice([0.05, 0.15, 0.25, 1e-9]) + rng.random() * rng.choice([1, 100, 1e6]) for _ in range(size)]
        kept = RoundedValues(1)
        exact = ExactSum()
        for cost in costs:
            kept.add(cost)
            exact.add(cost)
        p95 = sorted(costs)[max(0, int(round(0.95 * len(costs))) - 1)]
        assert f"{kept.percentile(0.95):.1f}" == f"{p95:.1f}"
        assert f"{kept.mean:.1f}" == f"{statistics.fmean(costs):.1f}"
        assert exact.value == math.fsum(costs) and kept.largest == max(costs)


def test_the_totals_stay_small_however_many_tasks_end():
    totals = BatchTotals()

    class Result:
        status, overran, budget, bound, deadline_s, exhausted, elapsed_s = "ok", False, 1625.0, 500.0, None, None, 0.0

    for i in range(20_000):
        result = Result()
        result.cost = 100 + (i % 50) / 10
        totals.add(result)
    assert totals.tasks == 20_000 and len(totals.costs.counts) == 50


def test_a_torn_tail_is_cut_by_reading_back_from_the_end(tmp_path):
    path = tmp_path / "trace.jsonl"
    whole = b"".join(b'{"n": %d}\n' % i for i in range(20_000))
    path.write_bytes(whole + b'{"n": "cut' + b"x" * 200_000)  # a torn line longer than a block
    drop_torn_line(str(path))
    assert path.read_bytes() == whole
    path.write_bytes(b"y" * 150_000)  # no line end at all
    drop_torn_line(str(path))
    assert path.read_bytes() == b""


def test_a_dataset_stream_reads_as_the_whole_file_did(tmp_path):
    from bamasc.runtime.execute import DatasetError, read_dataset

    path = tmp_path / "tasks.jsonl"
    path.write_text('{"id": "a", "question": "1?"}\n\nNaN\n{"task": "2?"}\n{"id": "a", "task": "dup"}\n')
    with pytest.raises(DatasetError, match=r"tasks\.jsonl:3: not JSON"):
        DatasetStream.open(str(path))
    stream, problems = DatasetStream.open(str(path), skip_bad=True)
    tasks, same = read_dataset(str(path), skip_bad=True)
    assert problems == same and list(stream) == tasks and len(stream) == 2


# ---------------------------------------------------------------- the hard cap


def _plan():
    compiled = compile_file(GSM8K)
    lower = [BudgetLevel(b, compile_file(GSM8K, "gsm8k", b).plan.system("gsm8k")) for b in (500, 875, 1250)]
    return compiled.plan, compiled.program, lower


@pytest.mark.parametrize("seed", range(6))
def test_the_batch_never_charges_past_its_total(tmp_path, monkeypatch, seed, backoff_clock):
    """Random totals, sizes, concurrency, fake behaviours and failures, with half the runs resumed after an error.

    Retries back off on the fake clock: the waits are drawn as always (and must be, where a call failed), not
    slept; what a batch charges does not depend on how long it waited."""
    import bamasc.runtime.execute as execute
    from bamasc.runtime.providers.fake import FakeProvider

    rng = random.Random(seed)
    mode = rng.choice(["echo", "verbose"])
    fail_rate = rng.choice([0.0, 0.2, 0.5])
    kinds = tuple(rng.sample(["server", "timeout", "connection", "rate_limited"], 2))
    monkeypatch.setattr(execute, "make_providers", lambda program, system, options, models=None: {
        name: FakeProvider(name, mode=mode, seed=seed, fail_rate=fail_rate, fail_kinds=kinds)
        for name in program.systems[system].models
    })
    plan, program, lower = _plan()
    tasks = [Task(f"t{i}", f"What is {i} plus {rng.randint(1, 99)}?") for i in range(rng.randint(5, 40))]
    total = rng.uniform(300, 1625 * len(tasks))
    trace = str(tmp_path / "trace.jsonl")
    options = ExecOptions(trace_path=trace, concurrency=rng.randint(1, 16), total_budget=total, budget_plans=tuple(lower))
    results, _, _ = asyncio.run(run_tasks(plan, program, None, tasks, options))
    assert charged(trace) <= total + 1e-6
    retried = any(r["type"] == "reserve" and r["attempt"] > 1 for r in map(json.loads, open(trace, encoding="utf-8")))
    assert not retried or backoff_clock.waited, "a call was retried without backing off or a pause"
    assert sorted(r.task_id for r in results) == sorted(t.id for t in tasks)  # every task has its outcome
    skipped = [r for r in results if r.status == "skipped_total"]
    assert all(r.cost == 0 and "total budget" in r.error for r in skipped)
    for line in task_lines(trace):
        if line["status"] != "skipped_total":
            assert line["budget"] in (500, 875, 1250, 1625) or line["budget"] <= 1625
    # A resume, with more room: what earlier runs spent still counts.
    resumed = ExecOptions(trace_path=trace, resume=True, concurrency=4, total_budget=total * 1.5, budget_plans=tuple(lower))
    asyncio.run(run_tasks(plan, program, None, tasks, resumed))
    assert charged(trace) <= total * 1.5 + 1e-6


def test_a_task_that_does_not_fit_is_skipped_with_a_line_and_a_resume_runs_it(tmp_path):
    shutil.copy(GSM8K, tmp_path / "gsm8k.bam")
    data = tmp_path / "tasks.jsonl"
    data.write_text("".join(json.dumps({"id": f"q{i}", "question": f"What is {i} plus {i}?"}) + "\n" for i in range(6)))
    trace = str(tmp_path / "trace.jsonl")
    common = ["exec", str(tmp_path / "gsm8k.bam"), "--fake", "verbose", "--dataset", str(data), "--trace", trace]
    assert main([*common, "--total-budget", "2000"]) == EXIT_SKIPPED  # some tasks were left undone
    lines = task_lines(trace)
    assert len(lines) == 6 and charged(trace) <= 2000
    skipped = [line for line in lines if line["status"] == "skipped_total"]
    assert skipped and all("total budget" in line["error"] for line in skipped)
    assert main([*common, "--resume", "--total-budget", "$0.02"]) == 0
    last = {line["task_id"]: line for line in task_lines(trace)}
    assert all(line["status"] != "skipped_total" for line in last.values()) and charged(trace) <= 20_000


def test_the_total_refuses_the_posthoc_guard_and_allocate_needs_a_total(tmp_path, capsys):
    common = ["exec", GSM8K, "--fake", "echo", "--task", "What is 1 plus 1?"]
    assert main([*common, "--total-budget", "5000", "--guard", "posthoc"]) == 2
    assert main([*common, "--allocate", "rows.jsonl"]) == 2
    assert "--allocate needs --total-budget" in capsys.readouterr().err


def test_a_killed_run_and_its_resume_stay_within_the_total(tmp_path):
    """A real kill -9 in the middle of a run, then --resume: the trace's charges never pass the total."""
    data = tmp_path / "tasks.jsonl"
    data.write_text("".join(json.dumps({"id": f"q{i}", "question": f"What is {i} plus 3?"}) + "\n" for i in range(3000)))
    trace = str(tmp_path / "trace.jsonl")
    total = 1_500_000.0
    command = [sys.executable, "-m", "bamasc", "exec", GSM8K, "--fake", "verbose", "--dataset", str(data),
               "--trace", trace, "--total-budget", str(total), "--concurrency", "16"]
    env = dict(os.environ, PYTHONPATH=ROOT)
    process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and (not os.path.exists(trace) or os.path.getsize(trace) < 400_000):
        time.sleep(0.02)
    process.send_signal(signal.SIGKILL)
    process.wait()
    assert len(task_lines_whole(trace)) < 3000  # killed mid-run
    assert charged(trace) <= total + 1e-6
    done = subprocess.run([*command, "--resume"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode in (0, EXIT_SKIPPED), done.stderr  # 3 when the total left tasks undone
    assert charged(trace) <= total + 1e-6
    finals = {line["task_id"] for line in task_lines(trace)}
    assert len(finals) == 3000  # every task ran or was recorded as skipped for the total
    assert "total budget: $1.50 (1,500,000 µ$)" in done.stdout


def task_lines_whole(trace: str) -> list[dict]:
    return [json.loads(line) for line in open(trace, encoding="utf-8")
            if line.endswith("\n") and '"type": "task"' in line]


# ---------------------------------------------------------------- the allocator


def _table():
    """Easy tasks succeed at the smallest budget; hard ones only at the largest: the best budget depends on the task."""
    rows = []
    for i in range(200):
        hard = i % 2 == 1
        for budget, cost in ((500, 400), (1250, 1000), (2000, 1800)):
            success = (budget == 2000) if hard else True
            rows.append((f"t{i}", budget, "linear", success, cost))
    return rows


def expected(allocator_or_budget, rows, tasks: list[str]):
    estimates = Estimates(rows, {500.0: "linear", 1250.0: "linear", 2000.0: "linear"})
    reward = spend = 0.0
    for task_id in tasks:
        budget = allocator_or_budget.choose(task_id) if hasattr(allocator_or_budget, "choose") else allocator_or_budget
        success, cost = estimates.at(task_id, budget)
        reward += success
        spend += cost
    return reward, spend


def test_the_allocator_beats_the_uniform_split_at_the_same_total():
    rows = _table()
    tasks = [f"t{i}" for i in range(200)]
    total = 1250.0 * len(tasks)
    uniform = uniform_budget([500, 1250, 2000], total, len(tasks))
    assert uniform == 1250
    uniform_reward, uniform_spend = expected(uniform, rows, tasks)
    estimates = Estimates(rows, {500.0: "linear", 1250.0: "linear", 2000.0: "linear"})
    allocator = DualAllocator(estimates, total, len(tasks))
    reward, spend = expected(allocator, rows, tasks)
    assert spend <= total and uniform_spend <= total
    assert reward > uniform_reward + 50  # hard tasks get 2000, easy ones 500: 200 against 100
    assert allocator.chosen[500.0] and allocator.chosen[2000.0]


def test_with_a_tight_total_the_price_rises_and_the_allocator_spends_within_it():
    rows = _table()
    tasks = [f"t{i}" for i in range(200)]
    estimates = Estimates(rows, {500.0: "linear", 1250.0: "linear", 2000.0: "linear"})
    allocator = DualAllocator(estimates, 500.0 * len(tasks), len(tasks))
    _, spend = expected(allocator, rows, tasks)
    assert spend <= 500.0 * len(tasks) * 1.05 and allocator.price > 0


def test_exec_allocates_from_an_offline_table_and_says_so(tmp_path, capsys):
    data = tmp_path / "tasks.jsonl"
    data.write_text("".join(json.dumps({"id": f"t{i}", "question": f"What is {i} plus 1?"}) + "\n" for i in range(20)))
    table = tmp_path / "offline.jsonl"
    plan = compile_file(GSM8K).plan.system("gsm8k")
    selected = {b: compile_file(GSM8K, "gsm8k", b).plan.system("gsm8k").selection["selected"] for b in (500, 2000)}
    with open(table, "w") as handle:
        for task_id, budget, _, success, cost in _table()[:60]:
            if budget in selected:
                row = {"task_id": task_id, "task": "x", "budget": budget, "template": selected[budget],
                       "success": success, "cost": cost, "feasible": True}
                handle.write(json.dumps(row) + "\n")
    trace = str(tmp_path / "trace.jsonl")
    assert plan.budget == 1625
    code = main(["exec", GSM8K, "--fake", "echo", "--dataset", str(data), "--trace", trace,
                 "--total-budget", "40000", "--allocate", str(table)])
    out = capsys.readouterr().out
    assert code == 0 and "allocated by a dual price" in out
    budgets = {line["task_id"]: line["budget"] for line in task_lines(trace)}
    assert budgets["t0"] == 500 and budgets["t1"] == 2000  # easy and hard, as the table says
    assert charged(trace) <= 40000
