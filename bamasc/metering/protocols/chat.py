"""OpenAI chat completions (`POST /v1/chat/completions`), streaming and not.

Plain text messages of a model whose tokenizer is known are counted exactly
(`exact`, the model's own encoding, when the offline tokenizer is installed);
anything else is bounded by bytes (protocols/base.py). A stream is sent with
`stream_options.include_usage`, so its last chunk reports the usage; a client
that did not ask for that chunk (a chunk with no choices) does not get it,
since the most common client loop reads `chunk.choices[0]`.
"""

from __future__ import annotations

import time
from typing import NamedTuple

from bamasc.metering.protocols.base import (
    Asked, Counts, WireError, WireProtocol, as_json, count, read_cap, read_messages, read_model, read_stream_flag,
    reply_id, sse,
)


class ChatCompletions(WireProtocol):
    name = "chat completions"
    api = "openai"
    routes = ("/v1/chat/completions", "/chat/completions")
    upstream_path = "/chat/completions"
    prompt_fields = ("messages", "tools", "functions", "tool_choice", "response_format")
    unbounded_fields = {
        "web_search_options": "a web search is billed per call and its results as input",
        "audio": "audio output is billed at audio rates",
        "prediction": "rejected predicted tokens are billed as output past the cap",
    }

    def read(self, body: object) -> Asked:
        model = read_model(body)
        read_messages(body)
        stream = read_stream_flag(body)
        cap_field, requested = read_cap(body, ("max_completion_tokens", "max_tokens"))
        choices = body.get("n", 1)
        if choices is None:
            choices = 1
        if type(choices) is not int or not 1 <= choices <= 128:
            raise WireError("`n` must be a whole number from 1 to 128", "n")
        self.refuse_unbounded_fields(body)
        modalities = body.get("modalities")
        if isinstance(modalities, (list, str)) and "audio" in modalities:
            raise WireError("`modalities` may not ask for audio: audio output is billed at audio rates", "modalities")
        return Asked(model, cap_field, requested, choices, stream)

    def prompt_bound(self, body: dict, tokenizer: str | None = None, exact=None) -> int:
        if exact is not None and _plain(body):
            try:
                counted = exact(tokenizer, [_Text(m["role"], m["content"]) for m in body["messages"]])
            except ValueError:
                counted = None
            if counted is not None:
                return counted
        return super().prompt_bound(body)

    def with_cap(self, asked: Asked, body: dict, tokens: int, official: bool) -> dict:
        forwarded = dict(body)
        if official:
            # OpenAI reads max_completion_tokens on every chat model (and refuses max_tokens on reasoning models).
            forwarded.pop("max_tokens", None)
            forwarded["max_completion_tokens"] = tokens
        else:
            # Another server may read either field, or only one: both carry the cap, and llama.cpp's own
            # `n_predict`, which it reads before either, is dropped.
            forwarded.pop("n_predict", None)
            forwarded["max_tokens"] = forwarded["max_completion_tokens"] = tokens
        if asked.stream:
            options = forwarded.get("stream_options")
            options = dict(options) if isinstance(options, dict) else {}
            options["include_usage"] = True
            forwarded["stream_options"] = options
        return forwarded

    def counts(self, data: object, counts: Counts | None = None) -> Counts:
        counts = counts or Counts()
        found = data.get("usage") if isinstance(data, dict) else None
        if isinstance(found, dict):
            counts.prompt = count(found.get("prompt_tokens"))
            counts.completion = count(found.get("completion_tokens"))
            details = found.get("prompt_tokens_details")
            if isinstance(details, dict):
                counts.cached = count(details.get("cached_tokens")) or 0
        return counts

    def stream_event(self, data: object) -> tuple[bool, bool, bool]:
        if not isinstance(data, dict):
            return False, False, False
        return False, bool(data.get("choices")), True

    def hides_usage(self, body: dict) -> bool:
        options = body.get("stream_options")
        return not (isinstance(options, dict) and options.get("include_usage") is True)

    def hidden(self, data: object) -> bool:
        return isinstance(data, dict) and data.get("choices") == [] and "usage" in data

    def exhausted(self, asked: Asked, text: str) -> bytes:
        made = {"id": reply_id("chatcmpl-bamasc-"), "created": int(time.time()), "model": asked.model}
        usage = {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}
        if not asked.stream:
            message = {"role": "assistant", "content": text, "refusal": None}
            choices = [{"index": index, "message": message, "logprobs": None, "finish_reason": "stop"}
                       for index in range(asked.choices)]
            return as_json({**made, "object": "chat.completion", "choices": choices, "usage": usage})
        steps = (({"role": "assistant", "content": ""}, None), ({"content": text}, None), ({}, "stop"))
        chunks = [{**made, "object": "chat.completion.chunk",
                   "choices": [{"index": index, "delta": delta, "logprobs": None, "finish_reason": finish}]}
                  for index in range(asked.choices) for delta, finish in steps]
        # The usage rides on the last finish chunk, not on a chunk of its own with no choices: the most common
        # client loop reads `chunk.choices[0]` of every chunk (the module docstring).
        chunks[-1]["usage"] = usage
        return b"".join(sse(chunk) for chunk in chunks) + b"data: [DONE]\n\n"


class _Text(NamedTuple):
    """A plain text message, as an exact counter reads one."""

    role: str
    content: str


def _plain(body: dict) -> bool:
    """Messages of a role and text alone, and nothing else the model reads."""
    if any(body.get(name) for name in ("tools", "functions", "response_format")):
        return False
    return all(
        isinstance(m, dict) and set(m) <= {"role", "content"} and m.get("role") in ("system", "user", "assistant")
        and isinstance(m.get("content"), str)
        for m in body["messages"]
    )
