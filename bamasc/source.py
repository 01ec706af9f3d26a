"""Source files and spans: where every token, node and diagnostic points."""

from __future__ import annotations

from bamasc.records import record


@record
class Span:
    """A region of one source file; lines and columns are 1-based, end exclusive."""

    file: str
    line: int
    col: int
    end_line: int
    end_col: int

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.col}"

    def to(self, other: Span) -> Span:
        """The span from the start of this one to the end of `other`."""
        return Span(self.file, self.line, self.col, other.end_line, other.end_col)


@record
class SourceFile:
    """The text of one `.bam` file, with the name diagnostics should print."""

    path: str
    text: str


def decode_source(path: str, data: bytes) -> tuple[str, int | None]:
    """UTF-8 text of `data`, or the text with replacements and the first bad byte offset."""
    try:
        return data.decode("utf-8"), None
    except UnicodeDecodeError as error:
        return data.decode("utf-8", errors="replace"), error.start
