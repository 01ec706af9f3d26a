"""Checks prompt placeholders: every `{{name}}` must be something the role can receive."""

from __future__ import annotations

import re

from bamasc.check.attributes import did_you_mean
from bamasc.combinators import CallSite, combinator_of
from bamasc.diagnostics import Diagnostic, error, warning
from bamasc.source import Span
from bamasc.syntax import ast

PLACEHOLDER = re.compile(r"\{\{\s*([^{}]*?)\s*\}\}")
NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\??")

# What the combinators hand to a call besides its named inputs (docs/language.md, "Prompts").
# A thread's earlier turns (runtime/threads.py): known to a role only with its `history = N` cap.
HISTORY = "history"
BUILTIN_PLACEHOLDERS = ("task", "previous", "solution", "feedback", "plan", "step", "transcript", "seats", "steps",
                        "earlier", "part")


def check_prompts(modules: dict[str, ast.Module]) -> list[Diagnostic]:
    passed = _flow_inputs(modules)
    diagnostics = []
    shown: dict[str, dict[str, bool]] = {}  # role -> placeholder name -> required
    for module in modules.values():
        for decl in module.declarations:
            if not isinstance(decl, ast.RoleDecl) or decl.name in shown:
                continue
            known = set(BUILTIN_PLACEHOLDERS) | passed.get(decl.name, set())
            capped = any(isinstance(a, ast.Attr) and a.name == "history" for a in decl.attrs)
            names = shown[decl.name] = {}
            strings = [attr.value for attr in decl.attrs if isinstance(attr, ast.Attr)
                       and attr.name in ("prompt", "system") and isinstance(attr.value, ast.String)]
            diagnostics.extend(_repeated(decl.name, strings))
            for attr in decl.attrs:
                if isinstance(attr, ast.Attr) and attr.name in ("prompt", "system") and isinstance(attr.value, ast.String):
                    diagnostics.extend(_check_string(decl.name, attr.value, known, capped))
                    for name, optional in placeholders(attr.value.raw):
                        # Every call of a role with a history cap gets a history (empty outside a thread).
                        if NAME.fullmatch(name) and name in known and name != HISTORY:
                            names[name] = names.get(name, False) or not optional
            if not any(isinstance(a, ast.Attr) and a.name == "prompt" and isinstance(a.value, ast.String) for a in decl.attrs):
                del shown[decl.name]  # a role without a prompt string is BAM107 or BAM108; its calls are not judged
    diagnostics.extend(_check_calls(modules, shown))
    return diagnostics


def _check_calls(modules, shown: dict[str, dict[str, bool]]) -> list[Diagnostic]:
    """Each call must fill every required placeholder of its role; an argument no role shows is a warning."""
    diagnostics = []
    for role_of, expr, optional in _flow_parts(modules):
        sites = call_sites(expr, optional)
        for site in sites:
            role = role_of.get(site.slot)
            if role in shown:  # an unknown slot or role is reported elsewhere
                diagnostics.extend(_unfilled(site, role, shown[role]))
        # A conversation has a call per speaker; other combinators one, which reaches every site.
        for call in dict.fromkeys(site.call for site in sites):
            diagnostics.extend(_unshown(call, [site for site in sites if site.call is call], role_of, shown))
    return diagnostics


def _unshown(call: ast.SlotCall, sites, role_of, shown) -> list[Diagnostic]:
    """BAM213 for each argument of `call` that no prompt of the sites it reaches shows."""
    diagnostics = []
    reached = set()
    for site in sites:
        reached.update(shown.get(role_of.get(site.slot), ()))
    # Only when every role the call reaches has a prompt to look in.
    judged = all(role_of.get(site.slot) in shown for site in sites)
    if judged:
        for arg in call.args:
            if arg.name not in reached:
                diagnostics.append(
                    warning(
                        "BAM213",
                        f"'{arg.name}' is passed to '{call.slot}' but no prompt it reaches shows '{{{{{arg.name}}}}}'",
                        arg.span,
                        hint=f"add `{{{{{arg.name}}}}}` to the prompt, or drop the argument: "
                        "the bound charges its tokens although they are never sent",
                    )
                )
    return diagnostics


