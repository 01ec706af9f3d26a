"""What every wire protocol shares: the asks of a request, the usage it reports, its prompt's byte bound, its stream.

A protocol is one `WireProtocol` subclass (metering/protocols/__init__.py
registers each): it reads the model and the output cap a request asks for,
bounds its prompt, refuses what cannot be bounded, sets the cap it is sent
with, reads the usage of a reply and of a stream, shapes errors as its SDKs
read them, and writes the reply that answers in place of a call a spent
budget cannot fit (`exhausted`). Everything here is plain data in, plain
data out: no I/O, no money.

The prompt bound is what the reservation pays for, so it must never be below
what the upstream bills. Where the tokenizer is not known, a prompt is bounded
by bytes: byte-level BPE and byte-fallback tokenizers emit at most one token
per UTF-8 byte, every character of every field the model reads appears at
least once in the request's JSON, and each message's framing costs at most
MESSAGE_OVERHEAD_TOKENS tokens. Inputs whose token cost is not their bytes
(images, audio, files) cannot be bounded that way, nor can features billed
past the prompt and the output cap, so such a request is refused before
anything is reserved.
"""

from __future__ import annotations

import json
import secrets

from bamasc.ir.tokens import MESSAGE_OVERHEAD_TOKENS
from bamasc.metering.calibrate import Prompt, canonical, prompt_of
from bamasc.prices import Usage

# Content parts whose tokens are not bounded by their bytes.
UNBOUNDED_PARTS = frozenset({"image_url", "input_audio", "file", "image", "document", "audio", "input_image",
                             "input_file"})
# Framing tokens a request adds besides its messages (the reply's priming, the tool list's wrapper).
REQUEST_OVERHEAD_TOKENS = 64
# Body fields that do not change what the prompt is billed (the output cap, streaming): left out of a prompt's context.
NOT_PROMPT_FIELDS = frozenset({"stream", "stream_options", "max_tokens", "max_completion_tokens", "max_output_tokens"})
# Service tiers billed at most the declared rates (`priority` and `scale` are dearer).
PLAIN_TIERS = (None, "auto", "default", "flex", "standard_only")


class WireError(ValueError):
    """A request the proxy cannot bound or forward; `field` names what is at fault."""

    def __init__(self, message: str, field: str | None = None, status: int = 400):
        super().__init__(message)
        self.field = field
        self.status = status


class Asked:
    """What one request asks for: the model, its output cap, how many choices, streaming or not."""

    __slots__ = ("model", "cap_field", "requested", "choices", "stream")

    def __init__(self, model: str, cap_field: str | None, requested: int | None, choices: int, stream: bool):
        self.model = model
        self.cap_field = cap_field  # the body field holding the output cap the client used (None: none given)
        self.requested = requested  # that cap, or None
        self.choices = choices  # completions asked for (OpenAI `n`); each is billed its output
        self.stream = stream


class Counts:
    """The token counts a reply or a stream reported so far; a None count was not reported."""

    __slots__ = ("prompt", "completion", "cached", "cache_write")

    def __init__(self, prompt: int | None = None, completion: int | None = None, cached: int = 0,
                 cache_write: int = 0) -> None:
        self.prompt, self.completion, self.cached, self.cache_write = prompt, completion, cached, cache_write

    def usage(self) -> Usage | None:
        """The usage to charge, or None when a count is missing (the hold is then kept in full)."""
        if self.prompt is None or self.completion is None:
            return None
        return Usage(self.prompt, self.completion, self.cached, self.cache_write)

    def most(self, other: Counts) -> None:
        """Keep the larger of each count: a stream's events report cumulative usage, and a later one may leave a
        field out or null (Anthropic's message_delta after message_start) or repeat the usage."""
        for name in ("prompt", "completion"):
            mine, theirs = getattr(self, name), getattr(other, name)
            if theirs is not None and (mine is None or theirs > mine):
                setattr(self, name, theirs)
        self.cached = max(self.cached, other.cached)
        self.cache_write = max(self.cache_write, other.cache_write)


def count(value: object) -> int | None:
    """A token count as a reply states it, or None where it is not a whole number of 0 or more."""
    return value if type(value) is int and value >= 0 else None


