"""Cutting the server's input into messages: `Content-Length` framing that survives lying headers and garbage.

A `Framer` is fed the bytes as they arrive and returns `Frame`s. A well-framed body comes out as it is;
anything else comes out as a refused frame that says why, with the bytes that may still be a message (so
the server can answer a request whose id it can read), and framing starts again at the next header.

What makes resynchronising safe: a header line is `Content-Length:`, no quote, and a raw line break. No
valid JSON body holds such a line (a JSON string must escape its line breaks, and `Content-Length` is no
JSON token), so wherever it appears, even inside a body whose declared length runs past it, a new message
starts there.

It does no I/O and needs no pygls. It never allocates what a header declares: a body above
`MAX_MESSAGE_BYTES` is refused unread, and garbage is kept only up to `MAX_KEPT_GARBAGE` bytes.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from bamasc.loader import MAX_FILE_BYTES

# A larger declared body is refused unread. The largest file the loader reads, each byte escaped as \u00XX
# in a didOpen, still fits.
MAX_MESSAGE_BYTES = 8 * MAX_FILE_BYTES
MAX_HEADER_BYTES = 4096  # a header block (or a header line still arriving) longer than this is garbage
MAX_KEPT_GARBAGE = 64 * 1024  # garbage past this is counted, not kept (nor searched for a request)

def _arriving(word: bytes, rest: bytes) -> bytes:
    """A pattern for `word` then `rest` cut anywhere after the first byte: what it looks like while arriving."""
    pattern = b"(?:" + rest + b")?"
    for index in range(len(word) - 1, 0, -1):
        pattern = b"(?:" + re.escape(word[index : index + 1]) + pattern + b")?"
    return re.escape(word[:1]) + pattern


# The line that starts a header block (see the module's docstring for why no body can hold it). A line with
# two starts is garbage glued to a header: the last one counts.
HEADER = re.compile(rb'Content-Length:((?:(?!Content-Length:)[^"\r\n])*)\r?\n', re.IGNORECASE)
# Any other header line of the block (`Content-Type: ...`); one that holds a `Content-Length:` starts a block.
FIELD = re.compile(rb"[A-Za-z][A-Za-z0-9-]*:[^\r\n]*")
MARKER = re.compile(rb"Content-Length:", re.IGNORECASE)
# Header lines at the end of the input, from a line start, the last maybe unfinished: kept until complete.
TAIL = re.compile(rb'(?:(?<=\n)|\A)(?:[A-Za-z][A-Za-z0-9-]*:[^"\r\n]*\r?\n)*[A-Za-z0-9-]*(?::[^"\r\n]*)?\Z')
# A `Content-Length` line still arriving, anywhere (a lying body may run into it): kept too.
PARTIAL = re.compile(_arriving(b"Content-Length:", rb'[^"\r\n]*\r?') + rb"\Z", re.IGNORECASE)
# The header lines just before a `Content-Length` line (`Content-Type` may come first): not garbage.
LEADING_FIELDS = re.compile(rb'(?:(?<=\n)|\A)(?:[A-Za-z][A-Za-z0-9-]*:[^"\r\n]*\r?\n)*\Z')
# How a header block can go on from the start of a line: a field (maybe unfinished), or the blank line.
FIELD_START = re.compile(rb"[A-Za-z][A-Za-z0-9-]*(?::[^\r\n]*)?\r?\Z|\r?\Z")
# What, after a body, starts the next header block (or may, as far as it has arrived).
NEXT_FIELD = re.compile(rb"[A-Za-z][A-Za-z0-9-]*(?::|\Z)")


@dataclass(frozen=True)
class Frame:
    """One message cut from the input: its `body`, and for a refused one the `problem` (else None)."""

    body: bytes
    problem: str | None = None


class Framer:
    """The framing state of one input stream: bytes in, frames out, in order."""

    def __init__(self, max_message_bytes: int = MAX_MESSAGE_BYTES):
        self.max_message_bytes = max_message_bytes
        self.buffer = bytearray()
        self.length: int | None = None  # the declared length of the body being read; None between messages
        self.scanned = 0  # how much of the body being read was searched for a header
        self.garbage = bytearray()  # bytes outside any message, not yet reported (the first MAX_KEPT_GARBAGE)
        self.garbage_bytes = 0  # how many there were

    def feed(self, data: bytes) -> list[Frame]:
        """The frames that `data`, after what came before, completes."""
        self.buffer += data
        found: list[Frame] = []
        while self._body(found) if self.length is not None else self._header(found):
            pass
        # Garbage that is a whole request (a message sent with no header) is answered now, not at the next header.
        if self.garbage_bytes <= MAX_KEPT_GARBAGE and request_in(self.garbage):
            self._report_garbage(found)
        return found

    # ------------------------------------------------------------ between messages

    def _header(self, found: list[Frame]) -> bool:
        header = HEADER.search(self.buffer)
        if header is None:
            # Keep what may still become a header block; the rest is garbage.
            window = max(0, len(self.buffer) - MAX_HEADER_BYTES)
            arriving = (TAIL.search(self.buffer, window), PARTIAL.search(self.buffer, window))
            self._discard(min([match.start() for match in arriving if match], default=len(self.buffer)))
            return False
        start = header.start()
        fields = LEADING_FIELDS.search(self.buffer, 0, start)
        garbage = fields.start() if fields else start
        self._discard(garbage)
        self._report_garbage(found)
        del self.buffer[: start - garbage]  # the fields before Content-Length say nothing the server needs
        # The block: the Content-Length line, other fields, a blank line.
        header = HEADER.match(self.buffer)
        assert header is not None
        end = header.end()
        if end > MAX_HEADER_BYTES:
            return self._refuse(found, end, f"a Content-Length line of {end} bytes")
        while True:
            newline = self.buffer.find(b"\n", end)
            if newline < 0:
                if len(self.buffer) - end <= MAX_HEADER_BYTES and FIELD_START.match(self.buffer, end):
                    return False  # the block is still arriving
                return self._refuse(found, end, "the header block has no blank line after it")
            line = bytes(self.buffer[end:newline]).rstrip(b"\r")
            if not line:
                end = newline + 1
                break
            if not FIELD.fullmatch(line) or MARKER.search(line) or newline >= MAX_HEADER_BYTES:
                return self._refuse(found, end, "the header block has no blank line after it")
            end = newline + 1
        value = header.group(1).strip()
        if not value.isdigit():
            return self._refuse(found, end, f"Content-Length {_shown(value)} is not a byte count")
        if len(value.lstrip(b"0")) > len(str(self.max_message_bytes)) or int(value) > self.max_message_bytes:
            problem = f"Content-Length {_shown(value)} is over the limit of {self.max_message_bytes} bytes"
            return self._refuse(found, end, problem)
        length = int(value)
        del self.buffer[:end]
        self.length, self.scanned = length, 0
        return True

    def _refuse(self, found: list[Frame], end: int, problem: str) -> bool:
        """Drop the header block ending at `end`; what follows, up to the next header, is its would-be body."""
        del self.buffer[:end]
        stop = self._next_header(0)
        found.append(Frame(bytes(self.buffer[: min(stop, MAX_KEPT_GARBAGE)]), problem))
        del self.buffer[:stop]
        return True

    def _next_header(self, start: int) -> int:
        """Where the next header starts (or may, as far as it has arrived) from `start`; else the end."""
        header = HEADER.search(self.buffer, start)
        partial = PARTIAL.search(self.buffer, max(start, len(self.buffer) - MAX_HEADER_BYTES))
        return min([found.start() for found in (header, partial) if found], default=len(self.buffer))

    def _discard(self, end: int) -> None:
        kept = MAX_KEPT_GARBAGE - len(self.garbage)
        if kept > 0:
            self.garbage += self.buffer[: min(end, kept)]
        self.garbage_bytes += end
        del self.buffer[:end]

    def _report_garbage(self, found: list[Frame]) -> None:
        if self.garbage.strip():
            found.append(Frame(bytes(self.garbage), f"{self.garbage_bytes} bytes outside any message"))
        self.garbage.clear()
        self.garbage_bytes = 0

    # ------------------------------------------------------------ in a body

    def _body(self, found: list[Frame]) -> bool:
        length = self.length
        assert length is not None
        # A header inside the declared body: the body was shorter than its Content-Length said.
        header = HEADER.search(self.buffer, max(0, self.scanned - MAX_HEADER_BYTES))
        self.scanned = len(self.buffer)
        if header is not None and header.start() < length:
            start = header.start()
            problem = f"Content-Length {length}, but a header follows after {start} bytes of body"
            return self._take(found, start, problem)
        if len(self.buffer) < length:
            return False
        partial = PARTIAL.search(self.buffer, max(0, length - MAX_HEADER_BYTES))
        if partial is not None and partial.start() < length and not _parses(self.buffer[:length]):
            return False  # a header line may be arriving inside the declared body: the next bytes tell
        rest = bytes(self.buffer[length:]).lstrip()
        if rest and not NEXT_FIELD.match(rest, 0, MAX_HEADER_BYTES) and not _parses(self.buffer[:length]):
            # The body runs on past its declared length (up to the next header, as far as it has arrived).
            end = self._next_header(length)
            return self._take(found, end, f"Content-Length {length}, but the body runs on to {end} bytes")
        return self._take(found, length, None)

    def _take(self, found: list[Frame], end: int, problem: str | None) -> bool:
        body = bytes(self.buffer[: min(end, MAX_KEPT_GARBAGE) if problem else end])
        found.append(Frame(body, problem))
        del self.buffer[:end]
        self.length = None
        return True


def request_in(data: bytes) -> dict[str, Any] | None:
    """The JSON-RPC request (an object with a method and an id) in `data` from its first '{', if it is one."""
    start = data.find(b"{")
    if start < 0:
        return None
    try:
        found = json.loads(data[start:])
    except ValueError:
        return None
    if isinstance(found, dict) and "method" in found and "id" in found:
        return found
    return None


def _parses(data: bytes | bytearray) -> bool:
    try:
        json.loads(data)
    except ValueError:
        return False
    return True


def _shown(value: bytes) -> str:
    text = value[:40].decode("utf-8", "replace")
    return repr(text + ("…" if len(value) > 40 else ""))
