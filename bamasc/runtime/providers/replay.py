"""Cassettes: completions recorded from real runs, played back by model and prompt hash.

A cassette is a JSONL file, one recorded call a line: {"key", "model",
"max_tokens", "messages", "text", "prompt_tokens", "completion_tokens",
"finish_reason", "counted_prompt_tokens"}, the last being the count the
recording run reserved for (played back by `count_prompt_tokens`), and the
reply's "response_id" and "response_model" where its provider gave them (a
cassette recorded before they were kept plays back without them).
The key is the SHA-256 of the model's name, the messages and max_tokens
(`prompt_key`). Nothing else about the provider is written: no URL, no key.

Tool rounds are recorded like any call: a completion that asked for tools
has "tool_calls" ([{"id", "name", "arguments"}]); a message that carries tool
calls or answers one has "tool_calls" or "tool_call_id", and they are in the
key, with the names of the tools the round offered and a structured output's
schema. A call without any of these is written and keyed as before.

A prompt recorded several times plays back its recordings in order, then
repeats the last. In record mode a prompt is played back while the cassette
still holds an unplayed recording of it and sent to the inner provider
otherwise, so recording a run again costs nothing for what is already there.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections import defaultdict

from bamasc.rows import RowError, drop_torn_line, parse_lines
from bamasc.runtime.providers.base import (
    GREEDY, Completion, Decoding, Message, Provider, ProviderError, ToolCall, reply_label,
)


def prompt_key(model: str, messages: list[Message], max_tokens: int | None, tools: tuple = (),
               output_schema: dict | None = None) -> str:
    """The cassette key of one call: SHA-256 over a canonical JSON of its inputs.

    With max_tokens None it keys the messages alone (for the recorded prompt count).
    """
    fields = {"model": model, "messages": [_keyed(m) for m in messages]}
    if max_tokens is not None:
        fields["max_tokens"] = max_tokens
    if tools:
        fields["tools"] = [tool.name for tool in tools]
    if output_schema is not None:
        fields["output_schema"] = output_schema
    payload = json.dumps(fields, ensure_ascii=False, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(payload.encode("utf-8", "surrogatepass")).hexdigest()


def _keyed(message: Message) -> list:
    """A message as its key holds it: role and content, then its tool calls and the call it answers, if any."""
    if not message.tool_calls and message.tool_call_id is None:
        return [message.role, message.content]
    return [message.role, message.content, [[c.id, c.name, c.arguments] for c in message.tool_calls],
            message.tool_call_id]


def _message_line(message: Message) -> dict:
    line = {"role": message.role, "content": message.content}
    if message.tool_calls:
        line["tool_calls"] = [_call_line(call) for call in message.tool_calls]
    if message.tool_call_id is not None:
        line["tool_call_id"] = message.tool_call_id
    return line


def _call_line(call: ToolCall) -> dict:
    return {"id": call.id, "name": call.name, "arguments": call.arguments}


def _calls(lines) -> tuple[ToolCall, ...]:
    """Recorded tool calls, each {"id", "name", "arguments"} of text."""
    calls = tuple(ToolCall(line["id"], line["name"], line["arguments"]) for line in lines)
    if not all(isinstance(value, str) for call in calls for value in (call.id, call.name, call.arguments)):
        raise ValueError("a recorded tool call is not text")
    return calls


def from_model(model, env, cassette: str | None) -> ReplayProvider:
    """A checked `replay` model: the run's cassette played back (its record's factory)."""
    if cassette is None:
        raise ProviderError(f"replay model '{model.name}' needs a cassette of recorded calls to play back", kind="client")
    return ReplayProvider(model.name, cassette)


class ReplayProvider:
    """Plays back a cassette for one model, or records the calls of `inner` into it."""

    def __init__(
        self,
        name: str,
        cassette_path: str | os.PathLike,
        inner: Provider | None = None,
        record: bool = False,
    ) -> None:
        if record and inner is None:
            raise ProviderError(f"replay model '{name}': recording needs a real provider to record", kind="client")
        self.name = name
        self.cassette_path = os.fspath(cassette_path)
        self.inner = inner
        self.record = record
        self._recorded, self._counted = _load(self.cassette_path, name, must_exist=not record)
        if record:
            drop_torn_line(self.cassette_path)
        self._played = defaultdict(int)

    def __repr__(self) -> str:
        mode = "record" if self.record else "replay"
        return f"ReplayProvider(name={self.name!r}, cassette={self.cassette_path!r}, mode={mode})"

    @property
    def server(self) -> tuple[str, int] | None:
        """Where a recording run's calls go (its inner provider's server); None when it plays back: no server answers.
        A call the recording plays back from the cassette is traced under the inner one's server all the same."""
        return getattr(self.inner, "server", None) if self.record else None

    def count_prompt_tokens(self, messages: list[Message]) -> int | None:
        # Played back, the count is the one the recording run reserved with, so the
        # guard clamps max_tokens alike and the keys match.
        if self.inner is not None:
            return self.inner.count_prompt_tokens(messages)
        return self._counted.get(prompt_key(self.name, messages, None))

    async def complete(
        self, messages: list[Message], max_tokens: int, *, timeout: float, decoding: Decoding = GREEDY,
        expect: str = "text", tools: tuple = (), output_schema: dict | None = None,
    ) -> Completion:
        key = prompt_key(self.name, messages, max_tokens, tools, output_schema)
        recordings = self._recorded.get(key, [])
        played = self._played[key]
        if played < len(recordings) or (recordings and not self.record):
            self._played[key] += 1
            return recordings[min(played, len(recordings) - 1)]
        if not self.record:
            raise ProviderError(
                f"replay model '{self.name}' has no recording for prompt {key} "
                f"(max_tokens {max_tokens}) in {self.cassette_path}",
                kind="not_found",
                retryable=False,
            )
        given = {"tools": tools} if tools else {}
        if output_schema is not None:
            given["output_schema"] = output_schema
        completion = await self.inner.complete(messages, max_tokens, timeout=timeout, decoding=decoding, expect=expect,
                                               **given)
        self._append(key, messages, max_tokens, completion)
        self._recorded.setdefault(key, []).append(completion)
        self._played[key] += 1
        return completion

    def _append(self, key: str, messages: list[Message], max_tokens: int, completion: Completion) -> None:
        line = {
            "key": key,
            "model": self.name,
            "max_tokens": max_tokens,
            "messages": [_message_line(m) for m in messages],
            "text": completion.text,
            "prompt_tokens": completion.prompt_tokens,
            "completion_tokens": completion.completion_tokens,
            "finish_reason": completion.finish_reason,
            "counted_prompt_tokens": self.inner.count_prompt_tokens(messages),
        }
        for field in ("response_id", "response_model"):
            if getattr(completion, field) is not None:
                line[field] = getattr(completion, field)
        if completion.tool_calls:
            line["tool_calls"] = [_call_line(call) for call in completion.tool_calls]
        # One whole line per write, flushed at once: a crash loses at most the call in flight.
        text = json.dumps(line) + "\n"  # ASCII escapes survive any text, lone surrogates included
        with open(self.cassette_path, "ab") as cassette:
            cassette.write(text.encode("ascii"))
            cassette.flush()

    async def aclose(self) -> None:
        if self.inner is not None:
            await self.inner.aclose()