class WireProtocol:
    """One wire protocol. A subclass sets the class fields and writes `read`, `with_cap`, `counts`,
    `stream_event` and `exhausted`; the byte bound, the stream reading and the error shape come from here."""

    name: str  # how docs and errors name it
    api: str  # the provider API that serves it (a provider record's `protocol`): "openai" or "anthropic"
    routes: tuple[str, ...]  # the proxy's paths for it
    items_field: str = "messages"  # the body's field holding the list a conversation grows
    upstream_path: str  # appended to the provider's base URL
    prompt_fields: tuple[str, ...]  # the body's fields the model reads as its prompt
    # Body fields whose bill is not bounded by the prompt's bytes and the output cap: field -> why.
    unbounded_fields: dict[str, str] = {}

    def read(self, body: object) -> Asked:
        """The request's asks, or a WireError naming the field at fault."""
        raise NotImplementedError

    def prompt_bound(self, body: dict, tokenizer: str | None = None, exact=None) -> int:
        """An upper bound on the prompt tokens the upstream bills for `body` (its bytes, and each item's framing).

        `exact(tokenizer, messages)` counts plain text messages exactly where a protocol can use it (None: it
        cannot); `tokenizer` is None where the model's tokenizer is not known."""
        prompt = {name: body[name] for name in self.prompt_fields if name in body}
        size = len(json.dumps(prompt, ensure_ascii=False).encode("utf-8", "surrogatepass"))
        return size + MESSAGE_OVERHEAD_TOKENS * (self.items(body) + 1) + REQUEST_OVERHEAD_TOKENS

    def prompt(self, body: dict) -> Prompt:
        """The prompt as a calibrated bound reads it (metering/calibrate.py): the items of `items_field` (a text is
        one item), each bounded by its JSON's bytes and MESSAGE_OVERHEAD_TOKENS of framing, and every other field
        but the output cap and streaming as its context."""
        context = {name: value for name, value in body.items() if name != self.items_field
                   and name not in NOT_PROMPT_FIELDS}
        given = body[self.items_field]
        items = [canonical(item) for item in (given if isinstance(given, list) else [given])]
        return prompt_of(canonical(context), ((text, len(text) + MESSAGE_OVERHEAD_TOKENS) for text in items))

    def items(self, body: dict) -> int:
        """How many messages (each framed) the prompt holds."""
        return len(body["messages"])

    def with_cap(self, asked: Asked, body: dict, tokens: int, official: bool) -> dict:
        """The body to forward: its output cap set to `tokens`, and usage asked for where the protocol must."""
        raise NotImplementedError

    def counts(self, data: object, counts: Counts | None = None) -> Counts:
        """The counts a JSON reply (or one stream event) reports, added to `counts`."""
        raise NotImplementedError

    def stream_event(self, data: object) -> tuple[bool, bool, bool]:
        """What one stream event says: (the stream is over, it carries output, it reports the usage of all the
        output before it)."""
        raise NotImplementedError

    def hides_usage(self, body: dict) -> bool:
        """Whether the stream's usage event must be taken out before the client sees it (it did not ask)."""
        return False

    def hidden(self, data: object) -> bool:
        """Whether stream event `data` is the usage event a client that did not ask for it must not get."""
        return False

    def error(self, message: str, kind: str, field: str | None = None) -> dict:
        """An error in the shape the protocol's SDKs read, so a framework surfaces it as an API error."""
        return {"error": {"message": message, "type": kind, "param": field, "code": kind}}

    def exhausted(self, asked: Asked, text: str) -> bytes:
        """The whole body of a 200 sent in place of a call the budget cannot fit: one assistant message saying
        `text`, no tool call, a turn ended normally, usage 0, for `asked.model`. The JSON reply, or where
        `asked.stream` the whole event stream, every event the protocol's SDKs need to read it to its end."""
        raise NotImplementedError

    def media_type(self, asked: Asked) -> str:
        """The content type of a reply to `asked` (`exhausted`'s body among them)."""
        return "text/event-stream" if asked.stream else "application/json"

    # ------------------------------------------------------------ shared checks

    def refuse_unbounded_fields(self, body: dict) -> None:
        for name, why in self.unbounded_fields.items():
            if body.get(name) not in (None, [], False):  # `{}` still turns a web search on
                raise WireError(f"`{name}` is not proxied: {why}, which the proxy cannot bound before the call", name)
        if body.get("service_tier") not in PLAIN_TIERS:
            raise WireError(f"`service_tier` {str(body.get('service_tier'))[:40]!r} may be billed above the declared "
                            "prices; send `auto`, `default` or `flex`", "service_tier")


def as_json(data: object) -> bytes:
    """`data` as the JSON of a reply. ASCII only: every other character is escaped, so any text encodes (a lone
    surrogate in an operator's text too), and no reader that splits decoded text on every Unicode line end
    (str.splitlines: U+2028, U+0085) cuts an event's data line."""
    return json.dumps(data, separators=(",", ":")).encode("ascii")


def sse(data: dict, event: str | None = None) -> bytes:
    """One server-sent event carrying `data`, named `event` where the protocol names its events."""
    return (f"event: {event}\n" if event else "").encode("ascii") + b"data: " + as_json(data) + b"\n\n"


