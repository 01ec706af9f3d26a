"""A tool-using call at run time: its rounds, each admitted like any call, and its tool calls, within its bound.

The bound is combinators/tools.py's. A call whose plan node has `rounds` (R)
and `tool_calls` (C) makes up to R + 1 model calls on its seat, its rounds,
all under its node id:

- round k < R is sent with the role's tool specs; its messages are the
  call's own, then for each earlier round the assistant message (its text and
  the tool calls kept from it) and one tool message per kept call;
- each round is an attempt like any call's (`TaskRun.send`): admitted by the
  deadline, the budget guard and the rate pace before it is sent, and retried
  under the same policy; its reserve and call lines carry its `round`;
- a round whose reply asks for no tool ends the loop, and so does the final
  round R, sent without tools (tool calls in its reply are ignored): the text
  of the last round made is the call's answer;
- a round the links refuse (the budget has no room for it, or the deadline)
  ends the loop with the final round instead, if that is admitted; a refused
  final round stops the task (`on_exhausted`);
- of a reply's tool calls the first C run, together, and the rest are dropped
  from the conversation, so a round re-sends at most C results, as the bound
  counts. A call id that is empty, used twice or longer than MAX_CALL_ID_BYTES
  is re-sent as one of ours, and a name that no provider accepts as
  INVALID_NAME (the tool call itself gets the name the model wrote, and its
  error result says there is no such tool);
- a tool's price is held on the task's guard before the call runs and charged
  after it (ToolResult.price: 0 when the call was refused before the tool
  ran); a call whose price the budget has no room for is not run, and its
  result says so. Each call has a `tool` line in the trace (docs/trace.md).

The prompt a round is reserved for is the call's own prompt as any call
counts it, plus the specs and the conversation counted as the bound counts
them (runtime/tokens.py: `specs_tokens`, `message_tokens`): a byte a token.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os

from bamasc.combinators.tools import RESULT_FRAMING
from bamasc.ir.tokens import MESSAGE_OVERHEAD_TOKENS
from bamasc.metering.afford import MIN_USEFUL_TOKENS
from bamasc.metering.calibrate import CALIBRATION_MARGIN_TOKENS
from bamasc.metering.admission import Attempt
from bamasc.metering.refusals import BudgetExhausted, Refused
from bamasc.runtime.outcomes import TaskError
from bamasc.runtime.providers.base import Message, ToolCall
from bamasc.runtime.providers.fake_tools import tools_expect
from bamasc.runtime.tokens import calibrated_prompt, content_bytes, message_tokens, specs_tokens

# RESULT_FRAMING (combinators/tools.py) counts each call id, which the call and its result both carry, at 40 bytes.
MAX_CALL_ID_BYTES = 40
INVALID_NAME = "invalid_tool_name"  # re-sent for a name a provider would refuse (the model's own is in the trace)
_SAFE_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-")


def declarations(program, plans) -> list:
    """The `tool` declarations (program.Tool) that the templates of `plans` (SystemPlans) use, in the program's order."""
    used = {reference.partition(".")[0] for plan in plans for template in plan.templates for node in template.nodes
            for reference in (getattr(node, "tools", None) or ())}
    return [tool for name, tool in getattr(program, "tools", {}).items() if name in used]


def tool_session(program, plans):
    """What a run's tools start in (`async with tool_session(...) as tools`): a ToolSet of the tools `plans` use,
    searched for and started in the folder of the program's .bam file; no tools (None) when they use none."""
    tools = declarations(program, plans)
    if not tools:
        return contextlib.nullcontext()
    from bamasc.runtime.tools import ToolSet

    roots = getattr(program, "root_files", ())
    return ToolSet(tools, base_dir=os.path.dirname(os.path.abspath(roots[0])) if roots else None)


