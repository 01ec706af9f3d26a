"""Reads and checks `role` declarations: prompt, system prompt, output cap, what the output is, its tools, its weight,
its thread history's cap."""

from __future__ import annotations

from bamasc.check.attributes import Attributes, declares, out_of_range
from bamasc.check.decoding import DECODING_ATTRIBUTES, read_decoding
from bamasc.check.tools import ROLE_TOOL_ATTRIBUTES, read_tool_use
from bamasc.limits import MAX_WEIGHT
from bamasc.program import READS, Role
from bamasc.diagnostics import Diagnostic, error
from bamasc.syntax import ast

ROLE_ATTRIBUTES = declares("a role", ("prompt", "system", "max_output", "reads", "weight", "history",
                                      *DECODING_ATTRIBUTES, *ROLE_TOOL_ATTRIBUTES))


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
        weight=_weight(attrs.value("weight"), diagnostics),
        history=attrs.token_count("history"),
        **read_tool_use(attrs, decl.name, diagnostics),
    )


def _weight(value, diagnostics: list[Diagnostic]) -> float | None:
    """`weight`: a positive number with no unit; None (the default rule) when absent or wrong."""
    if value is None:
        return None
    if not isinstance(value, ast.Number) or value.unit or not value.value > 0:
        diagnostics.append(
            error("BAM209", "weight must be a positive number (what a seat of this role is worth under "
                  "`objective = value`)", value.span, hint="write e.g. `weight = 4`, or leave it out for the default")
        )
        return None
    if value.value > MAX_WEIGHT:
        diagnostics.append(out_of_range("weight", value, MAX_WEIGHT))
        return None
    return value.value
