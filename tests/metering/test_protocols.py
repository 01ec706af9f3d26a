"""The wire protocols as units: each stream read the same however its bytes are split, final usage only at the end,
a prompt bound never below the bytes the model reads, and a new protocol is one class and its registration."""

from __future__ import annotations

import json
import random

import pytest

from bamasc.metering.protocols import CHAT, MESSAGES, RESPONSES, StreamReader, WireError, protocols, register
from bamasc.metering.protocols.base import WireProtocol
from bamasc.prices import Usage


def _sse(name: str | None, data) -> bytes:
    head = f"event: {name}\n" if name else ""
    return f"{head}data: {json.dumps(data)}\n\n".encode()


def _stream(protocol, words: int, prompt: int, early: bool, final: bool) -> list[bytes]:
    """A stream of `words` output words in `protocol`'s events: its usage early (before the output, counting none of
    it) and/or final (after the output, counting all of it)."""
    if protocol is CHAT:
        events = []
        if early:
            events.append(_sse(None, {"choices": [], "usage": {"prompt_tokens": prompt, "completion_tokens": 0}}))
        events += [_sse(None, {"choices": [{"index": 0, "delta": {"content": "w "}}]}) for _ in range(words)]
        if final:
            events.append(_sse(None, {"choices": [], "usage": {"prompt_tokens": prompt, "completion_tokens": words}}))
        return events + [b"data: [DONE]\n\n"]
    if protocol is MESSAGES:
        events = [_sse("message_start", {"type": "message_start",
                                         "message": {"usage": {"input_tokens": prompt, "output_tokens": 1}}})]
        if early:
            events.append(_sse("message_delta", {"type": "message_delta", "usage": {"output_tokens": 1}}))
        events += [_sse("content_block_delta", {"type": "content_block_delta", "delta": {"text": "w "}})
                   for _ in range(words)]
        if final:
            events.append(_sse("message_delta", {"type": "message_delta",
                                                 "usage": {"output_tokens": words, "input_tokens": None}}))
        return events + [_sse("message_stop", {"type": "message_stop"})]
    started = {"usage": {"input_tokens": prompt, "output_tokens": 0}} if early else {"usage": None}
    events = [_sse("response.created", {"type": "response.created", "response": started})]
    events += [_sse("response.output_text.delta", {"type": "response.output_text.delta", "delta": "w "})
               for _ in range(words)]
    usage = {"input_tokens": prompt, "output_tokens": words} if final else None
    return events + [_sse("response.completed", {"type": "response.completed", "response": {"usage": usage}})]


@pytest.mark.parametrize("protocol", [CHAT, MESSAGES, RESPONSES], ids=lambda p: p.name)
def test_a_stream_reads_the_same_usage_however_its_bytes_are_split(protocol):
    rng = random.Random(protocol.name)
    for case in range(40):
        words, prompt = rng.randint(1, 30), rng.randint(1, 500)
        early, final = rng.random() < 0.5, rng.random() < 0.7
        stream = b"".join(_stream(protocol, words, prompt, early, final))
        if rng.random() < 0.5:
            stream = stream.replace(b"\n\n", b"\r\n\r\n")
        cuts = sorted(rng.sample(range(1, len(stream)), min(len(stream) - 1, rng.randint(1, 60))))
        reader = StreamReader(protocol)
        passed = b"".join(reader.feed(stream[a:b]) for a, b in zip([0, *cuts], [*cuts, len(stream)])) + reader.rest()
        assert passed == stream  # nothing hidden from a client that did not ask to hide
        expected = Usage(prompt, words) if final else None
        assert reader.usage() == expected, (case, early, final)


@pytest.mark.parametrize("protocol", [CHAT, MESSAGES, RESPONSES], ids=lambda p: p.name)
def test_a_stream_cut_before_its_end_has_no_usage(protocol):
    """Cut at every event boundary but the last: the usage counted so far is never the bill."""
    events = _stream(protocol, 5, 40, early=True, final=True)
    for end in range(len(events) - 1):
        reader = StreamReader(protocol)
        reader.feed(b"".join(events[:end]))
        reader.rest()
        assert reader.usage() is None, end