async def run_loop(run, request, node, role, model, provider, messages: list, cap: int, expect: str) -> str:
    """Make the call of `request` (plan node `node`) as its tool loop; returns the text of its last round."""
    toolset = run.tools
    if toolset is None:
        raise TaskError(f"{node.id} (role '{role.name}') uses tools, and this run started none")
    specs = toolset.specs(role)
    decls = _declarations_by_name(run.program, role, specs)
    hint = tools_expect(node.tool_calls, _costliest(specs, decls), expect)
    own = run.count_prompt(provider, messages)
    with_specs = specs_tokens(specs)
    conversation: list[Message] = []
    added = 0  # tokens of the conversation, as the bound counts them
    number = 0
    while True:
        final = number >= node.rounds
        if not final and not room_for_answer(run, node, model, role, messages + conversation, own + added, specs,
                                             cap, decls):
            # Another round that may ask for tools would leave no room for the answer: refused as the guard refuses
            # one (a skipped line in the trace), and the final round follows.
            skipped = Attempt(request, node, model, 1, own + added + with_specs, cap, run.retry.timeout, number)
            run.admissions(model).refused(skipped, BudgetExhausted(node.id))
            number = node.rounds
            continue
        try:
            completion = await run.send(
                request, node, role, model, provider, messages + conversation, own + added + (0 if final else with_specs),
                cap, expect if final else hint, () if final else specs, number,
            )
        except Refused:
            if final:
                raise
            number = node.rounds  # no room for another round that may ask for tools: the final one, if it fits
            continue
        if final or not completion.tool_calls:
            return completion.text
        asked = completion.tool_calls[: node.tool_calls]
        sent = kept_calls(asked, number, {spec.name for spec in specs})
        results = await run_calls(run, node, number, role, asked, decls)
        answers = [Message("assistant", completion.text, tool_calls=sent)]
        answers += [Message("tool", result.text, tool_call_id=call.id) for call, result in zip(sent, results)]
        conversation += answers
        added += sum(message_tokens(message) for message in answers)
        number += 1


def room_for_answer(run, node, model, role, sent: list, bound: int, specs, cap: int, decls: dict) -> bool:
    """Whether the budget holds another round that may ask for tools (its prompt `sent`, bounded by `bound` without
    its specs) at its whole cap, its tool calls' prices, and after them a final round that answers.

    The final round after it holds what it adds: its assistant message (at most `cap` tokens, as the loop's bound
    counts it, and a message's framing) and C results. Bounded by what this round is billed (at most its calibrated
    bound) plus those (metering/calibrate.py), or by its bytes, whichever is less, that final round is admitted
    with at least a useful output. Without this check a loop whose model always asks for tools spends the budget on
    tool rounds and has none left for its answer. A guard that does not reserve (posthoc, none) is not asked."""
    guard = run.guard
    if getattr(guard, "kind", "reserve") != "reserve":
        return True
    with_specs = bound + specs_tokens(specs)
    this_round = run.calibration.bound(run.task_id, model.name, calibrated_prompt(sent, specs, role.output_schema),
                                       with_specs)
    tools = [decls[spec.name] for spec in specs]
    added = cap + MESSAGE_OVERHEAD_TOKENS + node.tool_calls * (max(tool.max_result for tool in tools) + RESULT_FRAMING)
    answer = min(bound + added, this_round + added + CALIBRATION_MARGIN_TOKENS)
    pricing = model.prices()
    need = (sum(pricing.worst_cost(this_round, cap)) + node.tool_calls * max(float(tool.price or 0) for tool in tools)
            + sum(pricing.worst_cost(answer, min(MIN_USEFUL_TOKENS, cap))))
    return guard.remaining >= need - 1e-9


def kept_calls(asked, number: int, names: set[str]) -> tuple[ToolCall, ...]:
    """The tool calls of round `number` as the conversation re-sends them: ids and names the bound can count."""
    kept: list[ToolCall] = []
    seen: set[str] = set()
    for index, call in enumerate(asked):
        call_id = call.id if isinstance(call.id, str) else ""
        if not 0 < content_bytes(call_id) <= MAX_CALL_ID_BYTES or call_id in seen:
            call_id = f"call_{number}_{index}"
            while call_id in seen:
                call_id += "_"
        seen.add(call_id)
        name = call.name if isinstance(call.name, str) else ""
        if name not in names and not (0 < len(name) <= 64 and set(name) <= _SAFE_NAME_CHARS):
            name = INVALID_NAME
        kept.append(ToolCall(call_id, name, _arguments_text(call.arguments)))
    return tuple(kept)


