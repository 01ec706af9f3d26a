"""What a tool call hands back as text: results cut to their limit with a marker, error texts, the names a model sees.

Sizes are UTF-8 bytes: byte-level BPE and byte-fallback tokenizers emit at most
one token per byte, so a result of at most `max_result` bytes is at most
`max_result` tokens for any model, the bound the compiler prices.
"""

from __future__ import annotations

import hashlib
import re

CUT_MARKER = "…[cut: {} bytes more]"
ERROR_PREFIX = "error: "
# The function-calling APIs accept these names only (OpenAI's rule; Anthropic's is the same).
SAFE_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
_UNSAFE_CHARS = re.compile(r"[^a-zA-Z0-9_-]")
_MAX_NAME = 64
_HASH_CHARS = 8
# Counting the bytes of a long non-ASCII text in slices keeps the copy small.
_COUNT_SLICE = 1 << 20


def utf8_length(text: str) -> int:
    """UTF-8 bytes of `text` (a lone surrogate as the one byte '?' it is sent as), without copying it whole."""
    if text.isascii():  # constant time in CPython
        return len(text)
    return sum(
        len(text[start : start + _COUNT_SLICE].encode("utf-8", "replace"))
        for start in range(0, len(text), _COUNT_SLICE)
    )


class Cutter:
    """Keeps the first `limit` bytes of the text fed to it and counts the rest, so a huge result is never copied whole.

    `text()` is at most `limit` bytes; when something was cut it ends with the
    marker `…[cut: N bytes more]`, inside the limit (a limit shorter than the
    marker keeps the text's first bytes alone).
    """

    def __init__(self, limit: int):
        self.limit = max(int(limit), 0)
        self.total = 0  # bytes fed
        self._kept: list[bytes] = []
        self._kept_bytes = 0

    def feed(self, piece: str) -> None:
        self.total += utf8_length(piece)
        room = self.limit - self._kept_bytes
        if room > 0 and piece:
            # A character is 1 to 4 bytes: the first `room` characters hold every byte that fits.
            head = piece[:room].encode("utf-8", "replace")[:room]
            self._kept.append(head)
            self._kept_bytes += len(head)

    @property
    def truncated(self) -> bool:
        return self.total > self.limit

    def text(self) -> str:
        kept = b"".join(self._kept)
        if not self.truncated:
            return kept.decode("utf-8", "replace")
        # The marker's digits are at most those of the whole length, so the guess never overshoots.
        room = self.limit - len(CUT_MARKER.format(self.total).encode("utf-8"))
        if room < 0:
            return _whole_characters(kept, self.limit)
        head = _whole_characters(kept, room)
        return head + CUT_MARKER.format(self.total - len(head.encode("utf-8")))


def _whole_characters(data: bytes, limit: int) -> str:
    """The longest prefix of `data` of at most `limit` bytes that ends on a character boundary."""
    return data[:limit].decode("utf-8", "ignore")


def cut_text(text: str, limit: int) -> tuple[str, bool, int]:
    """(text cut to `limit` bytes with the marker, whether it was cut, its whole length in bytes)."""
    cutter = Cutter(limit)
    cutter.feed(text)
    return cutter.text(), cutter.truncated, cutter.total


def error_text(message: str, limit: int) -> tuple[str, bool, int]:
    """The result a failed call returns to the model: `error: MESSAGE`, cut to `limit` bytes."""
    cutter = Cutter(limit)
    cutter.feed(ERROR_PREFIX)
    cutter.feed(message)
    return cutter.text(), cutter.truncated, cutter.total


def describe_exception(exc: BaseException, limit: int = 2000) -> str:
    """`Type: message` of an exception a tool raised, its message cut to `limit` bytes (no traceback), every
    key in it masked (plain, base64 or URL-encoded): the trace, the output and the model all read it."""
    from bamasc.secrets import redact

    try:
        message = str(exc)
    except Exception:  # a broken __str__ is the tool's defect, not the run's
        message = "(its message could not be read)"
    # Only the head that can be shown is masked (and a margin far longer than any key, so none is cut in half
    # unmasked): masking a 10 MB message would cost the run minutes. The rest is counted, never shown.
    cutter = Cutter(limit)
    cutter.feed(redact(message[: limit + 1024]))
    cutter.feed(message[limit + 1024:])
    text = cutter.text()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def quoted(name: str, limit: int = 80) -> str:
    """`name` quoted for an error message, cut: a model may send a megabyte as a tool's name."""
    text, truncated, _ = cut_text(name, limit)
    return repr(text) + ("…" if truncated else "")


def model_names(python: list[str], mcp: list[str]) -> dict[str, str]:
    """The name each tool reference is sent to a model as, one that every function-calling API accepts.

    A python tool keeps its declared name when it is safe (`lookup_order`).
    An MCP tool `server.tool` becomes `server__tool`, any character outside
    `[a-zA-Z0-9_-]` written `_`. A name over 64 characters, or an MCP name
    that two references would share, is cut to 55 characters plus `_` and 8
    hex digits of the reference's SHA-256, so every name is unique and no name
    is longer than the reference it stands for.
    """
    plain = {reference: _UNSAFE_CHARS.sub("_", reference) for reference in python}
    plain.update({reference: _UNSAFE_CHARS.sub("_", reference.replace(".", "__", 1)) for reference in mcp})
    taken = {name for reference, name in plain.items() if reference in python}
    seen: dict[str, int] = {}
    for reference in mcp:
        seen[plain[reference]] = seen.get(plain[reference], 0) + 1
    names = {}
    for reference, name in plain.items():
        shared = reference not in python and (name in taken or seen[name] > 1)
        if shared or len(name) > _MAX_NAME or not name:
            digest = hashlib.sha256(reference.encode("utf-8", "replace")).hexdigest()[:_HASH_CHARS]
            name = f"{name[: _MAX_NAME - _HASH_CHARS - 1]}_{digest}"
        names[reference] = name
    return names
