"""OpenAI Responses (`POST /v1/responses`), streaming and not: the OpenAI Agents SDK's default.

The prompt is what the request carries: `instructions`, the `input` (a text,
or a list of messages, function calls and their outputs, reasoning items),
the function tools and the output format, bounded by bytes
(protocols/base.py). What the upstream would add from its own store cannot
be seen, so it cannot be bounded: `previous_response_id`, a stored
`conversation`, a stored `prompt` template and an `item_reference` are
refused, as are tools the upstream runs (web and file search, code
interpreter, computer use, image generation, remote MCP) and background
runs, whose usage comes only when polled. The cap is `max_output_tokens`
(reasoning tokens included). The usage is the whole reply's `usage`, and on a
stream the one the terminal event (`response.completed`, `.incomplete` or
`.failed`) carries.
"""

from __future__ import annotations

import time

from bamasc.metering.protocols.base import (
    Asked, Counts, WireError, WireProtocol, as_json, count, read_cap, read_model, read_stream_flag,
    refuse_unbounded_parts, reply_id, sse,
)

# The events that end a stream; each carries the response, with its usage.
_TERMINAL = ("response.completed", "response.incomplete", "response.failed")
# Input items whose tokens are their bytes in the request.
_BOUNDED_ITEMS = (None, "message", "function_call", "function_call_output", "reasoning", "custom_tool_call",
                  "custom_tool_call_output")
# Tools the model may call and the client runs (the rest run at the upstream, and bill past the prompt).
_CLIENT_TOOLS = ("function", "custom")


class Responses(WireProtocol):
    name = "responses"
    api = "openai"
    routes = ("/v1/responses", "/responses")
    upstream_path = "/responses"
    items_field = "input"
    prompt_fields = ("instructions", "input", "tools", "tool_choice", "text")
    unbounded_fields = {
        "previous_response_id": "the upstream adds the stored conversation, whose prompt the proxy cannot see; "
                                "send the whole conversation as `input` instead",
        "conversation": "the upstream adds a stored conversation, whose prompt the proxy cannot see; send the "
                        "whole conversation as `input` instead",
        "prompt": "a stored prompt template is filled in by the upstream, out of the proxy's sight",
        "background": "a background response reports its usage only when polled, after the proxy has answered",
    }

    def read(self, body: object) -> Asked:
        model = read_model(body)
        given = body.get("input")
        if not (isinstance(given, str) and given) and not (isinstance(given, list) and given):
            raise WireError("`input` must be a text or a non-empty list of items", "input")
        stream = read_stream_flag(body)
        cap_field, requested = read_cap(body, ("max_output_tokens",))
        self.refuse_unbounded_fields(body)
        if isinstance(given, list):
            for item in given:
                if not isinstance(item, dict):
                    raise WireError("each input item must be a JSON object", "input")
                kind = item.get("type")
                if kind not in _BOUNDED_ITEMS:
                    raise WireError(f"an input item of type {str(kind)[:60]!r} has no token bound the proxy can "
                                    "prove before the call (an `item_reference` is read from the upstream's store)",
                                    "input")
                refuse_unbounded_parts(item.get("content"), "input")
                refuse_unbounded_parts(item.get("output"), "input")
        instructions = body.get("instructions")
        if instructions is not None and not isinstance(instructions, str):
            raise WireError("`instructions` must be a text", "instructions")
        tools = body.get("tools")
        if tools is not None and not isinstance(tools, list):
            raise WireError("`tools` must be a list", "tools")
        for tool in tools or ():
            kind = tool.get("type") if isinstance(tool, dict) else None
            if kind not in _CLIENT_TOOLS:
                raise WireError(f"the {str(kind)[:60]!r} tool is run by the upstream, which bills uses and "
                                "results the proxy cannot bound before the call; send function tools only", "tools")
        return Asked(model, cap_field, requested, 1, stream)

    def items(self, body: dict) -> int:
        given = body["input"]
        return (1 if isinstance(given, str) else len(given)) + (1 if body.get("instructions") else 0)

    def with_cap(self, asked: Asked, body: dict, tokens: int, official: bool) -> dict:
        return {**body, "max_output_tokens": tokens}

    def counts(self, data: object, counts: Counts | None = None) -> Counts:
        counts = counts or Counts()
        if not isinstance(data, dict):
            return counts
        response = data.get("response")  # a stream event carries the response; a whole reply is one
        found = (response if isinstance(response, dict) else data).get("usage")
        if isinstance(found, dict):
            counts.prompt = count(found.get("input_tokens"))
            counts.completion = count(found.get("output_tokens"))  # reasoning tokens included
            details = found.get("input_tokens_details")
            if isinstance(details, dict):
                counts.cached = count(details.get("cached_tokens")) or 0
        return counts

    def stream_event(self, data: object) -> tuple[bool, bool, bool]:
        kind = data.get("type") if isinstance(data, dict) else None
        terminal = kind in _TERMINAL
        output = isinstance(kind, str) and kind.startswith("response.") and not terminal and kind not in (
            "response.created", "response.in_progress", "response.queued")
        return terminal, output, terminal

    def exhausted(self, asked: Asked, text: str) -> bytes:
        item_id = reply_id("msg_bamasc_")
        part = {"type": "output_text", "text": text, "annotations": [], "logprobs": []}
        item = {"type": "message", "id": item_id, "status": "completed", "role": "assistant", "content": [part]}
        usage = {"input_tokens": 0, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": 0,
                 "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 0}
        done = _completed(asked.model, item, usage)
        if not asked.stream:
            return as_json(done)
        started = {**done, "status": "in_progress", "output": [], "usage": None}
        at = {"item_id": item_id, "output_index": 0, "content_index": 0}
        events = [("response.created", {"response": started}),
                  ("response.in_progress", {"response": started}),
                  ("response.output_item.added",
                   {"output_index": 0, "item": {**item, "status": "in_progress", "content": []}}),
                  ("response.content_part.added", {**at, "part": {**part, "text": ""}}),
                  ("response.output_text.delta", {**at, "delta": text, "logprobs": []}),
                  ("response.output_text.done", {**at, "text": text, "logprobs": []}),
                  ("response.content_part.done", {**at, "part": part}),
                  ("response.output_item.done", {"output_index": 0, "item": item}),
                  ("response.completed", {"response": done})]
        return b"".join(sse({"type": kind, "sequence_number": number, **data}, kind)
                        for number, (kind, data) in enumerate(events))


def _completed(model: str, item: dict, usage: dict) -> dict:
    """A completed response of one output item, with every field the SDKs' `Response` requires; the request's
    own settings are not echoed (they shaped no output)."""
    return {"id": reply_id("resp_bamasc_"), "object": "response", "created_at": int(time.time()),
            "status": "completed", "model": model, "output": [item], "usage": usage, "error": None, "incomplete_details": None,
            "instructions": None, "metadata": {}, "parallel_tool_calls": True, "temperature": None,
            "tool_choice": "auto", "tools": [], "top_p": None, "text": {"format": {"type": "text"}}}
