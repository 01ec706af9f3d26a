"""Reads JSON Lines files whatever their bytes: every way a row can be wrong is a `RowError`.

`parse_lines` is the one loop over a file's lines (numbering, blank lines,
parsing); each reader adapts what it yields. Dataset, prediction and
offline-data files come from elsewhere and may hold anything. `json.loads` alone lets several shapes escape as other exceptions or
as values the readers cannot use: bytes that are not UTF-8
(UnicodeDecodeError), nesting thousands of levels deep (RecursionError),
integers of more than 4300 digits (ValueError), and `NaN`, `Infinity` or
`1e999`, which RFC 8259 does not allow and which would poison every sum made
from them. Here each is an error with a message and, where known, a column,
and the caller adds its file and line.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator

# Dataset rows nest a few levels; past this, later code that walks a row could recurse too deep.
MAX_ROW_DEPTH = 64
# Digits in one JSON integer: ids and counts need a few; int() refuses more than 4300 anyway.
MAX_INTEGER_DIGITS = 100


class RowError(ValueError):
    """A row that cannot be read: `str()` gives the reason, with its column when known.

    `line` and `column` are 1-based and count within the text given to the
    parser (for one JSONL line, `line` is 1); either may be None.
    """

    def __init__(self, kind: str, detail: str, line: int | None = None, column: int | None = None) -> None:
        self.kind = kind
        self.detail = detail
        self.line = line
        self.column = column
        super().__init__(f"{kind}{'' if column is None else f' (column {column})'}: {detail}")


class _NotAllowed(Exception):
    def __init__(self, kind: str, detail: str) -> None:
        super().__init__(detail)
        self.kind = kind
        self.detail = detail


def _reject_constant(name: str):
    raise _NotAllowed("not JSON", f"{name} is not a JSON number")


def _finite_float(text: str) -> float:
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise _NotAllowed("not a usable number", f"{text[:40]} is too large for a float")
    return value


def _short_int(text: str) -> int:
    digits = len(text.lstrip("-"))
    if digits > MAX_INTEGER_DIGITS:
        raise _NotAllowed("not a usable number", f"an integer of {digits} digits (at most {MAX_INTEGER_DIGITS})")
    return int(text)


_DECODER = json.JSONDecoder(parse_constant=_reject_constant, parse_float=_finite_float, parse_int=_short_int)


def decode_text(data: bytes) -> str:
    """The text of a whole file, or RowError naming the line and column of the first byte that is not UTF-8."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as problem:
        before = data[: problem.start].decode("utf-8", errors="replace")
        line, column = _line_and_column(before, len(before))
        raise RowError("not UTF-8", f"byte 0x{data[problem.start]:02x} cannot be read as text", line, column) from None


def parse_json(text: str, position: int = 0) -> tuple[object, int]:
    """The JSON value that starts at `position` and where it ends (`JSONDecoder.raw_decode`, made safe)."""
    try:
        value, end = _DECODER.raw_decode(text, position)
    except json.JSONDecodeError as problem:
        raise RowError("not JSON", problem.msg, problem.lineno, problem.colno) from None
    except RecursionError:
        detail = f"lists and objects nest more than {MAX_ROW_DEPTH} levels deep"
        raise RowError("not a usable row", detail, *_line_and_column(text, position)) from None
    except _NotAllowed as problem:
        # The hooks are not told where they are: point at the value holding the number.
        raise RowError(problem.kind, problem.detail, _line_and_column(text, position)[0]) from None
    reason = _unusable(value)
    if reason is not None:
        raise RowError("not a usable row", reason, *_line_and_column(text, position))
    return value, end


def parse_line(line: bytes | str) -> object:
    """The JSON value of one JSONL line (bytes are decoded as UTF-8); raises RowError."""
    text = decode_text(line) if isinstance(line, bytes) else line
    # A byte-order mark is how some editors start a UTF-8 file; it is not part of the row.
    start = skip_space(text, 1 if text.startswith("\ufeff") else 0)
    value, end = parse_json(text, start)
    end = skip_space(text, end)
    if end != len(text):
        raise RowError("not JSON", "extra data after the value", *_line_and_column(text, end))
    return value


