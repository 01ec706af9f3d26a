"""Messages through the official `anthropic` SDK."""

from __future__ import annotations

import json
from collections.abc import Mapping

import anthropic

from bamasc.provider_registry import endpoint, server_address
from bamasc.records import replace
from bamasc.runtime.providers.base import GREEDY, Completion, Decoding, Message, ProviderError, reply_label
from bamasc.runtime.providers.reply import malformed_error, missing_fields, usage_tokens
from bamasc.runtime.providers.sdk import aiohttp_client, post_json
from bamasc.runtime.providers.tool_wire import answer_tool_name, checked_calls, compact, reply_call

PROVIDER = "anthropic"
PATH = "/v1/messages"
"""Where `post_json` sends a request, instead of `messages.create` (its docstring says why)."""


def from_model(model, env: Mapping[str, str], cassette: str | None) -> AnthropicProvider:
    """The provider of a checked `anthropic` model (its record's factory)."""
    from bamasc.runtime.providers import api_key

    return AnthropicProvider(model.name, model.model_id, api_key=api_key(model, env), base_url=endpoint(model))


class AnthropicProvider:
    """One Claude model. System messages travel in the request's `system` field, joined by blank lines.

    Tools go as `tools` (`name`, `description`, `input_schema`); an assistant's tool calls as its
    `tool_use` blocks, and their results as `tool_result` blocks of the next user message. A
    structured output is one more tool, `answer`, that the model must call (`tool_choice` `tool`, or
    `any` in a round that also offers the role's tools): its input is the answer, returned as the
    completion's text.

    Anthropic publishes no offline tokenizer, so prompt counts are left to the
    caller's safe bound. Prompt caching is never requested, so the usage's
    cache fields are normally zero; any that appear are added to the prompt.
    """

    def __init__(
        self,
        name: str,
        model_id: str,
        *,
        api_key: str,
        base_url: str | None = None,
        client: anthropic.AsyncAnthropic | None = None,
    ) -> None:
        self.name = name
        self.model_id = model_id
        self.base_url = base_url
        self._api_key = api_key
        # The SDK retries on its own by default; each attempt must be budgeted, so never.
        self._client = client or anthropic.AsyncAnthropic(
            api_key=api_key, base_url=base_url, max_retries=0, http_client=aiohttp_client(anthropic, base_url)
        )

    def __repr__(self) -> str:
        return f"AnthropicProvider(name={self.name!r}, model_id={self.model_id!r}, base_url={self.base_url!r})"

    @property
    def server(self) -> tuple[str, int] | None:
        """The host and port its requests go to (the trace's `server_address` and `server_port`)."""
        return server_address(self._client.base_url)

    def count_prompt_tokens(self, messages: list[Message]) -> int | None:
        return None

    async def complete(
        self, messages: list[Message], max_tokens: int, *, timeout: float, decoding: Decoding = GREEDY,
        expect: str = "text", tools: tuple = (), output_schema: dict | None = None,
    ) -> Completion:
        system = "\n\n".join(message.content for message in messages if message.role == "system")
        request = {
            "model": self.model_id,
            "max_tokens": max_tokens,
            "messages": wire_messages([message for message in messages if message.role != "system"], self.name),
        }
        answer = answer_tool_name(tools) if output_schema is not None else None
        offered = [{"name": tool.name, "description": tool.description, "input_schema": tool.parameters}
                   for tool in tools]
        if answer is not None:
            offered.append({"name": answer, "input_schema": output_schema})
            request["tool_choice"] = {"type": "any"} if tools else {"type": "tool", "name": answer}
        if offered:
            request["tools"] = offered
        # The Messages API has no seed; a stop sequence is `stop_sequences`.
        sampling = {"temperature": decoding.temperature, "top_p": decoding.top_p,
                    "stop_sequences": list(decoding.stop) or None}
        request.update((name, value) for name, value in sampling.items() if value is not None)
        if system:
            request["system"] = system
        response, limits = await post_json(
            self._client,
            anthropic,
            PATH,
            request,
            provider=PROVIDER,
            model=self.name,
            timeout=timeout,
            secret=self._api_key,
            base_error=anthropic.AnthropicError,
        )
        return replace(self._completion(response, tools, answer), rate_headers=limits)

    def _completion(self, response: object, tools: tuple = (), answer: str | None = None) -> Completion:
        try:
            text = "".join(block["text"] for block in response["content"] if block.get("type") == "text")
            uses = [block for block in response["content"] if block.get("type") == "tool_use"]
            usage = response["usage"]
            finish_reason = response.get("stop_reason")
        except (AttributeError, KeyError, TypeError) as error:
            raise missing_fields(response, error, provider=PROVIDER, model=self.name) from None
        if not isinstance(text, str):
            raise malformed_error(provider=PROVIDER, model=self.name, detail="a text block is not text")
        calls = []
        for use in uses:
            if not isinstance(use.get("input"), dict):
                raise malformed_error(provider=PROVIDER, model=self.name, detail="a tool_use block's input is not an object")
            if answer is not None and use.get("name") == answer:
                # The structured answer ends the call: its input is the reply, and any other tool it asked for is dropped.
                text, calls, tools = compact(use["input"]), [], ()
                break
            calls.append(reply_call(use.get("id"), use.get("name"), use["input"], provider=PROVIDER, model=self.name))
        calls = checked_calls(calls, tools, provider=PROVIDER, model=self.name)
        # `input_tokens` leaves out the cached part of the prompt. Writes are
        # billed only for prompts marked with cache_control, which bamasc never
        # sends, so they should be absent; they are charged if not.
        prompt_tokens = usage_tokens(usage, "input_tokens", provider=PROVIDER, model=self.name)
        written = usage_tokens(usage, "cache_creation_input_tokens", provider=PROVIDER, model=self.name, optional=True)
        cached = usage_tokens(usage, "cache_read_input_tokens", provider=PROVIDER, model=self.name, optional=True)
        completion_tokens = usage_tokens(usage, "output_tokens", provider=PROVIDER, model=self.name)
        reason = finish_reason if isinstance(finish_reason, str) else None
        return Completion(text, prompt_tokens + written + cached, completion_tokens, reason,
                          cached_tokens=cached, cache_write_tokens=written, tool_calls=calls,
                          response_id=reply_label(response.get("id")), response_model=reply_label(response.get("model")))

    async def aclose(self) -> None:
        await self._client.close()


