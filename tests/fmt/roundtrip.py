"""What a formatting must keep: the AST without positions, and every comment, in order.

Comments are read by Lark's own lexer (a callback on the grammar's COMMENT
terminal), not by the formatter's scan, so a comment the formatter misreads
shows up as a difference.
"""

from __future__ import annotations

import functools
import re

from bamasc.source import SourceFile
from bamasc.syntax.parser import parse_source
from tests.stages import dump_tree

# A span line of dump_tree: `span: 3:1-3:9`, `name_span: ...`, a span inside a tuple.
_SPAN_LINE = re.compile(r"^\s*(\[\d+\] )?\w*:? ?(\S+@)?\d+:\d+-\d+:\d+$")


def ast_text(text: str) -> str:
    """The module's AST as dump_tree writes it, with every span left out."""
    module, diagnostics = parse_source(SourceFile("main.bam", text))
    assert module is not None, [d.message for d in diagnostics]
    return "\n".join(line for line in dump_tree(module, "main.bam", "main.bam").splitlines() if not _SPAN_LINE.match(line))


_FOUND: list[str] = []


@functools.cache
def _lark():
    from lark import Lark

    from bamasc.syntax.resources import GRAMMAR_PATH

    with open(GRAMMAR_PATH, encoding="utf-8") as handle:
        grammar = handle.read()
    return Lark(grammar, parser="lalr", lexer="contextual", maybe_placeholders=False,
                lexer_callbacks={"COMMENT": lambda token: _FOUND.append(str(token).rstrip())})


def comments(text: str) -> list[str]:
    """Every comment of `text` in order, trailing blanks dropped (the formatter drops them too)."""
    _FOUND.clear()
    _lark().parse(text)
    found = list(_FOUND)
    _FOUND.clear()
    return found


def check_round_trip(text: str, formatted: str) -> None:
    """The formatted text means the same, keeps every comment in order, and is a fixed point."""
    from bamasc.fmt import format_source

    assert ast_text(formatted) == ast_text(text)
    assert comments(formatted) == comments(text)
    assert format_source(formatted) == formatted
