"""Checks prompt placeholders: every `{{name}}` must be something the role can receive."""

from __future__ import annotations

import re

from bamasc.check.attributes import did_you_mean
from bamasc.diagnostics import Diagnostic, error
from bamasc.source import Span
from bamasc.syntax import ast

PLACEHOLDER = re.compile(r"\{\{\s*([^{}]*?)\s*\}\}")
NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\??")

# What the combinators hand to a call besides its named inputs (docs/language.md, "Prompts").
BUILTIN_PLACEHOLDERS = ("task", "previous", "solution", "feedback", "plan", "step")


def check_prompts(modules: dict[str, ast.Module]) -> list[Diagnostic]:
    passed = _flow_inputs(modules)
    diagnostics = []
    for module in modules.values():
        for decl in module.declarations:
            if not isinstance(decl, ast.RoleDecl):
                continue
            known = set(BUILTIN_PLACEHOLDERS) | passed.get(decl.name, set())
            for attr in decl.attrs:
                if isinstance(attr, ast.Attr) and attr.name in ("prompt", "system") and isinstance(attr.value, ast.String):
                    diagnostics.extend(_check_string(decl.name, attr.value, known))
    return diagnostics


def placeholders(text: str) -> list[tuple[str, bool]]:
    """(name, optional) for every `{{name}}` / `{{name?}}` in a prompt."""
    return [(m.group(1).rstrip("?"), m.group(1).endswith("?")) for m in PLACEHOLDER.finditer(text)]


def _flow_inputs(modules) -> dict[str, set[str]]:
    """Role name -> the input names some flow passes to a call of that role.

    A combinator hands its call's inputs to every slot it involves: the critic
    of a `refine`, the executor and critic of a `plan`.
    """
    by_role: dict[str, set[str]] = {}
    for module in modules.values():
        for decl in module.declarations:
            if not isinstance(decl, ast.TopologyDecl):
                continue
            role_of = {slot.name: slot.role for slot in decl.slots}
            for flow in decl.flows:
                for statement in flow.statements:
                    expr = statement.expr
                    call = expr if isinstance(expr, ast.SlotCall) else getattr(expr, "call", None)
                    if call is None:
                        continue
                    slots = [call.slot] + [
                        ident.name for ident in (getattr(expr, "critic", None), getattr(expr, "executor", None)) if ident
                    ]
                    for slot in slots:
                        if slot in role_of:
                            by_role.setdefault(role_of[slot], set()).update(arg.name for arg in call.args)
    return by_role


def _check_string(role: str, string: ast.String, known: set[str]) -> list[Diagnostic]:
    found = []
    for match in PLACEHOLDER.finditer(string.raw):
        inner = match.group(1)
        span = _span_in(string, match.start(), match.end())
        if not NAME.fullmatch(inner):
            found.append(
                error(
                    "BAM206",
                    f"malformed placeholder '{match.group()}' in role '{role}'",
                    span,
                    hint="placeholders are {{name}} or {{name?}}",
                )
            )
            continue
        name = inner.rstrip("?")
        if name not in known:
            found.append(
                error(
                    "BAM206",
                    f"unknown placeholder '{{{{{name}}}}}' in role '{role}'",
                    span,
                    hint=did_you_mean(name, known)
                    or f"the role receives: {', '.join(sorted(known))}; flows pass more by name, as in `executor(task, notes)`",
                )
            )
    return found


def _span_in(string: ast.String, start: int, end: int) -> Span:
    raw = string.raw
    line = string.span.line + raw.count("\n", 0, start)
    last_newline = raw.rfind("\n", 0, start)
    col = (string.span.col + start) if last_newline < 0 else start - last_newline
    return Span(string.span.file, line, col, line, col + (end - start))
