"""Tool calls on the wire, shared by the SDK-backed providers: what a reply's tool calls must hold, and the
names a structured output travels under.

A reply's tool call is read as the model wrote it: a name that is no tool of
the round, or arguments that are not JSON or do not fit the schema, pass
through, and the tool loop answers them with an error result (docs/tools.md).
A reply whose tool calls cannot be answered at all is malformed: a call that
is not an object, has no id or a name or arguments that are not text, or two
calls with one id. Tool calls in a reply to a round sent no tools (a tool
loop's final round) are dropped, as the loop would drop them: its text is the
answer. An id longer than the bound assumes (`RESULT_FRAMING`
counts MAX_ID_BYTES for it in the call and again in its result), or with
characters outside `[A-Za-z0-9_-]`, is replaced by a short one derived from
it: the conversation is re-sent whole every round, so the provider never
needs its own id back, and the next round's prompt stays within its bound.
"""

from __future__ import annotations

import hashlib
import json
import re

from bamasc.runtime.providers.base import ToolCall
from bamasc.runtime.providers.reply import malformed_error

MAX_ID_BYTES = 40
_SAFE_ID = re.compile(r"[A-Za-z0-9_-]{1,40}")
# The JSON schema's name in OpenAI's `response_format`, and the forced tool's in Anthropic's `tools`.
ANSWER_NAME = "answer"


def compact(value) -> str:
    """A JSON value as its arguments or answer text: compact, keys in the model's order, UTF-8 kept."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def wire_id(call_id: str) -> str:
    """The id a tool call keeps in the conversation: its own when short and plain, else `call_` and 24 hex."""
    if _SAFE_ID.fullmatch(call_id):
        return call_id
    return "call_" + hashlib.sha256(call_id.encode("utf-8", "surrogatepass")).hexdigest()[:24]


def reply_call(call_id, name, arguments, *, provider: str, model: str) -> ToolCall:
    """One tool call of a reply, or the malformed error that says what it lacks. `arguments` is the JSON
    text the model wrote, or an object some OpenAI-compatible servers send in its place (written compact)."""
    if not isinstance(call_id, str) or not call_id:
        raise malformed_error(provider=provider, model=model, detail="a tool call has no id")
    if not isinstance(name, str):
        raise malformed_error(provider=provider, model=model, detail="a tool call's name is not text")
    if isinstance(arguments, dict):
        arguments = compact(arguments)
    if not isinstance(arguments, str):
        raise malformed_error(provider=provider, model=model, detail="a tool call's arguments are not text")
    return ToolCall(wire_id(call_id), name, arguments)


def checked_calls(calls: list[ToolCall], tools, *, provider: str, model: str) -> tuple[ToolCall, ...]:
    """The reply's tool calls: none when the round offered no tools; malformed when two share an id."""
    if not tools:
        return ()
    ids = [call.id for call in calls]
    if len(set(ids)) != len(ids):
        raise malformed_error(provider=provider, model=model, detail="two tool calls of the reply share an id")
    return tuple(calls)


def answer_tool_name(tools) -> str:
    """The forced tool's name for a structured output: ANSWER_NAME, with `_` added until no tool has it."""
    taken = {tool.name for tool in tools}
    name = ANSWER_NAME
    while name in taken:
        name += "_"
    return name
