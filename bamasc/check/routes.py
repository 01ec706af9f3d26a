"""Checks a `route` of a flow: its router, its branch names and its fallback."""

from __future__ import annotations

from bamasc.diagnostics import Diagnostic, Note, error, warning
from bamasc.syntax import ast


def check_route(node: ast.Route, expression, call, slot_by_name, diagnostics: list[Diagnostic]) -> str:
    """Diagnostics for `node`; `expression` checks a branch's flow and returns its kind,
    `call` checks the router's slot call. Returns the route's kind ("list" when every branch is one)."""
    call(node.call)
    router = slot_by_name.get(node.call.slot)
    if router is not None and (router.lo < 1 or router.hi > 1):
        diagnostics.append(
            error(
                "BAM307",
                f"the router '{node.call.slot}' of a route makes exactly one call, but its slot has range [{router.lo}..{router.hi}]",
                node.call.span,
                hint=f"give slot '{node.call.slot}' the range [1..1]",
            )
        )
    seen: dict[str, ast.Branch] = {}
    fallbacks = [branch for branch in node.branches if branch.fallback]
    for extra in fallbacks[1:]:
        diagnostics.append(
            error("BAM101", "a route has more than one 'otherwise' branch", extra.name_span, Note("the first", fallbacks[0].name_span))
        )
    for branch in node.branches:
        if branch.fallback:
            continue
        first = seen.get(branch.name.lower())
        if first is not None and first.name == branch.name:
            diagnostics.append(
                error("BAM101", f"branch '{branch.name}' is declared twice in this route", branch.name_span,
                      Note("first declared here", first.name_span))
            )
        elif first is not None:
            diagnostics.append(
                warning(
                    "BAM309",
                    f"branch '{branch.name}' can never run: the router's output is matched without regard to case, "
                    f"and '{first.name}' comes first",
                    branch.name_span,
                    Note("this branch takes every output naming either", first.name_span),
                    hint=f"rename '{branch.name}' or merge it into '{first.name}'",
                )
            )
        else:
            seen[branch.name.lower()] = branch
    if not fallbacks:
        diagnostics.append(
            warning(
                "BAM310",
                f"route on '{node.call.slot}' has no 'otherwise' branch: a router output that names no branch fails the task",
                node.call.span,
                hint="add `otherwise: <flow>` as the last branch",
            )
        )
    kinds = [expression(branch.expr) for branch in node.branches]
    return "list" if kinds and all(kind == "list" for kind in kinds) else "single"
