"""Source files and spans: where every token, node and diagnostic points."""

from __future__ import annotations

import os

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
    """UTF-8 text of `data`, or the text with replacements and the first bad byte offset.

    A byte-order mark at the start (Windows editors write one) is dropped: it
    is no character of the program, and columns count from after it, as
    editors show them.
    """
    try:
        text = data.decode("utf-8")
        return (text[1:] if text.startswith("\ufeff") else text), None
    except UnicodeDecodeError as error:
        return data.decode("utf-8", errors="replace"), error.start


# The most characters of one source line an excerpt shows: a minified or
# generated file can hold megabytes on one line, and a diagnostic repeats it.
EXCERPT_WIDTH = 120
ELLIPSIS = "..."


def excerpt_window(text: str, start: int, end: int, width: int = EXCERPT_WIDTH) -> tuple[str, int, int]:
    """The part of line `text` to show for columns start..end (0-based, end exclusive).

    Returns the shown text, with an ellipsis where the line was cut, and where
    the marked region starts and ends in it. A long region is cut too: its
    start is what the caret must point at.
    """
    if len(text) <= width:
        return text, start, end
    # Keep about a third of the window before the marked start, as context.
    left = max(0, min(start - width // 3, len(text) - width))
    right = min(len(text), left + width)
    shown = text[left:right]
    offset = left
    if left > 0:
        shown = ELLIPSIS + shown
        offset -= len(ELLIPSIS)
    if right < len(text):
        shown += ELLIPSIS
    return shown, start - offset, min(end, right) - offset


def as_typed(path: str) -> str:
    """`path` relative to the working directory when it lies below it, as a user would type it; else unchanged."""
    relative = os.path.relpath(path)
    below = relative != os.pardir and not relative.startswith(os.pardir + os.sep)
    return relative if below else path
