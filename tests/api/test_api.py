"""The Python API: load, compile, save and load plans, run tasks; the same outcomes and messages as the command line."""

from __future__ import annotations

import asyncio
import json
import math
import os
import subprocess
import sys

import pytest

import bamasc
from tests.api.helpers import SOLVER, SYNTAX_ERROR, UNREACHABLE
from tests.conftest import ROOT

TASK = "Tom has 3 apples and buys 4 more. How many apples does he have now?"


def _cli(*args: str, cwd: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": ROOT}
    return subprocess.run([sys.executable, "-m", "bamasc", *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=300)


def _lines(path: str) -> list[dict]:
    with open(path, encoding="utf-8") as handle:
        return [json.loads(line) for line in handle]


@pytest.fixture
def solver(write_bam) -> str:
    return write_bam(SOLVER, "solver.bam")


def test_load_raises_the_diagnostics_lint_prints(write_bam):
    path = write_bam(SYNTAX_ERROR, "broken.bam")
    with pytest.raises(bamasc.BamError) as raised:
        bamasc.load(path)
    assert raised.value.code == "BAM001"
    assert raised.value.diagnostics[0].line == 16
    lint = _cli("lint", path, cwd=os.path.dirname(path))
    assert lint.returncode == 1
    # The message is the text lint prints, excerpt and caret included.
    assert raised.value.message in lint.stdout


def test_an_unreachable_budget_raises_at_compile_with_bam404_not_attribute_error(write_bam):
    program = bamasc.load(write_bam(UNREACHABLE, "tight.bam"))
    assert [d.code for d in program.diagnostics] == ["BAM404"]
    with pytest.raises(bamasc.BamError) as raised:
        program.compile()
    assert raised.value.code == "BAM404"
    # Compiling at a budget that fits does not raise, as `compile --budget` does not.
    assert program.compile(budget=2000).budget == 2000


def test_compile_gives_the_bound_and_templates_compile_prints(solver):
    plan = bamasc.load(solver).compile(system="solver")
    (template,) = plan.templates
    assert template.selected and template.feasible
    assert plan.bound == template.bound
    assert plan.bound is not None and 0 < plan.bound <= plan.budget == 2000
    assert [seat.model for seat in template.binding] == ["steady"] * len(template.binding)
    text = _cli("compile", solver, "--format", "json", cwd=os.path.dirname(solver)).stdout
    compiled = json.loads(text)["systems"][0]["templates"][0]
    assert compiled["worst_case_cost"] == plan.bound
    assert len(compiled["binding"]) == len(template.binding)


def test_unknown_system_method_and_budgets_are_usage_errors(solver):
    program = bamasc.load(solver)
    with pytest.raises(bamasc.UsageError, match="no system 'nope'") as raised:
        program.compile(system="nope")
    assert raised.value.exit_code == 2
    with pytest.raises(bamasc.UsageError):
        program.compile(method="fastest")
    for bad in (math.nan, -1, 0, 1e308, math.inf, True, "100"):
        with pytest.raises(bamasc.BudgetError):
            program.compile(budget=bad)  # type: ignore[arg-type]
    with pytest.raises(bamasc.UsageError, match="no such file"):
        bamasc.load(os.path.join(os.path.dirname(solver), "missing.bam"))


def test_save_and_load_verify_the_plan(solver, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the message names the source as typed from here, as the command's does
    plan = bamasc.load(solver).compile()
    target = tmp_path / "elsewhere" / "plan.json"
    target.parent.mkdir()
    plan.save(target)  # another folder than the source's: its paths are written relative to it
    loaded = bamasc.Plan.load(target)
    assert (loaded.system, loaded.bound, loaded.templates) == (plan.system, plan.bound, plan.templates)
    data = json.loads(target.read_text(encoding="utf-8"))
    data["systems"][0]["templates"][0]["worst_case_cost"] = 1.0
    target.write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(bamasc.PlanError) as raised:
        bamasc.Plan.load(target)
    assert "worst_case_cost" in raised.value.message
    refused = _cli("exec", str(target), "--task", TASK, "--fake", "echo", cwd=str(tmp_path))
    assert refused.returncode == 1
    assert f"bamasc: error: {raised.value.message}" in refused.stderr


def test_run_matches_exec_line_for_line(solver, tmp_path):
    """The API and `bamasc exec` write the same trace for the same task: the same code path."""
    plan = bamasc.load(solver).compile()
    result = plan.run_sync(TASK, provider=bamasc.providers.fake("verbose"), trace=str(tmp_path / "api.jsonl"))
    done = _cli("exec", solver, "--task", TASK, "--fake", "verbose", "--trace", str(tmp_path / "cli.jsonl"),
                cwd=str(tmp_path))
    assert done.returncode == 0, done.stderr

    def comparable(path: str) -> list[dict]:
        return [{k: v for k, v in line.items() if k not in ("id", "latency_ms", "elapsed_s", "at")}
                for line in _lines(path)]

    assert comparable(str(tmp_path / "api.jsonl")) == comparable(str(tmp_path / "cli.jsonl"))
    task_line = _lines(str(tmp_path / "api.jsonl"))[-1]
    assert (result.answer, result.status, result.template) == (task_line["answer"], "ok", "linear")
    assert result.cost == pytest.approx(task_line["cost"]) and result.cost <= plan.budget
    assert len(result.calls) == task_line["calls"] == len(plan.templates[0].binding)
    assert sum(call.charged for call in result.calls) == pytest.approx(result.cost)


def test_a_tighter_budget_holds_and_a_looser_one_is_refused(solver):
    plan = bamasc.load(solver).compile()
    verbose = bamasc.providers.fake("verbose")
    tight = plan.run_sync(TASK, budget=700, provider=verbose)
    assert tight.budget == 700 and tight.cost <= 700
    assert tight.status in ("exhausted", "failed")
    assert any(call.skipped or call.clamped for call in tight.calls)
    for bad in (2000.5, math.nan, -5, 1e308):
        with pytest.raises(bamasc.BudgetError):
            plan.run_sync(TASK, budget=bad, provider=verbose)
    with pytest.raises(bamasc.BudgetError, match="seconds above zero"):
        plan.run_sync(TASK, deadline=0, provider=verbose)


def test_a_deadline_is_never_later_than_the_plans():
    plan = bamasc.load(os.path.join(ROOT, "tests", "fixtures", "stages", "deadline.bam")).compile()
    assert plan.deadline_s == 8
    with pytest.raises(bamasc.BudgetError, match="later than the plan's deadline"):
        plan.run_sync(TASK, deadline=9, provider=bamasc.providers.fake("echo"))
    result = plan.run_sync(TASK, deadline=0.01, provider=bamasc.providers.fake("echo"))
    assert result.exhausted == "deadline" and result.cost == 0


def test_run_batch_keeps_the_total(solver, tmp_path):
    plan = bamasc.load(solver).compile()
    tasks = [f"What is {n} + {n}?" for n in range(6)] + [bamasc.Task("named", "What is 1 + 1?")]
    trace = str(tmp_path / "batch.jsonl")
    results = asyncio.run(plan.run_batch(tasks, concurrency=3, total_budget=5000, trace=trace,
                                         provider=bamasc.providers.fake("verbose")))
    assert [r.task_id for r in results] == ["1", "2", "3", "4", "5", "6", "named"]
    assert sum(r.cost for r in results) <= 5000
    assert {r.status for r in results} >= {"ok", "skipped_total"}
    charged = sum(line["charged"] for line in _lines(trace) if line["type"] == "call")
    assert charged == pytest.approx(sum(r.cost for r in results))
    with pytest.raises(bamasc.UsageError, match="duplicate task id"):
        plan.run_batch_sync([bamasc.Task("a", "x"), bamasc.Task("a", "y")])


def test_stream_yields_each_call_then_the_result(solver):
    plan = bamasc.load(solver).compile()

    async def events() -> list:
        return [event async for event in plan.stream(TASK, provider=bamasc.providers.fake("echo"))]

    found = asyncio.run(events())
    assert isinstance(found[-1], bamasc.TaskDone)
    started = [e for e in found if isinstance(e, bamasc.CallStarted)]
    settled = [e for e in found if isinstance(e, bamasc.CallSettled)]
    assert len(started) == len(settled) == len(found[-1].result.calls) > 0
    # Each attempt is reserved before it is settled, and settles within its reservation.
    assert found.index(started[0]) < found.index(settled[0])
    assert all(e.call.charged <= s.reserved for s, e in zip(started, settled))


def test_run_sync_inside_a_loop_says_what_to_do(solver):
    plan = bamasc.load(solver).compile()

    async def inside() -> None:
        plan.run_sync(TASK, provider=bamasc.providers.fake("echo"))

    with pytest.raises(bamasc.UsageError, match="await plan.run"):
        asyncio.run(inside())


def test_unknown_template_and_missing_key_are_api_errors(write_bam):
    plan = bamasc.load(write_bam(SOLVER.replace("provider = fake", "provider = openai\n  api_key = env(\"BAMASC_TEST_NO_SUCH_KEY\")"),
                                 "keyed.bam")).compile()
    with pytest.raises(bamasc.UsageError, match="unknown system or template"):
        plan.run_sync(TASK, template="star")
    with pytest.raises(bamasc.ProviderError, match="BAMASC_TEST_NO_SUCH_KEY"):
        plan.run_sync(TASK)


def test_providers_are_checked():
    with pytest.raises(bamasc.UsageError):
        bamasc.providers.fake("loud")
    with pytest.raises(bamasc.UsageError):
        bamasc.providers.fake("echo", latency_s=-1)
    assert bamasc.providers.fake("verbose").offline


def test_leaving_a_stream_early_stops_the_task_and_keeps_its_reservation(solver, tmp_path):
    plan = bamasc.load(solver).compile()
    trace = str(tmp_path / "stream.jsonl")

    async def first_event() -> bamasc.Event:
        async for event in plan.stream(TASK, provider=bamasc.providers.fake("echo", latency_s=5.0), trace=trace):
            return event
        raise AssertionError("no event")

    event = asyncio.run(first_event())
    assert isinstance(event, bamasc.CallStarted)
    (reserve, call) = _lines(trace)
    assert reserve["type"] == "reserve" and call["id"] == reserve["id"]
    assert call["error"].startswith("cancelled") and call["charged"] == reserve["reserved"] == event.reserved


def test_the_command_compiles_through_the_api_the_same_plan_and_warnings(tmp_path):
    source = os.path.join(ROOT, "examples", "gsm8k.bam")
    command = _cli("compile", source, "--system", "gsm8k", "--budget", "875", "--format", "json", cwd=str(tmp_path))
    program = bamasc.load(source)
    plan = program.compile("gsm8k", 875, folder=tmp_path)
    assert command.returncode == 0 and plan.diagnostics  # a template past the budget: a warning
    assert command.stdout == plan.to_json() and command.stderr == plan.diagnostics_text + "\n"
    assert program.compile("gsm8k", 875, folder=tmp_path).to_json() == plan.to_json()  # one Program, twice
    elsewhere = program.compile("gsm8k", 875, folder=tmp_path / "plans")
    assert elsewhere.to_json() != plan.to_json()  # its source path is relative to the other folder
    os.mkdir(tmp_path / "plans")
    elsewhere.save(tmp_path / "plans" / "plan.json")
    assert bamasc.Plan.load(tmp_path / "plans" / "plan.json").bound == plan.bound
