"""Code lenses: each topology's and system's proven bound, and the command line that shows it in full.

Every lens carries a command the server implements: a bound's lens shows the bound in full
(`explanation`, for the `bamasc.showBound` command); a suggestion's shows its command line.
"""

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
    explains: tuple[str, str] | None = None  # ("system" or "topology", name): the bound a lens shows in full


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
            title = _status_title(status, value) or _system_title(value[decl.name])
            found.append(Lens(decl.name_span, title, explains=("system", decl.name)))
            found.append(Lens(decl.name_span, "bamasc compile", f"bamasc compile {where} --system {shlex.quote(decl.name)}"))
        elif isinstance(decl, ast.TopologyDecl):
            users = [s for s in program.systems.values() if decl.name in s.topologies]
            if not users:
                found.append(Lens(decl.name_span, "no system uses this topology", explains=("topology", decl.name)))
                continue
            title = _status_title(status, value) or "; ".join(
                _template_title(value[s.name], decl.name) for s in users if s.name in value
            )
            found.append(Lens(decl.name_span, title, explains=("topology", decl.name)))
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
    if len(bound.classes) > 1:  # each length class's selected template and bound, shortest first
        parts = []
        for length in bound.classes:
            chosen = next((t for t in length.templates if t.template == length.selected), None)
            shown = f"{cost_text(chosen)} ({length.selected})" if chosen is not None else "no template fits"
            parts.append(f"≤{length.task_tokens} tok: {shown}")
        return f"worst case {'; '.join(parts)}; within {bound.budget:g} µ$"
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


def explanation(analysis, bound_state, kind: str, name: str) -> str:
    """The bound a lens shows, in full and as plain text (for a message): every template of every length
    class of the system, or of every system that lists the topology."""
    program = analysis.program
    status, value = bound_state
    title = _status_title(status, value)
    if title is not None or program is None:
        return f"{kind} {name}: {title or 'fix the errors first'}"
    if kind == "system":
        systems = [program.systems[name]] if name in program.systems else []
        template = None
    else:
        systems = [s for s in program.systems.values() if name in s.topologies] if name in program.topologies else []
        template = name
    if not systems:
        return f"{kind} {name}: " + ("no system uses this topology" if name in program.topologies else "not declared here")
    return "\n\n".join(bound_text(value[s.name], template) for s in systems if s.name in value)


def bound_text(bound, template: str | None) -> str:
    """One system's bounds as plain text: a line per template of each length class, and the selected one."""
    if bound.budget is None:
        return f"system {bound.system} declares no budget: nothing to bind"
    lines = [f"system {bound.system}, worst case per task at its budget of {bound.budget:g} µ$ (proven by the binder):"]
    for length in bound.classes:
        if len(bound.classes) > 1:
            lines.append(f"tasks up to {length.task_tokens} tokens:")
        for found in length.templates:
            if template is None or found.template == template:
                verdict = "fits" if found.feasible else "does not fit"
                seats = f" ({', '.join(found.seats)})" if found.seats else ""
                lines.append(f"  {found.template}: {cost_text(found)}, {verdict}{seats}")
        if template is None:
            lines.append(f"  selected: {length.selected}" if length.selected else "  no template fits")
    return "\n".join(lines)
