"""A hostile model in a tool loop: it never stops asking, asks for tools it was not given, sends malformed or
huge arguments, too many calls, and ids and names no provider would send. No run is charged more than its
bound or its budget, none hangs, and each ends with a status, never a traceback.

The model is a scripted provider that reports usage the way the fake does (a
byte a token) and never bills more output than the cap it was sent.
"""

from __future__ import annotations

import asyncio
import json

import pytest

from bamasc.runtime.providers.base import GREEDY, Completion, ProviderError, ToolCall
from bamasc.runtime.retry import RetryPolicy
from bamasc.runtime.tokens import content_bytes, safe_prompt_bound, specs_tokens
from bamasc.runtime.tool_loop import INVALID_NAME, MAX_CALL_ID_BYTES
from tests.helpers.tools import SOURCE
from tests.runtime.processes import no_leftover_process  # noqa: F401 (fixture)
from tests.runtime.tool_templates import Lines, compiled, run_task

pytest.importorskip("jsonschema", reason="tools check their arguments with jsonschema (the mcp extra)")
pytestmark = pytest.mark.usefixtures("no_leftover_process")

TOOLS = "def lookup(q: str) -> str:\n    return 'order ' + q[:20]\n"
MEGABYTE = 1 << 20


class Scripted:
    """A model whose every reply asks for `script(round)` tool calls, in rounds sent with tools or not."""

    def __init__(self, name: str, script) -> None:
        self.name = name
        self.script = script
        self.rounds = 0

    def count_prompt_tokens(self, messages) -> int:
        return safe_prompt_bound(messages)

    async def complete(self, messages, max_tokens: int, *, timeout: float, decoding=GREEDY, expect: str = "text",
                       tools: tuple = ()) -> Completion:
        calls = tuple(self.script(self.rounds))
        self.rounds += 1
        used = min(max_tokens, sum(content_bytes(str(call.arguments)) for call in calls))  # it bills within its cap
        return Completion("", safe_prompt_bound(messages) + specs_tokens(tools), used, "tool_calls", tool_calls=calls)

    async def aclose(self) -> None:
        return None


def asking(*calls):
    return lambda number: [ToolCall(f"c{number}_{i}", name, arguments) for i, (name, arguments) in enumerate(calls)]


SCRIPTS = {
    "never stops": asking(("lookup", '{"q": "A1"}'), ("lookup", '{"q": "A2"}')),
    "undeclared tools": asking(("rm_rf", "{}"), ("files__read_file", '{"path": "/etc/passwd"}')),
    "a megabyte name": asking(("x" * MEGABYTE, "{}"), ("look up!", "{}")),
    "malformed arguments": asking(("lookup", "{not json"), ("lookup", "[1, 2]")),
    "arguments off the schema": asking(("lookup", '{"q": 5}'), ("lookup", '{"q": ["A1"], "more": [1]}')),
    "deeply nested arguments": asking(("lookup", "[" * 3000 + "]" * 3000), ("lookup", "")),
    "a megabyte of arguments": asking(("lookup", json.dumps({"q": "x" * MEGABYTE}))),
    "fifty calls a round": asking(*[("lookup", '{"q": "A%d"}' % i) for i in range(50)]),
    "ids too long or shared": lambda number: [ToolCall("i" * 1000, "lookup", '{"q": "A"}'),
                                              ToolCall("i" * 1000, "lookup", '{"q": "B"}')],
}


@pytest.fixture(scope="module")
def plan(tmp_path_factory):
    folder = tmp_path_factory.mktemp("hostile")
    return (*compiled(folder, SOURCE, "hostile_tools", TOOLS), folder)


