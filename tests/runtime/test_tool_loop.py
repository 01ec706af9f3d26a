"""The tool loop at run time reaches its proven bound exactly, and no run of it is charged more.

On random tool-using templates (tests/runtime/tool_templates.py: random R, C,
output caps, max_result, prices, tools, models with long-prompt tiers, a call
feeding the tool-using one or not), a task exactly `task_tokens` long:

- the verbose fake (every round but the last asks for C calls of the
  costliest tool with arguments filling its cap, every tool answers with its
  whole `max_result`) is charged exactly the template's bound, with the
  budget set to that bound, and each round's prompt is the plan's bound for it;
- echo, random (seeded) and verbose against hostile tools (results of a
  megabyte, errors, hangs past their timeout) are charged at most the bound.
"""

from __future__ import annotations

import random

import pytest

from bamasc.runtime.providers.fake import FakeProvider
from bamasc.runtime.trace import TaskLedger
from tests.runtime.processes import no_leftover_process  # noqa: F401 (fixture)
from tests.runtime.tool_templates import Lines, compiled, run_task, tools_source

pytest.importorskip("jsonschema", reason="tools check their arguments with jsonschema (the mcp extra)")
pytestmark = pytest.mark.usefixtures("no_leftover_process")


def tool_node(template):
    return next(node for node in template.nodes if node.rounds is not None)


def template_of(tmp_path, seed: int, hostile: bool = False):
    rng = random.Random(7100 + seed)
    module = f"loop_tools_{'hostile_' if hostile else ''}{seed}"
    source, code = tools_source(rng, module, chained=seed % 2 == 1, hostile=hostile)
    return compiled(tmp_path, source, module, code)


def fakes(program, mode: str, seed: int = 0) -> dict:
    return {name: FakeProvider(name, mode=mode, seed=seed) for name in program.systems["s"].models}


@pytest.mark.parametrize("seed", range(24))
def test_the_verbose_fake_is_charged_exactly_the_bound(tmp_path, seed):
    program, system, template = template_of(tmp_path, seed)
    trace = Lines()
    result, guard = run_task(program, system, template, fakes(program, "verbose"), template.worst_case_cost,
                             trace=trace, base_dir=str(tmp_path))
    assert result.status == "ok", result.error
    assert guard.charged == pytest.approx(template.worst_case_cost, rel=1e-9, abs=1e-6)
    node = tool_node(template)
    rounds = [line for line in trace.of("call") if line["node"] == node.id]
    assert [line["round"] for line in rounds] == list(range(node.rounds + 1))
    assert [line["prompt_tokens"] for line in rounds] == list(node.round_input_tokens)
    assert all(line["completion_tokens"] == node.output_tokens and not line["clamped"] for line in rounds)
    tools = trace.of("tool")
    assert len(tools) == node.rounds * node.tool_calls
    assert sum(line["charged"] for line in tools) == pytest.approx(node.tool_cost)
    assert not any(line["error"] or line["truncated"] for line in tools)
    ledger = TaskLedger()  # what --resume would count: every call and tool line, nothing left open
    for line in trace.lines:
        ledger.add(line)
    assert ledger.spent == pytest.approx(guard.charged) and not ledger.open


@pytest.mark.parametrize("seed", range(12))
def test_echo_and_random_runs_cost_at_most_the_bound(tmp_path, seed):
    program, system, template = template_of(tmp_path, 100 + seed)
    node = tool_node(template)
    for mode, draw in [("echo", 0)] + [("random", k) for k in range(4)]:
        trace = Lines()
        result, guard = run_task(program, system, template, fakes(program, mode, draw), template.worst_case_cost,
                                 trace=trace, base_dir=str(tmp_path))
        assert result.status == "ok", (mode, draw, result.error)
        assert guard.charged <= template.worst_case_cost + 1e-6, (mode, draw)
        rounds = [line["round"] for line in trace.of("call") if line["node"] == node.id]
        assert rounds == list(range(len(rounds))) and len(rounds) <= node.rounds + 1
        assert all(len([t for t in trace.of("tool") if t["round"] == k]) <= node.tool_calls for k in rounds)
        if mode == "echo":  # one tool call, then the answer
            assert len(trace.of("tool")) == 1 and len(rounds) == 2