def _load(path: str, model: str, *, must_exist: bool) -> tuple[dict[str, list[Completion]], dict[str, int]]:
    """The recordings of `model` by prompt key, and the prompt counts by messages key."""
    recorded: dict[str, list[Completion]] = {}
    counted: dict[str, int] = {}
    try:
        with open(path, encoding="utf-8") as cassette:
            lines = cassette.readlines()
    except FileNotFoundError:
        if must_exist:
            raise ProviderError(f"replay model '{model}': cassette {path} does not exist", kind="not_found") from None
        return recorded, counted
    except (OSError, UnicodeDecodeError) as problem:
        raise ProviderError(f"cassette {path} cannot be read: {problem}", kind="client") from None
    for number, recording, problem in parse_lines(lines, lambda line: _recording(line, model)):
        if problem is not None:
            if not lines[number - 1].endswith("\n"):
                continue  # the last line of a run that stopped mid-write
            raise ProviderError(f"cassette {path} line {number} is not a recorded call", kind="client")
        if recording is None:
            continue  # another model's
        key, completion, counts = recording
        counted.update(counts)
        recorded.setdefault(key, []).append(completion)
    return recorded, counted


def _recording(line: str, model: str) -> tuple[str, Completion, dict[str, int]] | None:
    """One cassette line of `model`: its key, its completion and {messages key: recorded prompt count} (empty
    when it recorded none); None for another model's line.

    Cassettes are written by bamasc, so plain `json.loads` reads them: unlike a
    dataset row, a recorded reply may hold any string a provider sent, a lone
    surrogate included. A line that is no recorded call is a RowError.
    """
    try:
        entry = json.loads(line)
        if entry["model"] != model:
            return None
        completion = Completion(
            str(entry["text"]),
            _count(entry["prompt_tokens"]),
            _count(entry["completion_tokens"]),
            entry.get("finish_reason"),
            tool_calls=_calls(entry.get("tool_calls", ())),
            response_id=reply_label(entry.get("response_id")),
            response_model=reply_label(entry.get("response_model")),
        )
        count = entry.get("counted_prompt_tokens")
        if count is None:
            return str(entry["key"]), completion, {}
        messages = [Message(m["role"], m["content"], _calls(m.get("tool_calls", ())), m.get("tool_call_id"))
                    for m in entry["messages"]]
        return str(entry["key"]), completion, {prompt_key(model, messages, None): _count(count)}
    except (ValueError, KeyError, TypeError, AttributeError, RecursionError) as problem:
        raise RowError("not a recorded call", type(problem).__name__) from None


def _count(value: object) -> int:
    """A recorded token count: a non-negative JSON integer, as providers report them."""
    if type(value) is not int or value < 0:
        raise ValueError(f"not a token count: {value!r}")
    return value
