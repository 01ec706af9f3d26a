"""`--engine ray`: the same answers, costs and trace as the local engine, one total across actors, and resumes
from a killed run's shards. One local Ray instance on 127.0.0.1 serves every test here."""

from __future__ import annotations

import asyncio
import json
import os

import pytest

from bamasc.cli import main
from bamasc.plan.compile import compile_file
from bamasc.runtime.batch import BudgetLevel
from bamasc.runtime.execute import ExecOptions, Task
from bamasc.runtime.workers import run_tasks
from tests.conftest import ROOT
from tests.helpers.runtime import charged, task_lines

ray = pytest.importorskip("ray", reason="Ray is not installed (the ray extra)")

GSM8K = os.path.join(ROOT, "examples", "gsm8k.bam")


@pytest.fixture(scope="module")
def local_ray():
    from bamasc.runtime.ray_engine import RayUnavailable, start_ray

    try:
        started = start_ray(None, 4)
    except RayUnavailable as problem:
        pytest.skip(f"Ray cannot start here: {problem}")
    yield
    if started:
        ray.shutdown()


def _tasks(count: int) -> list[Task]:
    return [Task(f"q{i}", f"What is {i} plus {i * 7 % 13}?") for i in range(count)]


def _calls_by_task(trace: str) -> dict:
    """Each task's call lines, without what differs between two runs (reservation ids, latencies)."""
    kept: dict = {}
    for record in map(json.loads, open(trace, encoding="utf-8")):
        if record["type"] == "call":
            kept.setdefault(record["task_id"], []).append(
                (record["node"], record["model"], record["attempt"], record["prompt_tokens"],
                 record["completion_tokens"], record["reserved"], record["charged"]))
    return kept


def test_ray_gives_the_local_answers_costs_and_calls(tmp_path, local_ray):
    from bamasc.runtime.ray_engine import run_on_ray

    compiled = compile_file(GSM8K)
    tasks = _tasks(50)
    local_trace, ray_trace = str(tmp_path / "local.jsonl"), str(tmp_path / "ray.jsonl")
    local, summary, _ = asyncio.run(run_tasks(compiled.plan, compiled.program, None, tasks,
                                              ExecOptions(fake_mode="random", concurrency=8, trace_path=local_trace)))
    results: list = []
    outcome = run_on_ray(compiled.plan, compiled.program, None, tasks,
                         ExecOptions(fake_mode="random", concurrency=8, trace_path=ray_trace), actors=4,
                         on_result=results.append)
    on_ray = {r.task_id: (r.answer, r.cost, r.status, r.template, r.calls) for r in results}
    assert on_ray == {r.task_id: (r.answer, r.cost, r.status, r.template, r.calls) for r in local}
    assert outcome.totals.tasks == 50 and outcome.summary.by_model.keys() == summary.by_model.keys()
    for model, row in summary.by_model.items():  # summed in another order: equal up to rounding
        assert outcome.summary.by_model[model] == pytest.approx(row, abs=1e-6)
    assert _calls_by_task(ray_trace) == _calls_by_task(local_trace)
    # Merged by task id: every task's lines together, and no shard left beside the trace.
    order = [record["task_id"] for record in map(json.loads, open(ray_trace, encoding="utf-8"))]
    assert [task for i, task in enumerate(order) if i == 0 or order[i - 1] != task] == sorted(set(order), key=order.index)
    assert sorted(os.listdir(tmp_path)) == ["local.jsonl", "ray.jsonl"]


def test_the_total_holds_across_actors(tmp_path, local_ray):
    """Every call answered at its full output cap, four actors of eight tasks each, a total for a fraction."""
    from bamasc.runtime.ray_engine import run_on_ray

    compiled = compile_file(GSM8K)
    lower = [BudgetLevel(b, compile_file(GSM8K, "gsm8k", b).plan.system("gsm8k")) for b in (500, 875, 1250)]
    trace = str(tmp_path / "trace.jsonl")
    total = 9_000.0
    options = ExecOptions(fake_mode="verbose", concurrency=8, trace_path=trace, total_budget=total,
                          budget_plans=tuple(lower))
    outcome = run_on_ray(compiled.plan, compiled.program, None, _tasks(40), options, actors=4)
    spent = charged(trace)
    assert spent <= total + 1e-6
    # `held` is a float sum of reservations taken and given back: zero up to rounding.
    assert outcome.ledger.spent == pytest.approx(spent) and outcome.ledger.held == pytest.approx(0.0, abs=1e-6)
    lines = task_lines(trace)
    assert len(lines) == 40 and outcome.totals.skipped_total > 0  # the total bound, and every task has its line


def test_a_resume_counts_a_killed_runs_shards(tmp_path, local_ray):
    """Shards left behind (one with a reservation in flight and a torn last line) are merged, then resumed from."""
    from bamasc.runtime.ray_engine import run_on_ray

    compiled = compile_file(GSM8K)
    tasks = _tasks(12)
    trace = str(tmp_path / "trace.jsonl")
    shard = trace + ".shard-1"
    asyncio.run(run_tasks(compiled.plan, compiled.program, None, tasks[:5],
                          ExecOptions(fake_mode="echo", trace_path=shard)))
    before = charged(shard)
    with open(shard, "a", encoding="utf-8") as handle:
        handle.write(json.dumps({"type": "reserve", "id": "dead.1", "task_id": "q5", "node": "n", "model": "m",
                                 "reserved": 321.0, "attempt": 1}) + "\n")
        handle.write('{"type": "call", "task_id": "q5", "char')  # the kill cut this line
    options = ExecOptions(fake_mode="echo", trace_path=trace, resume=True, total_budget=50_000.0)
    results: list = []
    outcome = run_on_ray(compiled.plan, compiled.program, None, tasks, options, actors=2, on_result=results.append)
    assert outcome.done == sorted(task.id for task in tasks[:5])  # finished in the shard: not run again
    assert sorted(r.task_id for r in results) == sorted(task.id for task in tasks[5:])
    assert outcome.ledger.earlier == pytest.approx(before + 321.0)  # the open reservation counts in full
    last = {line["task_id"]: line for line in task_lines(trace)}
    assert last["q5"]["earlier_runs"] == pytest.approx(321.0) and len(last) == 12
    assert not os.path.exists(shard) and charged(trace) <= 50_000


def test_the_cli_runs_on_ray_and_refuses_what_it_cannot_share(tmp_path, capsys, local_ray):
    data = tmp_path / "tasks.jsonl"
    data.write_text("".join(json.dumps({"id": f"q{i}", "question": f"What is {i} plus 2?"}) + "\n" for i in range(8)))
    common = ["exec", GSM8K, "--fake", "echo", "--dataset", str(data)]
    assert main([*common, "--engine", "ray", "--actors", "2", "--trace", str(tmp_path / "t.jsonl")]) == 0
    assert len(task_lines(str(tmp_path / "t.jsonl"))) == 8 and not os.path.exists(tmp_path / "t.jsonl.shard-0")
    capsys.readouterr()
    assert main([*common, "--ray-address", "127.0.0.1:1"]) == 2
    assert "--ray-address needs --engine ray" in capsys.readouterr().err
