"""`bamasc fmt`: the one canonical layout of a `.bam` file, comments kept (docs/editor.md).

The printer walks the parse tree, not the AST: the AST drops the order of a
topology's slots, rows and flow, groups no imports and keeps no comments,
while the tree has every item in source order with its position. Comments are
not in the tree (the grammar ignores them); they are found in the text and
placed by position between the items around them:

- a comment after code on the same line trails the item that ends on that line
  (or the `{` / `[` that opens the block);
- a comment on a line of its own leads the next item of its block, or, with no
  item after it, stays at the end of the block;
- a comment inside an item printed on one line (a `require` row split over
  lines, say) moves above that item.

Layout: two-space indent; within a block, consecutive one-line attributes (and
consecutive slots) align their `=` (and `:` and `[`) and their trailing
comments, a run ending at a blank line or at a multi-line attribute; a block,
flow or list written on one line stays on one line, any other is one item per
line; blank lines are kept, at most one, none after `{` or before `}`, and one
always separates top-level declarations. Literals are printed as written:
numbers keep their digits (`16_384`, `4e2`), and strings, triple-quoted ones
above all, keep every byte, so their values (dedent included) cannot change.
"""

from __future__ import annotations

import bisect
import re

from bamasc.diagnostics import Diagnostic, error
from bamasc.source import SourceFile, Span
from bamasc.syntax import forms
from bamasc.syntax.lalr import Node, ParseFailure, Token, parse
from bamasc.syntax.parser import parse_source

INDENT = "  "
# Strings are matched only so that a `#` or `//` inside one is not taken for a
# comment; nothing else in a source that parses holds `"`, `#` or `//`.
_SCAN = re.compile(r'"""[\s\S]*?"""|"(?:[^"\\\n]|\\.)*"|(?://|#)[^\n]*')
_GAP = re.compile(r"(?:\s+|(?://|#)[^\n]*)*")
_HEADS = {"model_decl": "model", "role_decl": "role", "system_decl": "system", "topology_decl": "topology",
          "tool_decl": "tool", "key_decl": "key", "team_decl": "team"}


class FormatError(Exception):
    """The text does not parse: `diagnostic` is the error `bamasc lint` reports for it."""

    def __init__(self, diagnostic: Diagnostic):
        super().__init__(f"{diagnostic.span}: {diagnostic.message}" if diagnostic.span else diagnostic.message)
        self.diagnostic = diagnostic
        self.diagnostics = [diagnostic]


def format_source(text: str, path: str = "<string>") -> str:
    """`text` in the canonical layout; raises FormatError when it does not parse."""
    if text.startswith("\ufeff"):  # as the loader reads files: the mark is no character of the program
        text = text[1:]
    try:
        tree = parse(text)
        return _Printer(text).module(tree)
    except ParseFailure:
        pass
    except RecursionError:  # the printer recurses once per nesting level, as the transformer does
        pass
    _, diagnostics = parse_source(SourceFile(path, text))
    if not diagnostics:
        diagnostics = [error("BAM001", "lists or expressions nest too deeply to format", Span(path, 1, 1, 1, 2))]
    raise FormatError(diagnostics[0])


class _Comment:
    __slots__ = ("offset", "end", "line", "text")

    def __init__(self, offset: int, end: int, line: int, text: str):
        self.offset, self.end, self.line, self.text = offset, end, line, text


class _Group:
    """Consecutive one-line items of one kind whose cells and trailing comments align."""

    __slots__ = ("kind", "members")

    def __init__(self, kind: str):
        self.kind, self.members = kind, []


class _Line:
    """One output line, or a multi-line item whose later lines are laid out already.

    `cells` are joined by one space; a line of a group pads every cell but the
    last to the group's widest.
    """

    __slots__ = ("indent", "cells", "comment", "group")

    def __init__(self, indent: int, cells: tuple[str, ...], comment: str | None = None):
        self.indent, self.cells, self.comment, self.group = indent, cells, comment, None

    def code(self) -> str:
        cells = list(self.cells)
        if self.group is not None:
            for k in range(len(cells) - 1):
                cells[k] = cells[k].ljust(max(len(member.cells[k]) for member in self.group.members))
        return INDENT * self.indent + " ".join(cells) if cells else ""


