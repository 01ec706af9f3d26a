"""Compile-time token bounds for the fixed text of a role's prompt."""

from __future__ import annotations

import re

from bamasc.combinators.tools import RESULT_FRAMING, TOOL_SPEC_FRAMING, TOOLS_FRAMING, output_schema_tokens  # noqa: F401
from bamasc.program import Model, Role
from bamasc.records import replace

# Chat formats wrap each message in role markers and separators; 8 tokens covers
# the OpenAI, Anthropic and common GGUF chat templates per message.
MESSAGE_OVERHEAD_TOKENS = 8
# What tools add to a prompt beyond their text (RESULT_FRAMING per result, TOOL_SPEC_FRAMING per spec,
# TOOLS_FRAMING per prompt sent with tools) is defined with the tool loop (combinators/tools.py) and
# imported here, beside the message's framing.

_PLACEHOLDER = re.compile(r"\{\{[^{}]*\}\}")


def template_tokens(role: Role) -> int:
    """An upper bound on the tokens of the role's own prompt text, placeholders removed.

    Byte-level BPE and byte-fallback tokenizers emit at most one token per UTF-8
    byte, so the byte count is a bound for any of them without loading one.
    """
    total = len(_PLACEHOLDER.sub("", role.prompt).encode("utf-8")) + MESSAGE_OVERHEAD_TOKENS
    if role.system:
        total += len(_PLACEHOLDER.sub("", role.system).encode("utf-8")) + MESSAGE_OVERHEAD_TOKENS
    if role.output_schema is not None:  # a structured output's schema goes with every prompt of the role
        total += output_schema_tokens(role.output_schema)
    if role.history is not None:  # a thread's earlier turns, cut to this many bytes before the call (runtime/threads.py)
        total += role.history
    return total


def list_tokens(items: int) -> int:
    """Bytes the interpreter adds around `items` outputs it shows as a numbered list:
    `[1] ` before each, a blank line between (runtime/interpreter.py, `text_of`)."""
    return sum(len(str(i)) + 3 for i in range(1, items + 1)) + 2 * max(items - 1, 0)


def output_cap(role: Role, model: Model) -> int:
    """Tokens a call of `role` on `model` may emit: the smaller of the two caps."""
    caps = [cap for cap in (role.max_output, model.max_output) if cap is not None]
    if not caps:
        raise ValueError(f"neither role '{role.name}' nor model '{model.name}' caps the output")
    return min(caps)


def ranged_roles(program, role_names) -> dict[str, Role]:
    """Of `role_names`, the roles whose cap is a range `max_output = lo..hi`, by name."""
    return {name: program.roles[name] for name in role_names if program.roles[name].min_output is not None}


def caps_at(program, step: int, steps: int):
    """`program` with every `max_output = lo..hi` fixed at lo + (hi − lo)·step // steps: at step 0 the
    smallest caps, at `steps` the largest, every range the same share of the way up between."""
    ranged = ranged_roles(program, program.roles)
    if not ranged:
        return program
    roles = dict(program.roles)
    for name, role in ranged.items():
        cap = role.min_output + (role.max_output - role.min_output) * step // max(steps, 1)
        roles[name] = replace(role, max_output=cap, min_output=None)
    return replace(program, roles=roles)


def seat_model(model: Model, cap: int | None) -> Model:
    """The model as one seat runs it: its output held to the seat's chosen cap (None: no choice made), so
    that `output_cap` of the seat's role on it is that cap wherever a bound or a call is made."""
    return model if cap is None else replace(model, max_output=cap)


def seat_models(models, seats) -> dict[tuple[str, int], Model]:
    """(slot, instance) -> the model the seat runs, at its chosen cap (records with slot, instance, model, cap)."""
    return {(seat.slot, seat.instance): seat_model(models[seat.model], seat.cap) for seat in seats}