def reply_id(prefix: str) -> str:
    """An id for a reply the proxy makes itself: the protocol's prefix, then 24 random hex digits."""
    return prefix + secrets.token_hex(12)


def read_cap(body: dict, fields: tuple[str, ...]) -> tuple[str | None, int | None]:
    """The first of `fields` the body sets, and its value: the output cap the client asked for."""
    for name in fields:
        value = body.get(name)
        if value is None:
            continue
        if type(value) is not int or value < 1:
            raise WireError(f"`{name}` must be a whole number of tokens, 1 or more", name)
        return name, value
    return None, None


def read_stream_flag(body: dict) -> bool:
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise WireError("`stream` must be true or false", "stream")
    return stream


def read_model(body: object) -> str:
    if not isinstance(body, dict):
        raise WireError("the request body must be a JSON object")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise WireError("`model` must be a model name", "model")
    return model


def read_messages(body: dict) -> list:
    """A request's `messages`: a non-empty list of objects, none with a part its bytes do not bound."""
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise WireError("`messages` must be a non-empty list", "messages")
    for message in messages:
        if not isinstance(message, dict):
            raise WireError("each message must be a JSON object", "messages")
        refuse_unbounded_parts(message.get("content"), "messages")
    return messages


def refuse_unbounded_parts(content: object, field: str, depth: int = 0) -> None:
    """Refuse any part of `content` whose tokens its bytes do not bound, also one nested in another part's content
    (a tool result's) or output (a Responses function call's)."""
    if not isinstance(content, list):
        return
    if depth > 32:
        raise WireError("message content is nested too deeply", field)
    for part in content:
        kind = part.get("type") if isinstance(part, dict) else None
        if kind in UNBOUNDED_PARTS:
            raise WireError(f"a `{kind}` content part has no token bound the proxy can prove before the call; "
                            "send text only through the proxy", field)
        if isinstance(part, dict):
            refuse_unbounded_parts(part.get("content"), field, depth + 1)
            refuse_unbounded_parts(part.get("output"), field, depth + 1)


class StreamReader:
    """Reads a protocol's server-sent events as their bytes pass through, keeping the usage they report, and
    takes out the usage event a client did not ask for (`hide`). Events pass on whole, as they end (a blank
    line); one longer than `limit` passes on as it came, unread."""

    def __init__(self, protocol: WireProtocol, hide: bool = False, limit: int = 1 << 20):
        self.protocol = protocol
        self.counts = Counts()
        self.hide = hide
        self._pending = b""
        self._limit = limit
        self.done = False  # the upstream said the stream is over
        # The usage that counts the whole output came, and no output came after it. A usage reported early
        # (`completion_tokens: 0` in the first chunk) counts none of what follows it.
        self.final = False

    def feed(self, chunk: bytes) -> bytes:
        """Read `chunk`; the bytes to pass on now (every whole event, but a hidden one; the rest waits)."""
        self._pending += chunk
        out = []
        while (end := _event_end(self._pending)) is not None:
            event, self._pending = self._pending[:end], self._pending[end:]
            if not self._event(event):
                out.append(event)
        if len(self._pending) > self._limit:
            out.append(self._pending)
            self._pending = b""
        return b"".join(out)

    def rest(self) -> bytes:
        """What is left when the stream ends (an event without its blank line), read like the others."""
        rest, self._pending = self._pending, b""
        return b"" if self._event(rest) else rest

    def _event(self, event: bytes) -> bool:
        """Read one event's data; whether it is hidden from the client."""
        hidden = False
        for line in event.splitlines():
            line = line.strip()
            if not line.startswith(b"data:"):
                continue
            payload = line[5:].strip()
            if payload == b"[DONE]":
                self.done = True
                continue
            try:
                data = json.loads(payload)
            except ValueError:
                continue
            over, output, final = self.protocol.stream_event(data)
            self.done = self.done or over
            if output:
                self.final = False  # output after the last usage: that usage did not count it
            found = self.protocol.counts(data)
            self.counts.most(found)
            if final and found.completion is not None:
                self.final = True
            hidden = hidden or (self.hide and self.protocol.hidden(data))
        return hidden

    def usage(self) -> Usage | None:
        """The usage of the whole stream: None unless it ended as the protocol ends one, having reported the
        usage of all its output."""
        return self.counts.usage() if self.done and self.final else None


def _event_end(buffer: bytes) -> int | None:
    """Where the first server-sent event of `buffer` ends (after its blank line), or None."""
    ends = [found + len(mark) for mark in (b"\n\n", b"\r\n\r\n") if (found := buffer.find(mark)) >= 0]
    return min(ends) if ends else None
