"""The two wire protocols the proxy speaks: what a request asks for, how its prompt is bounded, where usage is.

OpenAI chat completions (`POST /v1/chat/completions`) and Anthropic messages
(`POST /v1/messages`), streaming and not. Everything here is plain data in,
plain data out: no I/O, no money.

The prompt bound is what the reservation pays for, so it must never be below
what the upstream bills:

- OpenAI models with plain text messages are counted exactly with the model's
  own encoding when the offline tokenizer is installed (`runtime/tokens.py`).
- Anything else is bounded by bytes: byte-level BPE and byte-fallback
  tokenizers emit at most one token per UTF-8 byte, every character of every
  field the model reads (messages, system, tools, response format) appears at
  least once in the request's JSON, and each message's framing costs at most
  MESSAGE_OVERHEAD_TOKENS tokens.
- Anthropic adds a tool-use system prompt of its own to every request with
  tools (346 tokens on its current models, 530 at most in its published
  table): ANTHROPIC_TOOL_PROMPT_TOKENS more are reserved for it.
- Inputs whose token cost is not their bytes (images, audio, files, documents)
  cannot be bounded that way, nor can features billed past the prompt and the
  output cap (server-side tools, MCP servers, audio output, predicted outputs,
  a dearer service tier, an hour-long cache write), so such a request is
  refused before anything is reserved.
"""

from __future__ import annotations

import json
import math

from bamasc.ir.tokens import MESSAGE_OVERHEAD_TOKENS

# Fields of a request body the model reads as its prompt.
_PROMPT_FIELDS = {
    "openai": ("messages", "tools", "functions", "tool_choice", "response_format"),
    "anthropic": ("system", "messages", "tools", "tool_choice"),
}
# Content parts whose tokens are not bounded by their bytes.
_UNBOUNDED_PARTS = frozenset({"image_url", "input_audio", "file", "image", "document", "audio"})
# Framing tokens a request adds besides its messages (the reply's priming, the tool list's wrapper).
_REQUEST_OVERHEAD_TOKENS = 64
# Anthropic's tool-use system prompt, added to a request with tools; its docs list 530 tokens at most.
ANTHROPIC_TOOL_PROMPT_TOKENS = 600
# Request fields whose bill is not bounded by the prompt's bytes and the output cap: (protocol, field) -> why.
_UNBOUNDED_FIELDS = {
    ("openai", "web_search_options"): "a web search is billed per call and its results as input",
    ("openai", "audio"): "audio output is billed at audio rates",
    ("openai", "prediction"): "rejected predicted tokens are billed as output past the cap",
    ("anthropic", "mcp_servers"): "an MCP server's tools and results are added to the prompt by the upstream",
    ("anthropic", "container"): "a container's files are read into the prompt by the upstream",
}
# Service tiers billed at most the declared rates (`priority` and `scale` are dearer).
_PLAIN_TIERS = (None, "auto", "default", "flex", "standard_only")
# Cache lifetimes billed at the declared cache-write rate (an hour's write is billed at twice the input rate).
_PLAIN_CACHE_TTLS = (None, "5m")


class WireError(ValueError):
    """A request the proxy cannot bound or forward; `field` names what is at fault."""

    def __init__(self, message: str, field: str | None = None, status: int = 400):
        super().__init__(message)
        self.field = field
        self.status = status


class Asked:
    """What one request asks for: the model, its output cap, how many choices, streaming or not."""

    __slots__ = ("protocol", "model", "cap_field", "requested", "choices", "stream")

    def __init__(self, protocol: str, model: str, cap_field: str | None, requested: int | None, choices: int,
                 stream: bool):
        self.protocol = protocol
        self.model = model
        self.cap_field = cap_field  # the body field holding the output cap the client used (None: none given)
        self.requested = requested  # that cap, or None
        self.choices = choices  # completions asked for (OpenAI `n`); each is billed its output
        self.stream = stream


def read_request(protocol: str, body: object) -> Asked:
    """The request's asks, or a WireError naming the field at fault."""
    if not isinstance(body, dict):
        raise WireError("the request body must be a JSON object")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise WireError("`model` must be a model name", "model")
    if not isinstance(body.get("messages"), list) or not body["messages"]:
        raise WireError("`messages` must be a non-empty list", "messages")
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise WireError("`stream` must be true or false", "stream")
    fields = ("max_completion_tokens", "max_tokens") if protocol == "openai" else ("max_tokens",)
    cap_field, requested = None, None
    for name in fields:
        value = body.get(name)
        if value is None:
            continue
        if type(value) is not int or value < 1:
            raise WireError(f"`{name}` must be a whole number of tokens, 1 or more", name)
        cap_field, requested = name, value
        break
    choices = body.get("n", 1) if protocol == "openai" else 1
    if choices is None:
        choices = 1
    if type(choices) is not int or not 1 <= choices <= 128:
        raise WireError("`n` must be a whole number from 1 to 128", "n")
    for message in body["messages"]:
        _refuse_unbounded(message)
    _refuse_unbounded_features(protocol, body)
    return Asked(protocol, model, cap_field, requested, choices, stream)


