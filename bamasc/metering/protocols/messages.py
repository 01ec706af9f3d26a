"""Anthropic messages (`POST /v1/messages`), streaming and not.

Prompts are bounded by bytes (protocols/base.py). Anthropic adds a tool-use
system prompt of its own to every request with tools (346 tokens on its
current models, 530 at most in its published table): ANTHROPIC_TOOL_PROMPT_TOKENS
more are reserved for it. Tools the upstream defines or runs, MCP servers, a
container's files and an hour-long cache write are billed past what the proxy
can bound, so a request with them is refused; so is an `anthropic-beta` the
reservation cannot bound (`check_betas`).
"""

from __future__ import annotations

from bamasc.metering.protocols.base import (
    Asked, Counts, WireError, WireProtocol, as_json, count, read_cap, read_messages, read_model, read_stream_flag,
    reply_id, sse,
)

# Anthropic's tool-use system prompt, added to a request with tools; its docs list 530 tokens at most.
ANTHROPIC_TOOL_PROMPT_TOKENS = 600
# Cache lifetimes billed at the declared cache-write rate (an hour's write is billed at twice the input rate).
_PLAIN_CACHE_TTLS = (None, "5m")
# Anthropic betas that leave the bill within what the proxy reserves: caching (writes are reserved at the
# cache-write rate, and a one-hour write is refused from the body), tool and thinking formats (billed as the
# input and output tokens the proxy bounds and caps), a larger output limit (the proxy sets max_tokens).
_BOUNDED_BETAS = ("prompt-caching-", "token-efficient-tools-", "fine-grained-tool-streaming-",
                  "interleaved-thinking-", "output-128k-")


class Messages(WireProtocol):
    name = "messages"
    api = "anthropic"
    routes = ("/v1/messages",)
    upstream_path = "/v1/messages"
    prompt_fields = ("system", "messages", "tools", "tool_choice")
    unbounded_fields = {
        "mcp_servers": "an MCP server's tools and results are added to the prompt by the upstream",
        "container": "a container's files are read into the prompt by the upstream",
    }

    def read(self, body: object) -> Asked:
        model = read_model(body)
        read_messages(body)
        stream = read_stream_flag(body)
        cap_field, requested = read_cap(body, ("max_tokens",))
        self.refuse_unbounded_fields(body)
        tools = body.get("tools")
        if isinstance(tools, list):
            for tool in tools:
                kind = tool.get("type") if isinstance(tool, dict) else None
                if kind not in (None, "custom"):
                    raise WireError(f"the {str(kind)[:60]!r} tool is defined or run by the upstream, which bills "
                                    "prompt tokens (or uses) the proxy cannot bound before the call; send custom "
                                    "tools only", "tools")
        for name in ("system", "messages", "tools"):
            ttl = _long_cache(body.get(name))
            if ttl is not None:
                raise WireError(f"a `cache_control` with ttl {ttl[:20]!r} is billed above the declared cache-write "
                                "rate; use the default (5m)", name)
        return Asked(model, cap_field, requested, 1, stream)

    def prompt_bound(self, body: dict, tokenizer: str | None = None, exact=None) -> int:
        tool_prompt = ANTHROPIC_TOOL_PROMPT_TOKENS if body.get("tools") else 0
        return super().prompt_bound(body) + tool_prompt

    def with_cap(self, asked: Asked, body: dict, tokens: int, official: bool) -> dict:
        return {**body, "max_tokens": tokens}

    def counts(self, data: object, counts: Counts | None = None) -> Counts:
        # message_start carries the input side, message_delta the output so far; a whole reply both.
        counts = counts or Counts()
        if not isinstance(data, dict):
            return counts
        message = data.get("message")
        for found in (data.get("usage"), message.get("usage") if isinstance(message, dict) else None):
            if not isinstance(found, dict):
                continue
            if "input_tokens" in found:
                plain = count(found.get("input_tokens"))
                read = count(found.get("cache_read_input_tokens")) or 0
                written = count(found.get("cache_creation_input_tokens")) or 0
                counts.prompt = None if plain is None else plain + read + written
                counts.cached, counts.cache_write = read, written
            if "output_tokens" in found:
                counts.completion = count(found.get("output_tokens"))
        return counts

    def stream_event(self, data: object) -> tuple[bool, bool, bool]:
        # message_start counts one output token, whatever follows; message_delta counts the output so far.
        kind = data.get("type") if isinstance(data, dict) else None
        return kind == "message_stop", kind in ("content_block_start", "content_block_delta"), kind == "message_delta"

    def error(self, message: str, kind: str, field: str | None = None) -> dict:
        return {"type": "error", "error": {"type": kind, "message": message}}

    def exhausted(self, asked: Asked, text: str) -> bytes:
        usage = {"input_tokens": 0, "output_tokens": 0, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}
        message = {"id": reply_id("msg_bamasc_"), "type": "message", "role": "assistant", "model": asked.model,
                   "content": [{"type": "text", "text": text}], "stop_reason": "end_turn", "stop_sequence": None,
                   "usage": usage}
        if not asked.stream:
            return as_json(message)
        events = [{"type": "message_start", "message": {**message, "content": [], "stop_reason": None}},
                  {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
                  {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": text}},
                  {"type": "content_block_stop", "index": 0},
                  {"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                   "usage": usage},
                  {"type": "message_stop"}]
        return b"".join(sse(event, event["type"]) for event in events)


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
