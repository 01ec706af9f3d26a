"""Code lens text: each topology's and system's proven bound, and the command that shows it in full."""

from __future__ import annotations

import os
import shlex

from bamasc.lsp.bounds import COMPUTING, DONE, ERRORS
from bamasc.lsp.hover import cost_text
from bamasc.records import record
from bamasc.source import Span
from bamasc.syntax import ast


@record
class Lens:
    span: Span  # the declaration's name
    title: str
    command: str | None = None  # a command line to suggest, when the lens is one


def lenses(analysis, bound_state, root: str | None = None) -> list[Lens]:
    module = analysis.loaded.modules.get(analysis.path)
    program = analysis.program
    if module is None or program is None:
        return []
    status, value = bound_state
    where = _shown(analysis.path, root)
    found = []
    for decl in module.declarations:
        if isinstance(decl, ast.SystemDecl) and decl.name in program.systems:
            found.append(Lens(decl.name_span, _status_title(status, value) or _system_title(value[decl.name])))
            found.append(Lens(decl.name_span, "bamasc compile", f"bamasc compile {where} --system {shlex.quote(decl.name)}"))
        elif isinstance(decl, ast.TopologyDecl):
            users = [s for s in program.systems.values() if decl.name in s.topologies]
            if not users:
                found.append(Lens(decl.name_span, "no system uses this topology"))
                continue
            title = _status_title(status, value) or "; ".join(
                _template_title(value[s.name], decl.name) for s in users if s.name in value
            )
            found.append(Lens(decl.name_span, title))
            line = f"bamasc explain {where} --system {shlex.quote(users[0].name)} --template {shlex.quote(decl.name)}"
            found.append(Lens(decl.name_span, "bamasc explain", line))
    return found


def _status_title(status, value) -> str | None:
    if status == ERRORS:
        return "worst case: fix the errors first"
    if status == COMPUTING:
        return "worst case: computing…"
    if status != DONE:
        return f"worst case: the compiler failed ({value})"
    return None


def _system_title(bound) -> str:
    if bound.budget is None:
        return "no budget declared"
    if not bound.fits:
        return f"no template fits {bound.budget:g} µ$"
    chosen = bound.template(bound.selected)
    return f"worst case {cost_text(chosen)} ({bound.selected}), within {bound.budget:g} µ$"


def _template_title(bound, template: str) -> str:
    found = bound.template(template)
    if bound.budget is None or found is None:
        return f"{bound.system}: no budget declared"
    verdict = "fits" if found.feasible else "does not fit"
    return f"{bound.system}: {cost_text(found)}, {verdict} {bound.budget:g} µ$"


def _shown(path: str, root: str | None) -> str:
    """The file as a command run from the workspace root names it."""
    if root:
        relative = os.path.relpath(path, root)
        if not relative.startswith(os.pardir):
            path = relative
    return shlex.quote(path)