def _render(lines: list[_Line]) -> str:
    columns: dict[int, int] = {}  # a group's trailing-comment column
    for line in lines:
        if line.group is not None and line.comment is not None and id(line.group) not in columns:
            columns[id(line.group)] = max(len(m.code()) for m in line.group.members if m.comment is not None)
    out = []
    for line in lines:
        code = line.code()
        if line.comment is not None:
            code = code.ljust(columns.get(id(line.group), 0)) + "  " + line.comment
        out.append(code)
    return "\n".join(out)


class _Printer:
    def __init__(self, text: str):
        self.text = text
        self.line_starts = [0] + [m.end() for m in re.finditer("\n", text)]
        self.comments = [
            _Comment(m.start(), m.end(), self.line_of(m.start()), m.group().rstrip())
            for m in _SCAN.finditer(text)
            if not m.group().startswith('"')
        ]
        self.offsets = [c.offset for c in self.comments]
        self.taken = [False] * len(self.comments)

    # ------------------------------------------------------------ positions and comments

    def line_of(self, offset: int) -> int:
        return bisect.bisect_right(self.line_starts, offset)

    def start(self, item) -> int:
        if isinstance(item, Token):
            return item.offset
        line, col = item.meta[:2]
        return self.line_starts[line - 1] + col - 1

    def end(self, item) -> int:
        if isinstance(item, Token):
            return item.offset + len(item.value)
        line, col = item.meta[2:]
        return self.line_starts[line - 1] + col - 1

    def take(self, lo: int, hi: int) -> list[_Comment]:
        """The comments starting in [lo, hi) not placed yet; the caller places them."""
        found = []
        for index in range(bisect.bisect_left(self.offsets, lo), bisect.bisect_left(self.offsets, hi)):
            if not self.taken[index]:
                self.taken[index] = True
                found.append(self.comments[index])
        return found

    def opener(self, offset: int) -> int:
        """The offset of the bracket that follows `offset` past blanks and comments."""
        return _GAP.match(self.text, offset).end()

    def blank(self, lo: int, hi: int) -> bool:
        return self.text.count("\n", lo, hi) >= 2

    # ------------------------------------------------------------ blocks

    def items(self, items, lo: int, hi: int, indent: int, top: bool = False) -> tuple[list[_Line], str | None]:
        """Lines of a block's items and the comments among them, and the comment trailing the opener.

        `lo` is just past the opener (`{`, `[`; 0 for the file), `hi` the
        closer's offset; `self.item` prints each item.
        """
        out: list[_Line] = []
        state = _Block(self.line_of(lo - 1) if lo else 0, lo)
        for item in items:
            start, end = self.start(item), self.end(item)
            # One blank line always parts top-level declarations (imports may run on).
            forced = top and state.last is not None and not (state.last.data == item.data == "import_decl")
            for comment in self.take(state.end, start):
                if not self.trail(state, comment, out):
                    self.lead(state, comment, out, indent, forced)
                    forced = False
            lines, kind = self.item(item, indent)
            self.space(state, start, out, forced)
            out.extend(_Line(indent, (c.text,)) for c in self.take(start, end))  # inside a one-line item
            if kind is not None and len(lines) == 1 and not any("\n" in cell for cell in lines[0].cells):
                if state.group is None or state.group.kind != kind:
                    state.group = _Group(kind)
                lines[0].group = state.group
                state.group.members.append(lines[0])
            else:
                state.group = None
            out.extend(lines)
            state.end, state.line, state.last, state.first = end, self.line_of(end - 1), item, False
        for comment in self.take(state.end, hi):
            if not self.trail(state, comment, out):
                self.lead(state, comment, out, indent, False)
        return out, state.opener_comment

    def trail(self, state: _Block, comment: _Comment, out: list[_Line]) -> bool:
        """Attach `comment` to the line of what was printed last, if it shares its source line."""
        if comment.line != state.line or (state.last is None and not state.end):
            return False
        if state.last is None:
            state.opener_comment = comment.text
        else:
            out[-1].comment = comment.text
        state.end = comment.end
        return True

    def lead(self, state: _Block, comment: _Comment, out: list[_Line], indent: int, forced: bool) -> None:
        self.space(state, comment.offset, out, forced)
        out.append(_Line(indent, (comment.text,)))
        state.end, state.line, state.first = comment.end, comment.line, False

    def space(self, state: _Block, offset: int, out: list[_Line], forced: bool) -> None:
        """One blank line before what starts at `offset`, if the source has one there (or `forced`)."""
        if not state.first and (forced or self.blank(state.end, offset)):
            out.append(_Line(0, ()))
            state.group = None

    def braced(self, head: str, node, items, after: int, indent: int) -> tuple[list[_Line], str | None]:
        """`head { items }`: the lines, or (no lines, the one-line text) for a block written on one line."""
        open_ = self.opener(after)
        close = self.end(node) - 1
        if self.line_of(open_) == self.line_of(close):
            inner = [" ".join(self.item(item, indent)[0][0].cells) for item in items]
            return [], ("{ " + "  ".join(inner) + " }" if inner else "{}")
        body, comment = self.items(items, open_ + 1, close, indent + 1)
        if not body and comment is None:
            return [], "{}"
        return [_Line(indent, (head + " {",), comment), *body, _Line(indent, ("}",))], None

    # ------------------------------------------------------------ items

    def module(self, tree: Node) -> str:
        lines, _ = self.items(tree.children, 0, len(self.text), 0, top=True)
        text = _render(lines)
        return text + "\n" if text else ""

    def item(self, node, indent: int) -> tuple[list[_Line], str | None]:
        """The lines of one item of a block, and its alignment kind (None: aligns with nothing)."""
        kind = None if isinstance(node, Token) else node.data
        children = None if kind is None else node.children
        if kind in _HEADS:
            name = children[0]
            head = f"{_HEADS[kind]} {name.value}"
            items = children[1:]
            lines, inline = self.braced(head, node, items, self.end(name), indent)
            return lines or [_Line(indent, (head + " " + inline,))], None
        if kind == "block":
            name = children[0]
            lines, inline = self.braced(name.value, node, children[1:], self.end(name), indent)
            return lines or [_Line(indent, (name.value, inline))], "attr"
        if kind == "flow_decl":
            lines, inline = self.braced("flow", node, children, self.start(node) + len("flow"), indent)
            return lines or [_Line(indent, ("flow " + inline,))], None
        if kind == "assign":
            name, value = children
            return [_Line(indent, (name.value, "= " + self.value(value, indent)))], "attr"
        if kind == "import_decl":
            return [_Line(indent, ("import " + " ".join(p.children[0].value for p in children),))], None
        if kind == "slot_decl":
            name, role, lo, hi = children
            return [_Line(indent, (f"slot {name.value}", f": {role.value}", f"[{lo.value}..{hi.value}]"))], "slot"
        if kind == "require_decl":
            left, op, right = children
            return [_Line(indent, (f"require {_count(left)} {op.value} {_count(right)}",))], None
        if kind == "bind_stmt":
            name, expr = children
            return self.flow(f"{name.value} = ", expr, indent), None
        if kind == "answer_stmt":
            return self.flow("answer ", children[0], indent), None
        if kind in ("route_branch", "route_fallback"):
            label = (children[0].value if kind == "route_branch" else "otherwise") + ":"
            if children[-1].data != "route":
                return [_Line(indent, (label, _flow(children[-1])))], "branch"
            return self.flow(label + " ", children[-1], indent), None
        # A list element.
        return [_Line(indent, (self.value(node, indent) + ",",))], None

    def flow(self, prefix: str, expr, indent: int) -> list[_Line]:
        """A flow expression after `prefix`: one line, or a route with a branch per line."""
        if expr.data != "route":
            return [_Line(indent, (prefix + _flow(expr),))]
        call, *branches = expr.children
        head = f"{prefix}route {_flow(call)}"
        lines, inline = self.braced(head, expr, branches, self.end(call), indent)
        return lines or [_Line(indent, (head + " " + inline,))]

    def value(self, node, indent: int) -> str:
        if isinstance(node, Token):
            return node.value
        kind = node.data
        children = node.children
        if kind == "number":
            return " ".join(token.value for token in children)
        if kind == "money":
            return "$" + children[0].value
        if kind in ("string", "ident", "member"):
            return children[0].value
        if kind == "range":
            return "..".join(self.value(end, indent) for end in children)
        if kind == "call":
            func, *args = children
            return f"{func.value}({', '.join(self.value(arg, indent) for arg in args)})"
        # A list: on one line if written on one.
        start, close = self.start(node), self.end(node) - 1
        if self.line_of(start) == self.line_of(close):
            return "[" + ", ".join(self.value(item, indent) for item in children) + "]"
        body, comment = self.items(children, start + 1, close, indent + 1)
        if not body and comment is None:
            return "[]"
        opener = "[" + ("  " + comment if comment is not None else "")
        return "\n".join([opener, _render(body), INDENT * indent + "]"])


