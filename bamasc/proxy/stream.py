"""A stream as it passes through the proxy: the usage its events report, and the usage chunk a client did not ask for."""

from __future__ import annotations

import json

from bamasc.proxy.wire import Usage, read_usage


class StreamReader:
    """Reads server-sent events as their bytes pass through, keeping the usage they report."""

    def __init__(self, protocol: str, limit: int = 1 << 20):
        self.protocol = protocol
        self.usage = Usage()
        self._buffer = b""
        self._limit = limit  # one event longer than this is not read for usage (it is still passed on)
        self.done = False  # the upstream said the stream is over ([DONE], message_stop)
        # The usage that counts the whole output came, and no output came after it: OpenAI's usage chunk,
        # Anthropic's message_delta (its message_start counts one output token, whatever follows). A usage
        # reported early (`completion_tokens: 0` in the first chunk) counts none of what follows it.
        self.final = False

    def feed(self, chunk: bytes) -> None:
        self._buffer += chunk
        while b"\n" in self._buffer:
            line, self._buffer = self._buffer.split(b"\n", 1)
            self._line(line.strip())
        if len(self._buffer) > self._limit:
            self._buffer = b""

    def _line(self, line: bytes) -> None:
        if not line.startswith(b"data:"):
            return
        payload = line[5:].strip()
        if payload == b"[DONE]":
            self.done = True
            return
        try:
            data = json.loads(payload)
        except ValueError:
            return
        if isinstance(data, dict) and data.get("type") == "message_stop":
            self.done = True
        if _has_output(self.protocol, data):
            self.final = False  # output after the last usage: that usage did not count it
        found = read_usage(self.protocol, data)
        self.usage.most(found)
        if found.completion is not None and (self.protocol == "openai" or data.get("type") == "message_delta"):
            self.final = True

    @property
    def settled(self) -> bool:
        """Whether the stream ended as the protocol ends one, having reported the usage of its whole output."""
        return self.done and self.final and self.usage.complete


class UsageChunkFilter:
    """Takes OpenAI's usage chunk (no choices, the usage) out of a stream whose client did not ask for it: the
    proxy asks for usage on every stream it meters, and a client loop that reads `chunk.choices[0]` would fail
    on a chunk it never asked for. Events pass on whole, as they end (a blank line); one longer than `limit`
    passes on as it came."""

    def __init__(self, limit: int = 1 << 20):
        self._pending = b""
        self._limit = limit

    def feed(self, chunk: bytes) -> bytes:
        """The bytes to pass on now: every whole event but a usage chunk; the rest waits for its end."""
        self._pending += chunk
        out = []
        while True:
            end = _event_end(self._pending)
            if end is None:
                break
            event, self._pending = self._pending[:end], self._pending[end:]
            if not _usage_chunk(event):
                out.append(event)
        if len(self._pending) > self._limit:
            out.append(self._pending)
            self._pending = b""
        return b"".join(out)

    def rest(self) -> bytes:
        """What is left when the stream ends (an event without its blank line)."""
        rest, self._pending = self._pending, b""
        return b"" if _usage_chunk(rest) else rest


def _event_end(buffer: bytes) -> int | None:
    """Where the first server-sent event of `buffer` ends (after its blank line), or None."""
    ends = [found + len(mark) for mark in (b"\n\n", b"\r\n\r\n") if (found := buffer.find(mark)) >= 0]
    return min(ends) if ends else None


def _usage_chunk(event: bytes) -> bool:
    for line in event.splitlines():
        if line.startswith(b"data:"):
            try:
                data = json.loads(line[5:].strip())
            except ValueError:
                return False
            return isinstance(data, dict) and data.get("choices") == [] and "usage" in data
    return False


def asked_for_usage(body: dict) -> bool:
    """Whether an OpenAI streaming request asked for the usage chunk itself (`stream_options.include_usage`)."""
    options = body.get("stream_options")
    return isinstance(options, dict) and options.get("include_usage") is True


def _has_output(protocol: str, data: object) -> bool:
    """Whether a stream event carries output: an OpenAI chunk with choices, an Anthropic content block."""
    if not isinstance(data, dict):
        return False
    if protocol == "openai":
        return bool(data.get("choices"))
    return data.get("type") in ("content_block_start", "content_block_delta")
