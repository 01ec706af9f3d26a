"""Tool declarations for the tools tests, as the checker makes them from a `tool` block."""

from __future__ import annotations

from bamasc.program import DEFAULT_MAX_SPEC_TOKENS, Tool
from bamasc.source import Span

SPAN = Span("tools.bam", 1, 1, 1, 2)


def python_tool(name: str, target: str, *, description: str | None = None, parameters: dict | None = None,
                max_result: int = 200, timeout_s: float = 5.0, price: float = 0.0,
                max_spec: int = DEFAULT_MAX_SPEC_TOKENS) -> Tool:
    return Tool(name, "python", target, description, parameters, (), max_result, timeout_s, price, SPAN,
                max_spec=max_spec)


def mcp_tool(name: str, command: str, allow: tuple[str, ...], *, max_result: int = 300, timeout_s: float = 30.0,
             price: float = 0.0, max_spec: int = DEFAULT_MAX_SPEC_TOKENS) -> Tool:
    return Tool(name, "mcp", command, None, None, allow, max_result, timeout_s, price, SPAN, max_spec=max_spec)
