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
    known = set(BUILTIN_PLACEHOLDERS) | _flow_inputs(modules)
    diagnostics = []
    for module in modules.values():
        for decl in module.declarations:
            if not isinstance(decl, ast.RoleDecl):
                continue
            for attr in decl.attrs:
                if isinstance(attr, ast.Attr) and attr.name in ("prompt", "system") and isinstance(attr.value, ast.String):
                    diagnostics.extend(_check_string(decl.name, attr.value, known))
    return diagnostics


def placeholders(text: str) -> list[tuple[str, bool]]:
    """(name, optional) for every `{{name}}` / `{{name?}}` in a prompt."""
    return [(m.group(1).rstrip("?"), m.group(1).endswith("?")) for m in PLACEHOLDER.finditer(text)]


def _flow_inputs(modules) -> set[str]:
    names = set()
    for module in modules.values():
        for decl in module.declarations:
            if isinstance(decl, ast.TopologyDecl):
                for flow in decl.flows:
                    for statement in flow.statements:
                        names.update(_call_args(statement.expr))
    return names


def _call_args(expr) -> set[str]:
    call = expr if isinstance(expr, ast.SlotCall) else getattr(expr, "call", None)
    return {arg.name for arg in call.args} if call is not None else set()


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
