"""A table-driven LALR(1) parser and contextual lexer over the cached Lark tables.

Lark builds the tables (see `tables.py`); this module runs them without
importing Lark, because importing Lark alone costs several times the
interpreter's start-up and `bamasc lint` must stay fast. Trees have the shape
Lark would build: `_rule`s inlined, `?rule`s with one child collapsed,
anonymous tokens dropped, and every node spanning its first to last token.

One deliberate difference: a keyword cannot be followed by a letter, digit or
underscore, so `modelx` is never read as `model x`.
"""

from __future__ import annotations

import re

from bamasc.syntax.resources import grammar_checksum

END = "$END"


class Token:
    """A lexed token with its 1-based position and end (exclusive)."""

    __slots__ = ("type", "value", "offset", "line", "col", "end_line", "end_col")

    def __init__(self, type_, value, offset, line, col, end_line, end_col):
        self.type = type_
        self.value = value
        self.offset = offset
        self.line = line
        self.col = col
        self.end_line = end_line
        self.end_col = end_col

    def __repr__(self) -> str:
        return f"Token({self.type}, {self.value!r}, {self.line}:{self.col})"


class Node:
    """A parse-tree node: rule name, children, and (line, col, end_line, end_col) or None.

    `container` is the extent of the text the node stands for in its parent,
    which is wider than `meta` when a `?rule` such as `"(" sum ")"` collapsed
    onto it; parents span their children's containers, as Lark's do.
    """

    __slots__ = ("data", "children", "meta", "container")

    def __init__(self, data, children, meta):
        self.data = data
        self.children = children
        self.meta = meta
        self.container = meta

    def __repr__(self) -> str:
        return f"Node({self.data}, {self.children!r})"


class ParseFailure(Exception):
    """Parsing stopped: `kind` is 'token' (unexpected token) or 'char' (nothing lexes here)."""

    def __init__(self, kind, token, expected, stack, offset=None):
        super().__init__(kind)
        self.kind = kind
        self.token = token  # the offending Token (kind 'token') or None
        self.expected = expected  # terminal names the parser would have accepted
        self.stack = stack  # values on the parse stack: open constructs, innermost last
        self.offset = offset  # character offset (kind 'char')


class _Terminal:
    """A terminal: a literal string (matched with startswith) or a regular expression."""

    __slots__ = ("name", "pattern", "literal", "is_keyword", "_regex")

    def __init__(self, spec):
        self.name = spec["name"]
        self.pattern = spec["regex"]
        self.literal = spec["literal"]
        self.is_keyword = bool(self.literal) and self.literal[-1:].isalnum()
        self._regex = None

    @property
    def regex(self):
        # Compiled on first use: most states never try most terminals.
        if self._regex is None:
            self._regex = re.compile(self.pattern)
        return self._regex

    def match_end(self, text: str, pos: int) -> int:
        """End offset of a non-empty match at `pos`, or -1."""
        literal = self.literal
        if literal is not None:
            return pos + len(literal) if text.startswith(literal, pos) else -1
        match = self.regex.match(text, pos)
        return match.end() if match is not None and match.end() > pos else -1


_WORD_CHAR = re.compile(r"[A-Za-z0-9_]")


class Tables:
    """The parse tables, plus per-state lexer candidate lists built on first use."""

    def __init__(self, data: dict):
        self.terminals = [_Terminal(t) for t in data["terminals"]]
        self.terminal_names = {t.name for t in self.terminals}
        self.literals = {t.name: t.literal for t in self.terminals}
        self.ignore = set(data["ignore"])
        self.rules = [
            (
                r["origin"],
                len(r["symbols"]),
                r["alias"] or r["origin"],
                r["expand1"] and not r["alias"],
                tuple((s["keep"], s["inline"]) for s in r["symbols"]),
            )
            for r in data["rules"]
        ]
        self.states = data["states"]
        self.start_state = data["start_state"]
        self.end_state = data["end_state"]
        self._lexers: dict[int, tuple] = {}
        # One alternation of every terminal in Lark's order finds most tokens in
        # a single match; the per-state candidate loop is the fallback.
        self.master = re.compile("|".join(f"(?P<{t.name}>{t.pattern})" for t in self.terminals))
        self.keywords = {t.literal: t.name for t in self.terminals if t.is_keyword}

    def lexer_for(self, state: int):
        """Terminals to try in `state`, in Lark's order, and keywords to re-type names into."""
        cached = self._lexers.get(state)
        if cached is None:
            accepts = self.states[state]
            candidates = [t for t in self.terminals if t.name in accepts or t.name in self.ignore]
            # A keyword the same state also accepts as a name is lexed as a name,
            # then re-typed (Lark's "unless" rule).
            regex_terms = [t for t in candidates if t.literal is None]
            keywords = {}
            kept = []
            for term in candidates:
                if term.literal is not None and any(
                    r.match_end(term.literal, 0) == len(term.literal) for r in regex_terms
                ):
                    keywords[term.literal] = term.name
                else:
                    kept.append(term)
            cached = self._lexers[state] = (kept, keywords)
        return cached


_TABLES: Tables | None = None