def _refuse_unbounded(message: object) -> None:
    if not isinstance(message, dict):
        raise WireError("each message must be a JSON object", "messages")
    _refuse_unbounded_parts(message.get("content"), 0)


def _refuse_unbounded_parts(content: object, depth: int) -> None:
    """Refuse any unbounded part of `content`, also one nested in another part's content (a tool result's)."""
    if not isinstance(content, list):
        return
    if depth > 32:
        raise WireError("message content is nested too deeply", "messages")
    for part in content:
        kind = part.get("type") if isinstance(part, dict) else None
        if kind in _UNBOUNDED_PARTS:
            raise WireError(f"a `{kind}` content part has no token bound the proxy can prove before the call; "
                            "send text only through the proxy", "messages")
        if isinstance(part, dict):
            _refuse_unbounded_parts(part.get("content"), depth + 1)


def _refuse_unbounded_features(protocol: str, body: dict) -> None:
    for (kind, name), why in _UNBOUNDED_FIELDS.items():
        if kind == protocol and body.get(name) not in (None, []):  # `{}` still turns a web search on
            raise WireError(f"`{name}` is not proxied: {why}, which the proxy cannot bound before the call", name)
    modalities = body.get("modalities")
    if protocol == "openai" and isinstance(modalities, (list, str)) and "audio" in modalities:
        raise WireError("`modalities` may not ask for audio: audio output is billed at audio rates", "modalities")
    if body.get("service_tier") not in _PLAIN_TIERS:
        raise WireError(f"`service_tier` {str(body.get('service_tier'))[:40]!r} may be billed above the declared "
                        "prices; send `auto`, `default` or `flex`", "service_tier")
    tools = body.get("tools")
    if protocol == "anthropic" and isinstance(tools, list):
        for tool in tools:
            kind = tool.get("type") if isinstance(tool, dict) else None
            if kind not in (None, "custom"):
                raise WireError(f"the {str(kind)[:60]!r} tool is defined or run by the upstream, which bills prompt "
                                "tokens (or uses) the proxy cannot bound before the call; send custom tools only",
                                "tools")
    if protocol == "anthropic":
        for name in ("system", "messages", "tools"):
            ttl = _long_cache(body.get(name))
            if ttl is not None:
                raise WireError(f"a `cache_control` with ttl {ttl[:20]!r} is billed above the declared cache-write "
                                "rate; use the default (5m)", name)


def _long_cache(value: object, depth: int = 0) -> str | None:
    """The first `cache_control` ttl in `value` billed above the declared cache-write rate, or None."""
    if depth > 64:
        return None  # deeper than any block Anthropic reads
    if isinstance(value, list):
        for item in value:
            found = _long_cache(item, depth + 1)
            if found is not None:
                return found
    elif isinstance(value, dict):
        control = value.get("cache_control")
        if isinstance(control, dict) and control.get("ttl") not in _PLAIN_CACHE_TTLS:
            return str(control.get("ttl"))
        for key in ("content", "system"):
            if key in value:
                found = _long_cache(value[key], depth + 1)
                if found is not None:
                    return found
    return None


def prompt_bound(protocol: str, body: dict, tokenizer: str | None, exact=None) -> int:
    """An upper bound on the prompt tokens the upstream bills for `body`.

    `exact(tokenizer, messages)` counts plain text OpenAI messages exactly (None: it cannot); `tokenizer` is
    None where the model's tokenizer is not known (any server but OpenAI's, unless the model declares one).
    """
    messages = body["messages"]
    if exact is not None and protocol == "openai" and _plain(body):
        from bamasc.runtime.providers.base import Message

        try:
            counted = exact(tokenizer, [Message(m["role"], m["content"]) for m in messages])
        except ValueError:
            counted = None
        if counted is not None:
            return counted
    prompt = {name: body[name] for name in _PROMPT_FIELDS[protocol] if name in body}
    size = len(json.dumps(prompt, ensure_ascii=False).encode("utf-8", "surrogatepass"))
    tool_prompt = ANTHROPIC_TOOL_PROMPT_TOKENS if protocol == "anthropic" and body.get("tools") else 0
    return size + MESSAGE_OVERHEAD_TOKENS * (len(messages) + 1) + _REQUEST_OVERHEAD_TOKENS + tool_prompt


def _plain(body: dict) -> bool:
    """Messages of a role and text alone, and nothing else the model reads."""
    if any(body.get(name) for name in ("tools", "functions", "response_format")):
        return False
    return all(
        isinstance(m, dict) and set(m) <= {"role", "content"} and m.get("role") in ("system", "user", "assistant")
        and isinstance(m.get("content"), str)
        for m in body["messages"]
    )