def call_sites(expr, optional: frozenset[str] = frozenset()) -> list[CallSite]:
    """The calls of one flow expression, with what the interpreter passes each (its combinator's `sites`).

    `optional` names the slots that may have no instance: a conversation's
    turn has a transcript for certain only when a speaker before it always speaks.
    """
    return combinator_of(expr).sites(expr, optional)


def _unfilled(site: CallSite, role: str, names: dict[str, bool]) -> list[Diagnostic]:
    found = []
    for name, required in names.items():
        if not required or name in site.always:
            continue
        if name in site.sometimes:
            message = f"'{{{{{name}}}}}' in role '{role}' is required, but the first call of '{site.slot}' here has no {name}"
            hint = f"write `{{{{{name}?}}}}`: an optional placeholder renders empty when there is no value"
        else:
            message = f"the call of '{site.slot}' does not fill '{{{{{name}}}}}', which role '{role}' requires"
            hint = f"pass it, as in `{site.call.slot}({', '.join([a.name for a in site.call.args] + [name])})`, or write `{{{{{name}?}}}}` to make it optional"
        found.append(error("BAM212", message, site.span, hint=hint))
    return found


def placeholders(text: str) -> list[tuple[str, bool]]:
    """(name, optional) for every `{{name}}` / `{{name?}}` in a prompt."""
    return [(m.group(1).rstrip("?"), m.group(1).endswith("?")) for m in PLACEHOLDER.finditer(text)]


def _flow_inputs(modules) -> dict[str, set[str]]:
    """Role name -> the input names some flow passes to a call of that role.

    A combinator hands its call's inputs to every slot it involves: the critic
    of a `refine`, the executor and critic of a `plan`.
    """
    by_role: dict[str, set[str]] = {}
    for role_of, statement in _flow_statements(modules):
        for site in call_sites(statement.expr):
            if site.slot in role_of:
                by_role.setdefault(role_of[site.slot], set()).update(arg.name for arg in site.call.args)
    return by_role


def route_parts(expr) -> list:
    """A flow expression as the expressions that each pass their own arguments (its combinator's
    `parts`): a route is its router's call and the parts of each branch; anything else is itself."""
    return combinator_of(expr).parts(expr)


def _flow_parts(modules):
    """(slot name -> role name, expression, slots that may be empty) for every part
    (`route_parts`) of every flow statement."""
    for role_of, statement, optional in _flow_statements(modules, with_optional=True):
        for part in route_parts(statement.expr):
            yield role_of, part, optional


def _flow_statements(modules, with_optional: bool = False):
    """(slot name -> role name, statement) for every flow statement of every topology; with
    `with_optional`, also the names of the slots whose range starts at 0."""
    for module in modules.values():
        for decl in module.declarations:
            if isinstance(decl, ast.TopologyDecl):
                role_of = {slot.name: slot.role for slot in decl.slots}
                optional = frozenset(slot.name for slot in decl.slots if slot.lo.value == 0)
                for flow in decl.flows:
                    for statement in flow.statements:
                        yield (role_of, statement, optional) if with_optional else (role_of, statement)


def _repeated(role: str, strings: list[ast.String]) -> list[Diagnostic]:
    """A placeholder shown twice: every bound counts an input once per call, so a prompt may show it once."""
    found, first = [], {}
    for string in strings:
        for match in PLACEHOLDER.finditer(string.raw):
            name = match.group(1).rstrip("?")
            if not NAME.fullmatch(match.group(1)):
                continue  # malformed: BAM206
            span = _span_in(string, match.start(), match.end())
            if name not in first:
                first[name] = span
                continue
            found.append(error(
                "BAM228",
                f"role '{role}' shows '{{{{{name}}}}}' twice (first at {first[name].line}:{first[name].col}): "
                "the bound counts each input once per call, so the prompt sent would outgrow it",
                span,
                hint=f"show '{{{{{name}}}}}' once in the role's prompt and system together",
            ))
    return found


def _check_string(role: str, string: ast.String, known: set[str], capped: bool = False) -> list[Diagnostic]:
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
        if name == HISTORY and not capped and name not in known:
            found.append(
                error(
                    "BAM225",
                    f"role '{role}' shows '{{{{{name}}}}}' but declares no `history` cap: a thread's earlier turns "
                    "would have no bound",
                    span,
                    hint="declare the most tokens of history the role's calls may show, e.g. `history = 800`",
                )
            )
        elif name not in known and not (name == HISTORY and capped):
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