def lines(path: str):
    """(1-based number, bytes) of every line of a file, split at b'\\n' only, as JSON Lines are."""
    with open(path, "rb") as handle:
        yield from enumerate(handle, start=1)


def parse_lines(source: Iterable[bytes | str], parse=parse_line) -> Iterator[tuple[int, object, RowError | None]]:
    """(number, value, None) for every line of `source` that is not blank, or (number, None, problem) for one
    that `parse` refused with a RowError; numbers are 1-based and count the blank lines.

    A line is parsed as the caller split it: a row cut short gives its error at
    column 1 (of the next line) while its b"\\n" is still on, at its own end
    when it is not, so each reader keeps the messages it always gave.
    """
    for number, line in enumerate(source, start=1):
        if not line.strip():
            continue
        try:
            value = parse(line)
        except RowError as problem:
            yield number, None, problem
            continue
        yield number, value, None


def read_jsonl(path: str, read_row, error: type[Exception], skip_bad: bool = False) -> tuple[list, list[str]]:
    """`read_row(value, number, where)` for every row of a JSONL file, and the rows left out.

    `where` is `path:number`. A line that does not parse becomes `error(f"{where}:
    {reason}")`; that, or an `error` that read_row raises, is raised, or with
    `skip_bad` its message is kept among the problems and reading goes on.
    """
    values: list = []
    problems: list[str] = []
    try:
        handle = open(path, "rb")
    except OSError as problem:
        raise error(f"{path}: cannot read the file: {problem.strerror}") from None
    with handle:  # line by line: a large dataset is never held twice
        for number, value, problem in parse_lines(handle):
            where = f"{path}:{number}"
            try:
                if problem is not None:
                    raise error(f"{where}: {problem}")
                values.append(read_row(value, number, where))
            except error as bad:
                if not skip_bad:
                    raise
                problems.append(str(bad))
    return values, problems


def drop_torn_line(path: str) -> None:
    """Cut a last line that a process killed mid-write left without its b"\\n", so that appended lines start clean.

    The file is read backwards from its end, a block at a time, to the last
    b"\\n": a long trace is not read whole to drop a few bytes.
    """
    if not os.path.exists(path) or os.path.getsize(path) == 0:
        return
    with open(path, "rb+") as handle:
        end = handle.seek(0, os.SEEK_END)
        handle.seek(end - 1)
        if handle.read(1) == b"\n":
            return
        handle.truncate(last_newline(handle, end) + 1)


_BLOCK = 1 << 16


def last_newline(handle, end: int) -> int:
    """The offset of the last b"\\n" before `end` in a binary file, or -1 if it has none."""
    position = end
    while position > 0:
        start = max(0, position - _BLOCK)
        handle.seek(start)
        found = handle.read(position - start).rfind(b"\n")
        if found >= 0:
            return start + found
        position = start
    return -1


def skip_space(text: str, position: int) -> int:
    """The first position at or after `position` that is not JSON white space."""
    while position < len(text) and text[position] in " \t\r\n":
        position += 1
    return position


def _line_and_column(text: str, offset: int) -> tuple[int, int]:
    """The 1-based line and column of `offset` in `text`."""
    return text.count("\n", 0, offset) + 1, offset - text.rfind("\n", 0, offset)


def _unusable(value: object) -> str | None:
    """Why a parsed value cannot be used as a row: too deep, or a string with a lone surrogate.

    Walked without recursion, as the value may be deep enough to break a
    recursive walk. `"\\ud800"` is valid JSON but no UTF-8 text: writing such a
    string to an output file or a terminal would fail later, far from its row.
    """
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, str):
            if not item.isascii() and not _encodes(item):
                return "a string holds a lone surrogate (\\ud800-\\udfff), which is not text"
            continue
        if not isinstance(item, (list, dict)):
            continue
        if depth > MAX_ROW_DEPTH:
            return f"lists and objects nest more than {MAX_ROW_DEPTH} levels deep"
        if isinstance(item, dict):
            stack.extend((key, depth) for key in item)
            stack.extend((child, depth + 1) for child in item.values())
        else:
            stack.extend((child, depth + 1) for child in item)
    return None


def _encodes(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True