class _Block:
    """Where the printing of one block stands: what came last, and where it ended."""

    __slots__ = ("line", "end", "last", "first", "group", "opener_comment")

    def __init__(self, line: int, end: int):
        self.line = line  # source line of what was printed last (the opener's, at first)
        self.end = end  # source offset just past it
        self.last = None  # the item printed last
        self.first = True  # nothing printed yet: no blank line goes first
        self.group: _Group | None = None
        self.opener_comment: str | None = None


def _count(node) -> str:
    kind = node.data
    children = node.children
    if kind == "const":
        text = children[0].value
    elif kind == "count":
        text = f"count({children[0].value}" + (f", tier = {children[1].value})" if len(children) > 1 else ")")
    else:
        left, op, right = children
        text = f"{_count(left)} {op.value} {_count(right)}"
    # Parentheses as written (their extent is wider than the node's): they may be needed.
    return f"({text})" if node.container != node.meta else text


def _flow(node) -> str:
    kind = node.data
    children = node.children
    if (added := forms.form(kind)) is not None:
        return added.layout(children, _flow)
    if kind == "slot_call":
        slot, *args = children
        return f"{slot.value}({', '.join(arg.value for arg in args)})"
    if kind == "ref":
        return children[0].value
    if kind == "reference":
        return f"reference {_flow(children[0])}"
    if kind in ("chain", "parallel"):
        return f"{kind} {_flow(children[0])}"
    if kind == "vote":
        return f"vote({children[0].value})"
    if kind == "refine":
        return f"refine {_flow(children[0])} with {children[1].value} until approved"
    if kind == "converse":
        text = "converse " + ", ".join(_flow(c) for c in children if c.data == "slot_call")
        for clause in (c for c in children if c.data != "slot_call"):
            word = clause.children[0].value
            text += {"until_approves": f" until {word} approves", "until_marker": f" until {word}"}.get(
                clause.data, f" max_rounds {word}"
            )
        return text
    if kind == "dynamic":
        call, *rest = children
        seats = ", ".join(c.value for c in rest if not hasattr(c, "data"))
        clauses = {c.data: c.children[0].value for c in rest if hasattr(c, "data")}
        limit = f" max_steps {clauses['plan_limit']}" if "plan_limit" in clauses else ""
        formatter = f" format {clauses['plan_format']}" if "plan_format" in clauses else ""
        return f"plan {_flow(call)} using {seats}{limit} dynamic{formatter}"
    call, executor, *rest = children
    review = f" review {rest[0].value}" if len(rest) == 2 else ""
    return f"plan {_flow(call)} using {executor.value}{review} max_steps {rest[-1].value}"
