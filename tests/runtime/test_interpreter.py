"""The interpreter under the guard: never over budget, combinator behaviour, traces, datasets, `exec`."""

from __future__ import annotations

import asyncio
import json
import os
import shutil

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from bamasc.cli import main
from bamasc.plan.compile import compile_file
from bamasc.plan.lengths import LengthFit
from bamasc.runtime.execute import DatasetError, read_dataset
from bamasc.metering.guard import BudgetGuard
from bamasc.runtime.interpreter import TaskRun
from bamasc.runtime.providers.fake import FakeProvider
from bamasc.runtime.retry import RetryPolicy
from bamasc.runtime.trace import TraceWriter, finished_tasks
from tests.conftest import ROOT
from tests.helpers.runtime import Collect
from tests.helpers.systems import systems

NO_WAIT = RetryPolicy(max_attempts=4, base_delay=0.0, max_delay=0.0, timeout=5.0)
GSM8K = os.path.join(ROOT, "examples", "gsm8k.bam")


def run_task(plan, program, providers, task="What is 6 times 7?", template=None, budget=None, trace=None):
    system = plan.systems[0]
    chosen = system.template(template or system.selection["selected"])
    guard = BudgetGuard(budget if budget is not None else system.budget)
    run = TaskRun(program, system, chosen, providers, guard, "t1", task, trace, NO_WAIT)
    return asyncio.run(run.run()), guard


# ---------------------------------------------------------------- the guarantee


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.filter_too_much])
@given(
    source=systems(),
    behaviour=st.fixed_dictionaries(
        {
            "mode": st.sampled_from(["echo", "verbose"]),
            "fail_rate": st.sampled_from([0.0, 0.2, 0.5]),
            "fail_kinds": st.sampled_from([("server",), ("timeout",), ("rate_limited", "connection", "timeout")]),
            "reply_bytes": st.sampled_from([None, 5, 300, 5000]),
        }
    ),
    task_bytes=st.sampled_from([20, 400, 4000]),
    seed=st.integers(0, 10_000),
)
def test_charged_never_exceeds_the_budget(tmp_path, source, behaviour, task_bytes, seed):
    path = tmp_path / "random.bam"
    path.write_text(source, encoding="utf-8")
    result = compile_file(str(path))
    assume(result.plan is not None)
    system = result.plan.systems[0]
    for template in system.templates:
        if not template.feasible:
            continue
        reply = None if behaviour["reply_bytes"] is None else ("x" * behaviour["reply_bytes"] + " CONCLUSION: INCORRECT")
        providers = {
            name: FakeProvider(
                name, mode=behaviour["mode"], seed=seed, fail_rate=behaviour["fail_rate"],
                fail_kinds=behaviour["fail_kinds"], reply=reply,
            )
            for name in result.program.systems["s"].models
        }
        task = ("task " * task_bytes)[:task_bytes]  # often longer than the compile-time assumption
        outcome, guard = run_task(result.plan, result.program, providers, task=task, template=template.name)
        assert outcome.cost <= system.budget * (1 + 1e-9)
        assert not outcome.overran
        assert guard.held == pytest.approx(0, abs=1e-6)
        if task_bytes <= system.task_tokens and behaviour["fail_rate"] == 0:
            # Within the compile-time assumptions the proven bound holds too.
            assert outcome.cost <= template.worst_case_cost * (1 + 1e-9)


# ---------------------------------------------------------------- behaviour


@pytest.fixture(scope="module")
def gsm8k():
    result = compile_file(GSM8K)
    return result.plan, result.program


def fakes(program, **options):
    return {name: FakeProvider(name, **options) for name in program.systems["gsm8k"].models}


def test_refine_stops_when_the_critic_approves(gsm8k):
    plan, program = gsm8k
    trace = Collect()
    outcome, _ = run_task(plan, program, fakes(program), template="feedback", trace=trace)
    assert outcome.status == "ok" and outcome.answer == "7"  # the fake echoes the last number it sees
    assert [c["node"].split("@")[1] for c in trace.calls] == ["0.draft", "0.audit0"]


def test_refine_runs_every_round_when_the_critic_rejects(gsm8k):
    plan, program = gsm8k
    trace = Collect()
    reply = "#### 5\nCONCLUSION: INCORRECT - try again"
    outcome, _ = run_task(plan, program, fakes(program, reply=reply), template="feedback", trace=trace)
    nodes = [c["node"] for c in trace.calls]
    template = plan.systems[0].template("feedback")
    assert nodes == [n.id for n in template.nodes]
    assert outcome.answer == "5"