@pytest.mark.parametrize("seed", range(6))
def test_verbose_against_hostile_tools_costs_at_most_the_bound(tmp_path, seed):
    program, system, template = template_of(tmp_path, 200 + seed, hostile=True)
    trace = Lines()
    result, guard = run_task(program, system, template, fakes(program, "verbose"), template.worst_case_cost,
                             trace=trace, base_dir=str(tmp_path))
    assert result.status == "ok", result.error
    assert guard.charged <= template.worst_case_cost + 1e-6
    tools = trace.of("tool")
    assert tools and all(line["error"] or line["truncated"] for line in tools)
    limits = {name: tool.max_result for name, tool in program.tools.items()}
    assert all(line["result_bytes"] > limits[line["name"]] or line["error"] for line in tools)


def test_a_round_the_budget_cannot_hold_ends_the_loop_with_the_final_round(tmp_path):
    from tests.helpers.tools import SOURCE

    source = SOURCE.replace("hostile_tools", "full_tools").replace("max_output = 64", "max_output = 32")
    program, system, template = compiled(tmp_path, source, "full_tools", "def lookup(q: str) -> str:\n    return 'r' * 120\n")
    (node,) = template.nodes
    own, first = node.input_tokens, node.round_input_tokens[0]
    per_round = node.round_input_tokens[1] - first  # the cap and C results of one round
    # Room for round 0 (at 1 µ$ a prompt token, 2 an output token), its two tool calls at 10 µ$, and a final
    # round after it; not for round 1, whose specs alone cost more than the final round does.
    final = own + per_round + 2 * 32
    budget = first + 2 * 32 + 2 * 10 + final + 0.5
    trace = Lines()
    result, guard = run_task(program, system, template, fakes(program, "verbose"), budget, trace=trace,
                             base_dir=str(tmp_path))
    rounds = trace.of("call")
    assert result.status == "ok" and result.output
    assert [(line["round"], line["skipped"]) for line in rounds] == [(0, False), (1, True), (node.rounds, False)]
    assert rounds[-1]["prompt_tokens"] == own + per_round
    assert guard.charged == pytest.approx(budget - 0.5)


def test_a_call_with_tools_in_a_run_without_them_is_a_task_error(tmp_path):
    import asyncio

    from bamasc.metering.guard import BudgetGuard
    from bamasc.runtime.interpreter import TaskRun

    program, system, template = template_of(tmp_path, 0)
    run = TaskRun(program, system, template, fakes(program, "echo"), BudgetGuard(1e9), "t", "task")
    result = asyncio.run(run.run())
    assert result.status == "error" and "uses tools, and this run started none" in result.error


def test_resume_counts_tool_lines_and_charges_a_tool_price_a_crash_left_open(tmp_path):
    import json

    from bamasc.runtime.execute import Recorder, Summary, settle_interrupted
    from bamasc.runtime.trace import read_ledgers

    path = tmp_path / "trace.jsonl"
    records = [
        {"type": "reserve", "id": "r.1", "task_id": "a", "node": "n", "model": "m", "attempt": 1, "reserved": 30.0,
         "round": 0},
        {"type": "call", "id": "r.1", "task_id": "a", "node": "n", "charged": 25.0, "round": 0},
        {"type": "tool", "id": None, "task_id": "a", "node": "n", "round": 0, "name": "free", "charged": 0.0},
        {"type": "reserve", "id": "r.2", "task_id": "a", "node": "n", "round": 0, "tool": "paid", "reserved": 50.0},
        {"type": "reserve", "id": "r.3", "task_id": "a", "node": "n", "round": 0, "tool": "paid", "reserved": 50.0},
        {"type": "tool", "id": "r.3", "task_id": "a", "node": "n", "round": 0, "name": "paid", "charged": 50.0},
    ]
    path.write_text("".join(json.dumps(record) + "\n" for record in records))
    ledger = read_ledgers(str(path))["a"]
    assert ledger.charged == 75.0 and list(ledger.open) == ["r.2"] and ledger.spent == 125.0
    recorder = Recorder(str(path), Summary(), None)
    try:
        assert settle_interrupted(recorder, "a", ledger) == 125.0
    finally:
        recorder.close()
    last = json.loads(path.read_text().splitlines()[-1])
    assert last["type"] == "tool" and last["id"] == "r.2" and last["charged"] == 50.0
    assert last["error"].startswith("interrupted")
    assert read_ledgers(str(path))["a"].spent == 125.0 and not read_ledgers(str(path))["a"].open