def wire_messages(messages: list[Message], model: str) -> list[dict]:
    """The conversation in the Messages form. Plain messages keep their text content; an assistant's tool
    calls become `tool_use` blocks after its text, and tool results `tool_result` blocks of one user
    message, which a user message right after them joins as a text block."""
    wire: list[dict] = []
    for message in messages:
        if message.role == "assistant" and message.tool_calls:
            blocks = [{"type": "text", "text": message.content}] if message.content else []
            blocks += [{"type": "tool_use", "id": call.id, "name": call.name, "input": _input(call, model)}
                       for call in message.tool_calls]
            wire.append({"role": "assistant", "content": blocks})
        elif message.role == "tool":
            result = {"type": "tool_result", "tool_use_id": message.tool_call_id, "content": message.content}
            if wire and wire[-1]["role"] == "user" and isinstance(wire[-1]["content"], list):
                wire[-1]["content"].append(result)
            else:
                wire.append({"role": "user", "content": [result]})
        elif message.role == "user" and wire and wire[-1]["role"] == "user" and isinstance(wire[-1]["content"], list):
            wire[-1]["content"].append({"type": "text", "text": message.content})
        else:
            wire.append({"role": message.role, "content": message.content})
    return wire


def _input(call, model: str) -> dict:
    """A tool call's arguments as the object a `tool_use` block holds (they were written from one)."""
    try:
        value = json.loads(call.arguments) if call.arguments else {}
    except ValueError:
        value = None
    if not isinstance(value, dict):
        raise ProviderError(f"{PROVIDER} model '{model}': tool call {call.id} has arguments that are not a JSON "
                            "object, which a tool_use block cannot hold", kind="client")
    return value