def test_output_after_the_last_usage_means_that_usage_is_not_the_bill():
    stream = _stream(CHAT, 3, 10, early=False, final=True)
    stream.insert(-1, _sse(None, {"choices": [{"index": 0, "delta": {"content": "late"}}]}))
    reader = StreamReader(CHAT)
    reader.feed(b"".join(stream))
    assert reader.usage() is None


def _texts(rng: random.Random, n: int) -> list[str]:
    alphabet = "ab 9\n\"\\é中😀\u200b\t{}"
    return ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 40))) for _ in range(n)]


def _strings(value) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):
        return [text for item in value for text in _strings(item)]
    if isinstance(value, dict):
        return [text for key, item in value.items() for text in [key, *_strings(item)]]
    return []


def test_a_prompt_bound_is_never_below_the_bytes_the_model_reads():
    """Byte-level tokenizers emit at most a token a byte: every text a request's prompt fields hold is counted."""
    rng = random.Random(3)
    for _ in range(200):
        texts = _texts(rng, 6)
        bodies = [
            (CHAT, {"model": "m", "messages": [{"role": "user", "content": text} for text in texts[:3]],
                    "tools": [{"type": "function", "function": {"name": "f", "description": texts[3]}}]}),
            (MESSAGES, {"model": "m", "system": texts[0], "messages": [{"role": "user", "content": texts[1]}],
                        "tools": [{"name": "t", "description": texts[2], "input_schema": {}}]}),
            (RESPONSES, {"model": "m", "instructions": texts[0], "input": [
                {"role": "user", "content": [{"type": "input_text", "text": texts[1]}]},
                {"type": "function_call", "call_id": "c", "name": "f", "arguments": texts[2]},
                {"type": "function_call_output", "call_id": "c", "output": texts[3]}],
                "text": {"format": {"type": "json_schema", "schema": {"description": texts[4]}}}}),
        ]
        for protocol, body in bodies:
            protocol.read(body)
            read = sum(len(text.encode("utf-8")) for name in protocol.prompt_fields for text in _strings(body.get(name)))
            assert protocol.prompt_bound(body) >= read


@pytest.mark.parametrize("protocol", [CHAT, MESSAGES, RESPONSES], ids=lambda p: p.name)
def test_the_cap_sent_is_the_one_afforded_whatever_the_client_asked(protocol):
    for asked_cap in (None, 1, 50, 10**6):
        body = {"model": "m", "messages": [{"role": "user", "content": "x"}], "input": "x"}
        field = {"openai": "max_completion_tokens", "anthropic": "max_tokens"}[protocol.api]
        field = "max_output_tokens" if protocol is RESPONSES else field
        if asked_cap is not None:
            body[field] = asked_cap
        asked = protocol.read(body)
        assert asked.requested == asked_cap
        sent = protocol.with_cap(asked, body, 37, official=True)
        assert sent[field] == 37 and body.get(field) == asked_cap  # the client's body is not changed


def test_a_new_protocol_is_one_class_and_its_registration():
    class Echo(WireProtocol):
        name, api, routes, upstream_path = "echo", "openai", ("/v1/echo",), "/echo"
        prompt_fields = ("messages",)

    registered = register(Echo())
    try:
        assert registered in protocols()
        with pytest.raises(ValueError, match="taken"):
            register(Echo())
    finally:
        from bamasc.metering import protocols as registry

        registry._PROTOCOLS.remove(registered)
    assert [protocol.name for protocol in protocols()] == ["chat completions", "messages", "responses"]


def test_a_request_that_cannot_be_read_names_its_field():
    cases = [(CHAT, [], None), (CHAT, {"model": ""}, "model"), (CHAT, {"model": "m", "messages": []}, "messages"),
             (CHAT, {"model": "m", "messages": [{"role": "user", "content": "x"}], "n": 0}, "n"),
             (MESSAGES, {"model": "m", "messages": [1]}, "messages"),
             (RESPONSES, {"model": "m", "input": None}, "input")]
    for protocol, body, field in cases:
        with pytest.raises(WireError) as refused:
            protocol.read(body)
        assert refused.value.field == field