def load_tables() -> Tables:
    """The shipped tables, rebuilt with Lark only when the grammar has changed since."""
    global _TABLES
    if _TABLES is None:
        try:
            from bamasc.syntax._tables import TABLES as data
        except ImportError:
            data = {}
        if data.get("grammar_crc32") != grammar_checksum():
            from bamasc.syntax.tables import build_tables

            data = build_tables()
        _TABLES = Tables(data)
    return _TABLES


def use_tables(tables: Tables | None) -> None:
    """Parse with `tables` from now on (syntax/forms.py); None goes back to the shipped tables."""
    global _TABLES
    _TABLES = tables


def parse(text: str, tables: Tables | None = None) -> Node:
    """Parse `text` into a tree; raises ParseFailure at the first syntax error."""
    tables = tables or load_tables()
    states = tables.states
    rules = tables.rules
    ignore = tables.ignore
    master = tables.master
    keywords = tables.keywords
    state_stack = [tables.start_state]
    value_stack: list = []
    pos = 0
    line = 1
    line_start = 0
    length = len(text)

    def next_token(state):
        nonlocal pos, line, line_start
        while True:
            if pos >= length:
                return Token(END, "", pos, line, pos - line_start + 1, line, pos - line_start + 1)
            accepts = states[state]
            match = master.match(text, pos)
            kind = None
            if match is not None and match.end() > pos:
                kind = match.lastgroup
                end = match.end()
                value = match.group()
                keyword = keywords.get(value)
                if keyword is not None and keyword in accepts:
                    kind = keyword
                elif kind not in accepts and kind not in ignore:
                    kind = None
            if kind is None:
                kind, end = lex_in_state(state)
                value = text[pos:end]
            start, start_line, start_col = pos, line, pos - line_start + 1
            newlines = value.count("\n")
            if newlines:
                line += newlines
                line_start = pos + value.rindex("\n") + 1
            pos = end
            if kind not in ignore:
                return Token(kind, value, start, start_line, start_col, line, end - line_start + 1)

    def lex_in_state(state):
        """The first terminal `state` accepts that matches at `pos`, in Lark's order."""
        kept, state_keywords = tables.lexer_for(state)
        for term in kept:
            end = term.match_end(text, pos)
            if end < 0:
                continue
            value = text[pos:end]
            if term.is_keyword and end < length and _WORD_CHAR.match(text, end):
                continue
            return state_keywords.get(value, term.name), end
        raise ParseFailure("char", None, _expected(state_stack, tables), value_stack, pos)

    token = next_token(state_stack[-1])
    while True:
        state = state_stack[-1]
        action = states[state].get(token.type)
        if action is None:
            raise ParseFailure("token", token, _expected(state_stack, tables), value_stack)
        kind, arg = action
        if kind == "s":
            state_stack.append(arg)
            value_stack.append(token)
            token = next_token(arg)
            continue
        origin, size, data, expand1, symbols = rules[arg]
        if size:
            raw = value_stack[-size:]
            del value_stack[-size:]
            del state_stack[-size:]
        else:
            raw = []
        value = _build(raw, data, expand1, symbols)
        goto = states[state_stack[-1]][origin][1]
        if goto == tables.end_state and token.type == END:
            return value
        state_stack.append(goto)
        value_stack.append(value)


def _build(raw, data, expand1, symbols):
    children = []
    for item, (keep, inline) in zip(raw, symbols):
        if inline:
            children.extend(item.children)
        elif keep:
            children.append(item)
    if expand1 and len(children) == 1:
        child = children[0]
        if isinstance(child, Node):
            extent = _meta(raw)
            if extent is not None:
                child.container = extent
        return child
    return Node(data, children, _meta(raw))


def _meta(raw):
    first = last = None
    for item in raw:
        start = _start(item)
        if start is not None:
            first = start
            break
    for item in reversed(raw):
        end = _end(item)
        if end is not None:
            last = end
            break
    if first is None:
        return None
    return (first[0], first[1], last[0], last[1])


def _start(item):
    if isinstance(item, Token):
        return (item.line, item.col)
    return item.container[:2] if item.container else None


def _end(item):
    if isinstance(item, Token):
        return (item.end_line, item.end_col)
    return item.container[2:] if item.container else None


def _expected(state_stack: list[int], tables: Tables) -> list[str]:
    """Terminals that the parse could really continue with from this stack.

    LALR merges states, so a state's table may list terminals that only fit
    some other context (a ')' after a value inside a model block); replaying
    the reductions each one triggers weeds those out.
    """
    actions = tables.states[state_stack[-1]]
    return sorted(
        name
        for name in actions
        if (name in tables.terminal_names or name == END) and _viable(state_stack, name, tables)
    )


def _viable(state_stack: list[int], terminal: str, tables: Tables) -> bool:
    stack = list(state_stack)
    while True:
        action = tables.states[stack[-1]].get(terminal)
        if action is None:
            return False
        kind, arg = action
        if kind == "s":
            return True
        origin, size = tables.rules[arg][:2]
        if size:
            del stack[-size:]
        goto = tables.states[stack[-1]][origin][1]
        if goto == tables.end_state and terminal == END:
            return True
        stack.append(goto)