def test_a_malformed_plan_is_a_recorded_failure(gsm8k):
    plan, program = gsm8k
    outcome, _ = run_task(plan, program, fakes(program, reply="no json here #### 3"), template="planner")
    assert outcome.status == "error"
    assert "malformed plan" in outcome.error


def test_budget_exhaustion_returns_the_best_answer_so_far(gsm8k):
    plan, program = gsm8k
    trace = Collect()
    # A huge task makes every prompt far larger than compiled for: the guard must stop.
    outcome, guard = run_task(plan, program, fakes(program, mode="verbose"), task="7 " * 2000, template="linear", trace=trace)
    assert outcome.status in ("exhausted", "failed")
    assert outcome.cost <= 1625
    assert any(c["skipped"] for c in trace.calls) or any(c["clamped"] for c in trace.calls)


def test_vote_ties_go_to_the_higher_tier(gsm8k):
    plan, program = gsm8k
    providers = {
        "deepseek_v3": FakeProvider("deepseek_v3", reply="#### 1"),
        "gpt41_nano": FakeProvider("gpt41_nano", reply="#### 2"),
    }
    star = plan.systems[0].template("star")
    seats = [s.model for s in star.binding]
    assert seats.count("deepseek_v3") == seats.count("gpt41_nano")  # a 2-2 tie at the shipped budget
    outcome, _ = run_task(plan, program, providers, template="star")
    assert outcome.answer == "1"


def test_retries_are_budgeted_and_traced(gsm8k):
    plan, program = gsm8k
    trace = Collect()
    providers = fakes(program, fail_rate=0.6, fail_kinds=("timeout",), seed=3)
    outcome, guard = run_task(plan, program, providers, template="linear", trace=trace)
    attempts = [c for c in trace.calls if c["attempt"] > 1]
    assert attempts, "the seed makes some attempts fail and retry"
    failed = [c for c in trace.calls if c["error"]]
    assert all(c["charged"] == c["reserved"] for c in failed)  # unknown outcome: reservation kept
    assert outcome.cost == pytest.approx(sum(c["charged"] for c in trace.calls))
    assert outcome.cost <= 1625


# ---------------------------------------------------------------- datasets and traces


def test_dataset_rows_in_the_published_shapes(tmp_path):
    path = tmp_path / "d.jsonl"
    path.write_text(
        '{"question": "GSM8K style", "answer": "#### 3"}\n'
        '{"task_id": 11, "text": "MBPP style"}\n'
        '\n'
        '{"id": "m1", "problem": "MATH style"}\n'
    )
    tasks, problems = read_dataset(str(path))
    assert [(t.id, t.text) for t in tasks] == [("1", "GSM8K style"), ("11", "MBPP style"), ("m1", "MATH style")]
    assert problems == []


def test_a_malformed_row_names_file_line_and_field(tmp_path):
    path = tmp_path / "d.jsonl"
    path.write_text('{"question": "ok"}\n{"answer": 3}\n{not json\n')
    with pytest.raises(DatasetError, match=r"d.jsonl:2: no task text"):
        read_dataset(str(path))
    tasks, problems = read_dataset(str(path), skip_bad=True)
    assert [t.id for t in tasks] == ["1"] and len(problems) == 2 and "d.jsonl:3:" in problems[1]


