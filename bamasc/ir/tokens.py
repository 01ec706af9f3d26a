"""Compile-time token bounds for the fixed text of a role's prompt."""

from __future__ import annotations

import re

from bamasc.combinators.tools import RESULT_FRAMING, TOOL_SPEC_FRAMING, TOOLS_FRAMING, output_schema_tokens  # noqa: F401
from bamasc.program import Model, Role

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
