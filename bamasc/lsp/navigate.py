"""Definitions, references, renames and symbols of declared names, over every program the server knows."""

from __future__ import annotations

import re

from bamasc.lsp.analysis import Analysis, in_stdlib, real
from bamasc.lsp.index import GLOBAL_KINDS, Occurrence
from bamasc.records import record
from bamasc.source import Span
from bamasc.syntax import ast

NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class RenameError(Exception):
    """A rename the server refuses: its message says why."""


@record
class Symbol:
    name: str
    kind: str  # model | role | topology | system | tool | key | team | slot | flow
    span: Span  # the whole declaration
    name_span: Span
    children: tuple[Symbol, ...] = ()


def definitions(analysis: Analysis, occurrence: Occurrence) -> list[Occurrence]:
    return analysis.index.declarations(occurrence.key)


def references(analyses: list[Analysis], analysis: Analysis, occurrence: Occurrence, declarations: bool = True) -> list[Occurrence]:
    """Every use of the name in each program that reads the file declaring it (the document's own
    program first); a slot or flow name is searched in its topology only."""
    key = occurrence.key
    declared = {real(o.span.file) for o in analysis.index.declarations(key)}
    programs = [analysis]
    if occurrence.kind in GLOBAL_KINDS and declared:
        programs += [other for other in analyses if other is not analysis and declared & other.files]
    seen, found = set(), []
    for program in programs:
        for use in program.index.uses(key):
            where = (real(use.span.file), use.span.line, use.span.col)
            if where in seen or (use.declares and not declarations):
                continue
            seen.add(where)
            found.append(use)
    return found


def rename(analyses: list[Analysis], analysis: Analysis, occurrence: Occurrence, new_name: str, keywords) -> list[Span]:
    """The spans to rewrite as `new_name`; RenameError when the rename would break the program."""
    kind, name = occurrence.kind, occurrence.name
    if not analysis.index.declarations(occurrence.key):
        raise RenameError(f"'{name}' is not declared in this program, so it cannot be renamed here")
    if not NAME.fullmatch(new_name):
        raise RenameError(f"'{new_name}' is not a name: letters, digits and '_', not starting with a digit")
    if new_name in keywords:
        raise RenameError(f"'{new_name}' is a keyword of the language")
    if new_name == name:
        return []
    clashes = [(kind, new_name, occurrence.scope)]
    if kind in ("slot", "flow"):
        # Slot and flow names share the flow's namespace: `x(task)` and `vote(x)` must stay unambiguous.
        clashes = [("slot", new_name, occurrence.scope), ("flow", new_name, occurrence.scope)]
        if new_name == "task":
            raise RenameError("'task' is the flow's input")
    for key in clashes:
        for other in analysis.index.declarations(key):
            raise RenameError(f"{key[0]} '{new_name}' is already declared at {other.span}")
    uses = references(analyses, analysis, occurrence)
    fixed = [use for use in uses if in_stdlib(use.span.file)]
    if fixed:
        raise RenameError(f"'{name}' is used by the standard library ({fixed[0].span}), which cannot be edited")
    return [use.span for use in uses]


def document_symbols(module: ast.Module) -> list[Symbol]:
    found = []
    for decl in module.declarations:
        kind = {ast.ModelDecl: "model", ast.RoleDecl: "role", ast.SystemDecl: "system", ast.TopologyDecl: "topology",
                ast.ToolDecl: "tool", ast.KeyDecl: "key", ast.TeamDecl: "team"}[type(decl)]
        children = ()
        if isinstance(decl, ast.TopologyDecl):
            children = tuple(Symbol(s.name, "slot", s.span, s.name_span) for s in decl.slots) + tuple(
                Symbol(b.name, "flow", b.span, b.name_span)
                for flow in decl.flows
                for b in flow.statements
                if isinstance(b, ast.Bind)
            )
        found.append(Symbol(decl.name, kind, decl.span, decl.name_span, children))
    return found


def workspace_symbols(modules: dict[str, ast.Module], query: str) -> list[tuple[Symbol, str]]:
    """(symbol, container) for every declaration whose name holds `query` (any case), each file once."""
    wanted = query.lower()
    seen, found = set(), []
    for path, module in modules.items():
        if real(path) in seen:
            continue
        seen.add(real(path))
        for symbol in document_symbols(module):
            if wanted in symbol.name.lower():
                found.append((symbol, ""))
            found += [(child, symbol.name) for child in symbol.children if wanted in child.name.lower()]
    return found