def test_a_trace_cut_mid_line_is_repaired_and_resumable(tmp_path):
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"type": "task", "task_id": "a"}\n{"type": "task", "task_id": "b"')
    assert finished_tasks(str(trace)) == {"a"}
    writer = TraceWriter(str(trace))
    writer.task({"task_id": "c"})
    writer.close()
    lines = trace.read_text().splitlines()
    assert [json.loads(line)["task_id"] for line in lines] == ["a", "c"]


def test_exec_dataset_trace_contract_and_resume(tmp_path, capsys):
    shutil.copy(GSM8K, tmp_path / "gsm8k.bam")
    data = tmp_path / "tasks.jsonl"
    data.write_text("".join(json.dumps({"id": f"q{i}", "question": f"What is {i} plus {i}?"}) + "\n" for i in range(6)))
    trace = tmp_path / "trace.jsonl"
    args = ["exec", str(tmp_path / "gsm8k.bam"), "--dataset", str(data), "--fake", "echo", "--trace", str(trace), "--concurrency", "3"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "tasks run: 6" in out and "over budget: 0" in out
    records = [json.loads(line) for line in trace.read_text().splitlines()]
    calls = [r for r in records if r["type"] == "call"]
    tasks = [r for r in records if r["type"] == "task"]
    assert len(tasks) == 6
    for record in calls:
        for key in ("task_id", "node", "role", "model", "prompt_tokens", "completion_tokens", "reserved", "charged"):
            assert key in record
    for record in tasks:
        for key in ("task_id", "answer", "cost", "budget", "bound", "template", "overran", "status"):
            assert key in record
        assert record["overran"] is False and record["cost"] <= record["budget"]
    assert "api_key" not in trace.read_text().lower()
    # Resume: nothing left to do, nothing appended.
    size = trace.stat().st_size
    assert main(args + ["--resume"]) == 0
    assert "nothing to run: all 6 tasks are finished in the trace" in capsys.readouterr().out
    assert trace.stat().st_size == size


def test_exec_single_task_prints_template_ledger_answer_and_bound(tmp_path, capsys):
    shutil.copy(GSM8K, tmp_path / "gsm8k.bam")
    assert main(["exec", str(tmp_path / "gsm8k.bam"), "--task", "What is 20 plus 22?", "--fake", "echo"]) == 0
    out = capsys.readouterr().out
    # The bound is the binding's at the task's own length (19 bytes, the fake's tokens), below the compiled 1578.2.
    compiled = compile_file(str(tmp_path / "gsm8k.bam"), system="gsm8k")
    system = compiled.plan.system("gsm8k")
    bound = LengthFit(compiled.program, system).bound_at(system.template("star"), len(b"What is 20 plus 22?"))
    assert bound < system.template("star").worst_case_cost
    assert "template: star" in out and f"bound: {bound:.1f}" in out and "answer: 22" in out and "charged" in out


def test_exec_dry_run_reports_the_worst_case_spent(tmp_path, capsys):
    shutil.copy(GSM8K, tmp_path / "gsm8k.bam")
    assert main(["exec", str(tmp_path / "gsm8k.bam"), "--task", "What is 1 plus 1?", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "dry run" in out and "worst spent" in out


def test_a_run_restores_the_garbage_collector_even_when_runs_overlap():
    import gc

    from bamasc.runtime.execute import fewer_collections

    before = gc.get_threshold()
    with fewer_collections():
        assert gc.get_threshold() != before and gc.get_freeze_count() > 0
        inner = fewer_collections()
        inner.__enter__()
    # The outer run has finished but the inner one has not: still tuned.
    assert gc.get_threshold() != before
    inner.__exit__(None, None, None)
    assert gc.get_threshold() == before and gc.get_freeze_count() == 0


def test_a_dataset_run_leaves_the_garbage_collector_as_it_found_it():
    import gc

    from bamasc.runtime.execute import ExecOptions, Task, fewer_collections
    from bamasc.runtime.workers import run_tasks

    compiled = compile_file(GSM8K)
    before = gc.get_threshold()
    results, _, _ = asyncio.run(
        run_tasks(compiled.plan, compiled.program, None, [Task("a", "What is 1 plus 1?")], ExecOptions(fake_mode="echo"))
    )
    assert results[0].status == "ok"
    assert gc.get_threshold() == before and gc.get_freeze_count() == 0
    with pytest.raises(RuntimeError), fewer_collections():
        raise RuntimeError("a task crashed")
    assert gc.get_threshold() == before and gc.get_freeze_count() == 0


def test_a_finished_resume_needs_no_api_key(tmp_path, capsys, monkeypatch):
    shutil.copy(GSM8K, tmp_path / "gsm8k.bam")
    data = tmp_path / "tasks.jsonl"
    data.write_text("".join(json.dumps({"id": f"q{i}", "question": f"What is {i} plus {i}?"}) + "\n" for i in range(3)))
    trace = tmp_path / "trace.jsonl"
    common = ["exec", str(tmp_path / "gsm8k.bam"), "--dataset", str(data), "--trace", str(trace)]
    assert main([*common, "--fake", "echo"]) == 0
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("DEEPSEEK_API_KEY", raising=False)
    # Real providers now, without their keys: nothing is left, so none is made.
    assert main([*common, "--resume"]) == 0
    assert "nothing to run: all 3 tasks are finished in the trace" in capsys.readouterr().out
    # With a task left, the missing key is reported.
    data.write_text(data.read_text() + json.dumps({"id": "new", "question": "What is 1 plus 1?"}) + "\n")
    assert main([*common, "--resume"]) != 0
    assert "API_KEY" in capsys.readouterr().err