def with_cap(asked: Asked, body: dict, tokens: int, official: bool) -> dict:
    """The body to forward: its output cap set to `tokens`, and usage asked for on a stream."""
    forwarded = dict(body)
    if asked.protocol == "anthropic":
        forwarded["max_tokens"] = tokens
    elif official:
        # OpenAI reads max_completion_tokens on every chat model (and refuses max_tokens on reasoning models).
        forwarded.pop("max_tokens", None)
        forwarded["max_completion_tokens"] = tokens
    else:
        # Another server may read either field, or only one: both carry the cap, and llama.cpp's own
        # `n_predict`, which it reads before either, is dropped.
        forwarded.pop("n_predict", None)
        forwarded["max_tokens"] = forwarded["max_completion_tokens"] = tokens
    if asked.protocol == "openai" and asked.stream:
        options = forwarded.get("stream_options")
        options = dict(options) if isinstance(options, dict) else {}
        options["include_usage"] = True
        forwarded["stream_options"] = options
    return forwarded


class Usage:
    """Tokens the upstream reports it billed; None fields were not reported."""

    __slots__ = ("prompt", "completion", "cached", "cache_write")

    def __init__(self) -> None:
        self.prompt: int | None = None
        self.completion: int | None = None
        self.cached = 0
        self.cache_write = 0

    @property
    def complete(self) -> bool:
        return self.prompt is not None and self.completion is not None

    def most(self, other: Usage) -> None:
        """Keep the larger of each count: a stream's events report cumulative usage, and a later one may leave a
        field out or null (Anthropic's message_delta after message_start) or repeat the usage."""
        for name in ("prompt", "completion"):
            mine, theirs = getattr(self, name), getattr(other, name)
            if theirs is not None and (mine is None or theirs > mine):
                setattr(self, name, theirs)
        self.cached = max(self.cached, other.cached)
        self.cache_write = max(self.cache_write, other.cache_write)


def _count(value: object) -> int | None:
    return value if type(value) is int and value >= 0 else None


def read_usage(protocol: str, data: object, usage: Usage | None = None) -> Usage:
    """The usage a JSON reply (or one stream event) reports, added to `usage`."""
    usage = usage or Usage()
    if not isinstance(data, dict):
        return usage
    if protocol == "openai":
        found = data.get("usage")
        if isinstance(found, dict):
            usage.prompt = _count(found.get("prompt_tokens"))
            usage.completion = _count(found.get("completion_tokens"))
            details = found.get("prompt_tokens_details")
            if isinstance(details, dict):
                usage.cached = _count(details.get("cached_tokens")) or 0
        return usage
    # Anthropic: message_start carries the input side, message_delta the output so far; a whole reply both.
    for found in (data.get("usage"), (data.get("message") or {}).get("usage") if isinstance(data.get("message"), dict) else None):
        if not isinstance(found, dict):
            continue
        if "input_tokens" in found:
            plain = _count(found.get("input_tokens"))
            read = _count(found.get("cache_read_input_tokens")) or 0
            written = _count(found.get("cache_creation_input_tokens")) or 0
            usage.prompt = None if plain is None else plain + read + written
            usage.cached, usage.cache_write = read, written
        if "output_tokens" in found:
            usage.completion = _count(found.get("output_tokens"))
    return usage


# Anthropic betas that leave the bill within what the proxy reserves: caching (writes are reserved at the
# cache-write rate, and a one-hour write is refused from the body), tool and thinking formats (billed as the
# input and output tokens the proxy bounds and caps), a larger output limit (the proxy sets max_tokens).
_BOUNDED_BETAS = ("prompt-caching-", "token-efficient-tools-", "fine-grained-tool-streaming-",
                  "interleaved-thinking-", "output-128k-")


def check_betas(header: str | None, model) -> None:
    """Refuse an `anthropic-beta` the reservation cannot bound. `context-1m-*` bills prompts past 200k tokens at
    long-context rates (twice the input): it passes only to a model whose price declares that tier."""
    if header is None:
        return
    for beta in (value.strip() for value in header.split(",")):
        if not beta or beta.startswith(_BOUNDED_BETAS):
            continue
        if beta.startswith("context-1m-"):
            if model.prices().tiers:
                continue
            raise WireError(f"anthropic-beta {beta!r} bills long prompts at long-context rates, and model "
                            f"{model.name!r} declares none: add a `long_prompt` tier to its price to use it",
                            "anthropic-beta")
        raise WireError(f"anthropic-beta {beta!r} is not forwarded: the proxy cannot bound what it bills "
                        f"(betas it forwards: {', '.join(b + '*' for b in _BOUNDED_BETAS)} and context-1m-* "
                        "where the price has a long-prompt tier)", "anthropic-beta")


def error_body(protocol: str, message: str, kind: str, field: str | None = None) -> dict:
    """An error in the shape the protocol's SDKs read, so a framework surfaces it as an API error."""
    if protocol == "anthropic":
        return {"type": "error", "error": {"type": kind, "message": message}}
    return {"error": {"message": message, "type": kind, "param": field, "code": kind}}


def finite_budget(text: str | None) -> float | None:
    """A budget header's µ$, or None when absent; a ValueError when it is not a finite amount above 0."""
    if text is None:
        return None
    value = float(text.strip())
    if not math.isfinite(value) or value <= 0 or value > 1e12:
        raise ValueError(text)
    return value