@pytest.mark.parametrize("case", sorted(SCRIPTS))
def test_a_hostile_model_is_held_to_the_bound(plan, case):
    program, system, template, folder = plan
    node = template.nodes[0]
    trace = Lines()
    model = Scripted("m0", SCRIPTS[case])
    result, guard = run_task(program, system, template, {"m0": model}, template.worst_case_cost, trace=trace,
                             base_dir=str(folder))
    assert result.status in ("ok", "exhausted", "failed"), result.error
    assert guard.charged <= template.worst_case_cost + 1e-6 and not guard.overran
    assert model.rounds <= node.rounds + 1
    rounds = trace.of("call")
    for line in rounds:
        assert line["prompt_tokens"] <= node.round_input_tokens[line["round"]] or line["skipped"]
    tools = trace.of("tool")
    assert all(len([t for t in tools if t["round"] == k]) <= node.tool_calls for k in range(node.rounds))
    assert all(len(line["name"]) <= 80 for line in tools)
    if case == "a megabyte of arguments":  # its re-sent prompt fits no budget: the loop stops with what it has
        assert result.exhausted == "budget" and [line["skipped"] for line in rounds] == [False, True, True]
        assert [line["round"] for line in rounds] == [0, 1, node.rounds]
    elif case != "deeply nested arguments":  # 6 kB re-sent each round: the budget decides how far it goes
        # Its final round, too, held only tool calls and no text: no answer, so the task is not `ok`.
        assert result.status == "failed" and "final answer was empty" in result.error
        assert result.answer is None and len(rounds) == node.rounds + 1
    if case == "never stops":
        assert not any(line["error"] for line in tools) and len(tools) == node.rounds * node.tool_calls
        assert guard.charged == pytest.approx(sum(line["charged"] for line in trace.lines if "charged" in line))
    if case in ("undeclared tools", "a megabyte name", "malformed arguments", "arguments off the schema",
                "deeply nested arguments"):
        assert tools and all(line["error"] and line["charged"] == 0 for line in tools)


def test_the_conversation_resends_ids_and_names_the_bound_counts(plan):
    program, system, template, folder = plan
    seen = []

    class Watching(Scripted):
        async def complete(self, messages, max_tokens, **options):
            seen.append(messages)
            return await super().complete(messages, max_tokens, **options)

    script = lambda number: [ToolCall("i" * 1000, "x" * 5000, "{}"), ToolCall("i" * 1000, "lookup", '{"q": "A"}'),
                             ToolCall("ok", "lookup", '{"q": "B"}')]
    run_task(program, system, template, {"m0": Watching("m0", script)}, template.worst_case_cost,
             base_dir=str(folder))
    last = seen[-1]
    asked = [call for message in last for call in message.tool_calls]
    answered = [message.tool_call_id for message in last if message.role == "tool"]
    assert len(asked) == 3 * 2  # two calls kept a round, of three asked
    assert all(content_bytes(call.id) <= MAX_CALL_ID_BYTES for call in asked)
    assert len(set(call.id for call in asked[:2])) == 2 and answered == [call.id for call in asked]
    assert {call.name for call in asked} == {INVALID_NAME, "lookup"}


def test_a_model_that_fails_in_a_round_ends_the_task_with_an_error_not_a_traceback(plan):
    program, system, template, folder = plan

    class Failing(Scripted):
        async def complete(self, messages, max_tokens, **options):
            if self.rounds == 1:
                raise ProviderError("the server broke", kind="server")
            return await super().complete(messages, max_tokens, **options)

    result, guard = run_task(program, system, template, {"m0": Failing("m0", SCRIPTS["never stops"])},
                             template.worst_case_cost, base_dir=str(folder),
                             retry=RetryPolicy(max_attempts=2, base_delay=0.0, max_delay=0.0, timeout=5.0))
    assert result.status == "error" and "the server broke" in result.error
    assert guard.charged <= template.worst_case_cost


def test_a_run_cancelled_while_tools_run_keeps_their_prices(tmp_path):
    slow = "import time\n\ndef lookup(q: str) -> str:\n    time.sleep(3)\n    return q\n"
    program, system, template = compiled(tmp_path, SOURCE.replace("hostile_tools", "slow_tools"), "slow_tools", slow)
    trace = Lines()

    async def main():
        from bamasc.metering.guard import BudgetGuard
        from bamasc.runtime.interpreter import TaskRun
        from bamasc.runtime.tools import ToolSet

        guard = BudgetGuard(template.worst_case_cost)
        async with ToolSet(program.tools.values(), base_dir=str(tmp_path)) as tools:
            run = TaskRun(program, system, template, {"m0": Scripted("m0", SCRIPTS["never stops"])}, guard, "t",
                          "t" * 40, trace, tools=tools)
            task = asyncio.ensure_future(run.run())
            while not trace.of("reserve") or len(trace.of("reserve")) < 3:  # round 0 and its two tools' prices
                await asyncio.sleep(0.01)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
        return guard

    guard = asyncio.run(main())
    tools = trace.of("tool")
    assert len(tools) == 2 and all(line["error"].startswith("cancelled") and line["charged"] == 10 for line in tools)
    assert guard.held == pytest.approx(0) and guard.charged == pytest.approx(
        sum(line["charged"] for line in trace.lines if line["type"] in ("call", "tool")))
