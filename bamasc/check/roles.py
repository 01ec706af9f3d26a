"""Reads and checks `role` declarations: prompt, system prompt, output cap, what the output is, its tools."""

from __future__ import annotations

from bamasc.check.attributes import Attributes
from bamasc.check.decoding import DECODING_ATTRIBUTES, read_decoding
from bamasc.check.tools import ROLE_TOOL_ATTRIBUTES, read_tool_use
from bamasc.program import READS, Role
from bamasc.diagnostics import Diagnostic
from bamasc.syntax import ast

ROLE_ATTRIBUTES = ("prompt", "system", "max_output", "reads", *DECODING_ATTRIBUTES, *ROLE_TOOL_ATTRIBUTES)


def read_role(decl: ast.RoleDecl, diagnostics: list[Diagnostic]) -> Role:
    attrs = Attributes(f"role '{decl.name}'", decl.attrs, ROLE_ATTRIBUTES, diagnostics, decl.name_span)
    # `max_output = lo..hi` lets the binder pick each seat's cap in the range (optimize/caps.py).
    low, high = attrs.token_range("max_output") or (None, None)
    return Role(
        name=decl.name,
        prompt=attrs.string("prompt", 'prompt = "Solve: {{task}}"') or "",
        system=attrs.string("system"),
        max_output=high,
        min_output=low if low != high else None,
        reads=attrs.choice("reads", READS, "text"),
        span=decl.name_span,
        spans=attrs.spans(),
        decoding=read_decoding(attrs, diagnostics),
        **read_tool_use(attrs, decl.name, diagnostics),
    )