async def run_calls(run, node, number: int, role, asked, decls: dict) -> list:
    """Run round `number`'s tool calls together, each price held first and charged after; their results, in order."""
    from bamasc.runtime.tool_text import error_text, quoted
    from bamasc.runtime.tools import ToolResult

    guard, trace = run.guard, run.trace
    holds: list[float | None] = []  # µ$ held per call; None: the budget had no room for its price
    lines: list[str | None] = []
    for call in asked:
        decl = decls.get(call.name)
        price = float(decl.price or 0.0) if decl is not None else 0.0
        held = price if price <= 0 or guard.hold(price) else None
        holds.append(held)
        lines.append(None if trace is None or not held else trace.reserve(
            {"task_id": run.task_id, "node": node.id, "round": number, "tool": _name(call.name), "reserved": held}))

    async def one(call, held):
        if held is not None:
            return await run.tools.call(call.name if isinstance(call.name, str) else "", _arguments_text(call.arguments),
                                        role=role)
        decl = decls[call.name]
        why = f"not run: the task's budget has no room for its price of {decl.price:g} µ$"
        text, truncated, total = error_text(why, decl.max_result)
        return ToolResult(quoted(call.name), text, truncated, why, 0.0, 0.0, content_bytes(_arguments_text(call.arguments)),
                          total)

    try:
        results = await asyncio.gather(*(one(call, held) for call, held in zip(asked, holds)))
    except BaseException:
        # Stopped from outside while tools ran: each may have run, so every price held is kept.
        for call, held, line in zip(asked, holds, lines):
            if held:
                guard.settle_held(held, held)
                _write(trace, run.task_id, node.id, number, line, call, None, held, held,
                       "cancelled: the run stopped while the tool ran; its price kept")
        raise
    for call, held, line, result in zip(asked, holds, lines, results):
        charged = guard.settle_held(held, result.price) if held is not None else 0.0
        _write(trace, run.task_id, node.id, number, line, call, result, held or 0.0, charged, result.error)
    return results


def _write(trace, task_id, node_id, number, line, call, result, reserved, charged, error) -> None:
    if trace is None:
        return
    trace.tool({
        "id": line, "task_id": task_id, "node": node_id, "round": number,
        "name": result.name if result is not None else _name(call.name),
        "call_id": _name(call.id) if isinstance(call.id, str) and call.id else None,
        "arguments_bytes": content_bytes(_arguments_text(call.arguments)) if result is None else result.arguments_bytes,
        "result_bytes": 0 if result is None else result.result_bytes,
        "truncated": False if result is None else result.truncated,
        "duration_ms": 0.0 if result is None else round(result.duration_s * 1000, 3),
        "reserved": round(reserved, 6), "charged": round(charged, 6), "error": error,
    })


def _declarations_by_name(program, role, specs) -> dict:
    """The role's tool declarations by the names the model sees."""
    return {spec.name: program.tools[spec.reference.partition(".")[0]] for spec in specs}


def _costliest(specs, decls: dict) -> str:
    """The name of the tool whose call costs the most: the largest result (re-sent every later round), then the price."""
    return max(specs, key=lambda spec: (decls[spec.name].max_result, decls[spec.name].price)).name


def _arguments_text(arguments) -> str:
    if isinstance(arguments, str):
        return arguments
    try:
        return json.dumps(arguments)
    except (TypeError, ValueError):
        return str(arguments)


def _name(name) -> str:
    """A tool name for a trace line: a model may send a megabyte as one."""
    from bamasc.runtime.tool_text import cut_text

    return cut_text(name if isinstance(name, str) else str(name), 80)[0]
