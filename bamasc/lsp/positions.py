"""Spans (1-based lines, columns in code points) to and from LSP positions (0-based, client code units)."""

from __future__ import annotations

from collections.abc import Callable

from bamasc.source import Span

# How many code units the client counts for a string (UTF-16 by default; UTF-8 or UTF-32 when negotiated).
Units = Callable[[str], int]


def utf16_units(text: str) -> int:
    return len(text.encode("utf-16-le")) // 2


class Lines:
    """One file's text split as the lexer counts lines: at '\\n' alone ('\\r' stays on its line)."""

    def __init__(self, text: str, units: Units = utf16_units):
        self.lines = text.split("\n")
        self.units = units

    def position(self, line: int, col: int) -> tuple[int, int]:
        """(line, character) for 1-based `line` and 1-based code point `col`."""
        if line < 1:
            return 0, 0
        if line > len(self.lines):
            return len(self.lines) - 1, self.units(self.lines[-1])
        text = self.lines[line - 1]
        return line - 1, self.units(text[: max(0, col - 1)])

    def range(self, span: Span) -> tuple[tuple[int, int], tuple[int, int]]:
        start = self.position(span.line, span.col)
        end = self.position(span.end_line, span.end_col)
        return start, max(start, end)

    def point(self, line: int, character: int) -> tuple[int, int]:
        """The 1-based (line, code point column) of a client position; past the end clamps."""
        if line >= len(self.lines):
            return len(self.lines), len(self.lines[-1]) + 1
        text = self.lines[line]
        units = 0
        for index, char in enumerate(text):
            if units >= character:
                return line + 1, index + 1
            units += self.units(char)
        return line + 1, len(text) + 1

    def offset(self, line: int, character: int) -> int:
        """The string index in the whole text of a client position."""
        row, col = self.point(line, character)
        return sum(len(text) + 1 for text in self.lines[: row - 1]) + col - 1


def contains(span: Span, line: int, col: int) -> bool:
    """Whether the 1-based point lies in `span`; its end counts, so a cursor just after a name finds it."""
    return (span.line, span.col) <= (line, col) <= (span.end_line, span.end_col)
