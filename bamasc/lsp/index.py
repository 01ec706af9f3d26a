"""Every declared name of a loaded program and every place that uses one, from the AST."""

from __future__ import annotations

from bamasc.combinators import combinator_of
from bamasc.records import record
from bamasc.source import Span
from bamasc.syntax import ast

# Kinds whose names are shared by every file of a program; slots and flow names live in their topology.
GLOBAL_KINDS = ("model", "role", "topology", "system", "tool", "key", "team")


@record
class Occurrence:
    """One place a name is written: its declaration (`declares`) or a use of it."""

    kind: str  # model | role | topology | system | tool | key | team | slot | flow
    name: str
    scope: str  # the topology of a slot or flow name; "" for the others
    span: Span
    declares: bool

    @property
    def key(self) -> tuple[str, str, str]:
        return self.kind, self.name, self.scope


# id(module) -> (module, its occurrences). By identity: the loader hands back the same
# module while a file's text is unchanged, and hashing a whole tree costs as much as walking it.
_CACHE: dict[int, tuple[ast.Module, tuple[Occurrence, ...]]] = {}
_CACHE_SIZE = 256


def module_occurrences(module: ast.Module) -> tuple[Occurrence, ...]:
    """The names of one parsed file (cached: the stdlib and shared files are walked once)."""
    cached = _CACHE.get(id(module))
    if cached is not None and cached[0] is module:
        return cached[1]
    found = tuple(_occurrences(module))
    if len(_CACHE) >= _CACHE_SIZE:
        _CACHE.pop(next(iter(_CACHE)))
    _CACHE[id(module)] = (module, found)
    return found


def _occurrences(module: ast.Module) -> list[Occurrence]:
    found: list[Occurrence] = []
    for decl in module.declarations:
        if isinstance(decl, ast.ModelDecl):
            found.append(Occurrence("model", decl.name, "", decl.name_span, True))
            for item in decl.attrs:
                if isinstance(item, ast.Block) and item.name == "quality":
                    found.extend(Occurrence("role", entry.name, "", entry.name_span, False) for entry in item.attrs)
        elif isinstance(decl, ast.RoleDecl):
            found.append(Occurrence("role", decl.name, "", decl.name_span, True))
            for item in decl.attrs:
                if item.name == "tools" and isinstance(item, ast.Attr) and isinstance(item.value, ast.ListValue):
                    found.extend(_tool_use(value) for value in item.value.items if isinstance(value, ast.Ident))
        elif isinstance(decl, ast.ToolDecl):
            found.append(Occurrence("tool", decl.name, "", decl.name_span, True))
        elif isinstance(decl, ast.SystemDecl):
            found.append(Occurrence("system", decl.name, "", decl.name_span, True))
            for item in decl.attrs:
                kind = {"models": "model", "topologies": "topology"}.get(item.name)
                if kind and isinstance(item, ast.Attr) and isinstance(item.value, ast.ListValue):
                    found.extend(
                        Occurrence(kind, value.name, "", value.span, False)
                        for value in item.value.items
                        if isinstance(value, ast.Ident)
                    )
        elif isinstance(decl, ast.TopologyDecl):
            found.extend(_topology(decl))
        elif isinstance(decl, ast.TeamDecl):
            found.append(Occurrence("team", decl.name, "", decl.name_span, True))
        elif isinstance(decl, ast.KeyDecl):
            found.append(Occurrence("key", decl.name, "", decl.name_span, True))
            found.extend(_key_uses(decl))
    return found


def _key_uses(decl: ast.KeyDecl) -> list[Occurrence]:
    """The team and the models a key names (`team = cx`, `models = [mini]` or `models = mini`)."""
    found = []
    for item in decl.attrs:
        kind = {"team": "team", "models": "model"}.get(item.name)
        if kind is None or not isinstance(item, ast.Attr):
            continue
        values = item.value.items if isinstance(item.value, ast.ListValue) else (item.value,)
        found.extend(Occurrence(kind, v.name, "", v.span, False) for v in values if isinstance(v, ast.Ident))
    return found


def _tool_use(value: ast.Ident) -> Occurrence:
    """A tool a role names: `server.tool` names the tool `server` (its own span)."""
    owner = value.name.partition(".")[0]
    span = value.span
    return Occurrence("tool", owner, "", Span(span.file, span.line, span.col, span.line, span.col + len(owner)), False)


def _topology(decl: ast.TopologyDecl) -> list[Occurrence]:
    scope = decl.name
    found = [Occurrence("topology", decl.name, "", decl.name_span, True)]
    for slot in decl.slots:
        found.append(Occurrence("slot", slot.name, scope, slot.name_span, True))
        found.append(Occurrence("role", slot.role, "", slot.role_span, False))
    for require in decl.requires:
        for count in _counts(require.left) + _counts(require.right):
            found.append(Occurrence("slot", count.slot, scope, count.slot_span, False))
    slot = lambda name, span: Occurrence("slot", name, scope, span, False)  # noqa: E731
    value = lambda ident: Occurrence("flow", ident.name, scope, ident.span, False)  # noqa: E731
    for flow in decl.flows:
        for statement in flow.statements:
            if isinstance(statement, ast.Bind):
                found.append(Occurrence("flow", statement.name, scope, statement.name_span, True))
            found.extend(_expression(statement.expr, slot, value))
    return found


def _expression(expr, slot, value) -> list[Occurrence]:
    """The slot and flow names written in one flow expression (its combinator's `occurrences`)."""
    return [
        slot(name.name, name.span) if name.kind == "slot" else value(ast.Ident(name.name, name.span))
        for name in combinator_of(expr).occurrences(expr)
    ]


def _counts(node) -> list[ast.Count]:
    if isinstance(node, ast.Count):
        return [node]
    if isinstance(node, ast.BinaryOp):
        return _counts(node.left) + _counts(node.right)
    return []


class Index:
    """The occurrences of every module of one program, by file and by name."""

    def __init__(self, modules: dict[str, ast.Module]):
        self.by_file: dict[str, tuple[Occurrence, ...]] = {}
        self.by_key: dict[tuple[str, str, str], list[Occurrence]] = {}
        for path, module in modules.items():
            occurrences = module_occurrences(module)
            self.by_file[path] = occurrences
            for occurrence in occurrences:
                self.by_key.setdefault(occurrence.key, []).append(occurrence)

    def at(self, path: str, line: int, col: int) -> Occurrence | None:
        """The name under a 1-based point; the narrowest one when spans nest."""
        from bamasc.lsp.positions import contains

        hits = [o for o in self.by_file.get(path, ()) if o.span.line == o.span.end_line and contains(o.span, line, col)]
        return min(hits, key=lambda o: o.span.end_col - o.span.col, default=None)

    def declarations(self, key) -> list[Occurrence]:
        return [o for o in self.by_key.get(key, ()) if o.declares]

    def uses(self, key) -> list[Occurrence]:
        return list(self.by_key.get(key, ()))

    def declared(self, kind: str, scope: str = "") -> list[str]:
        """Declared names of one kind (in one topology for slots and flow names), in source order."""
        names = []
        for (k, name, s), found in self.by_key.items():
            if k == kind and s == scope and any(o.declares for o in found) and name not in names:
                names.append(name)
        return names
