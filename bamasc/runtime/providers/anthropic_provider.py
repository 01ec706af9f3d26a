"""Messages through the official `anthropic` SDK."""

from __future__ import annotations

from collections.abc import Mapping

import anthropic

from bamasc.records import replace
from bamasc.runtime.providers.base import GREEDY, Completion, Decoding, Message
from bamasc.runtime.providers.reply import malformed_error, missing_fields, usage_tokens
from bamasc.runtime.providers.sdk import aiohttp_client, post_json

PROVIDER = "anthropic"
PATH = "/v1/messages"
"""Where `post_json` sends a request, instead of `messages.create` (its docstring says why)."""


def from_model(model, env: Mapping[str, str], cassette: str | None) -> AnthropicProvider:
    """The provider of a checked `anthropic` model (its record's factory)."""
    from bamasc.runtime.providers import api_key

    return AnthropicProvider(model.name, model.model_id, api_key=api_key(model, env), base_url=model.base_url)


class AnthropicProvider:
    """One Claude model. System messages travel in the request's `system` field, joined by blank lines.

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

    def count_prompt_tokens(self, messages: list[Message]) -> int | None:
        return None

    async def complete(
        self, messages: list[Message], max_tokens: int, *, timeout: float, decoding: Decoding = GREEDY,
        expect: str = "text",
    ) -> Completion:
        system = "\n\n".join(message.content for message in messages if message.role == "system")
        request = {
            "model": self.model_id,
            "max_tokens": max_tokens,
            "messages": [
                {"role": message.role, "content": message.content} for message in messages if message.role != "system"
            ],
        }
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
        return replace(self._completion(response), rate_headers=limits)

    def _completion(self, response: object) -> Completion:
        try:
            text = "".join(block["text"] for block in response["content"] if block.get("type") == "text")
            usage = response["usage"]
            finish_reason = response.get("stop_reason")
        except (AttributeError, KeyError, TypeError) as error:
            raise missing_fields(response, error, provider=PROVIDER, model=self.name) from None
        if not isinstance(text, str):
            raise malformed_error(provider=PROVIDER, model=self.name, detail="a text block is not text")
        # `input_tokens` leaves out the cached part of the prompt. Writes are
        # billed only for prompts marked with cache_control, which bamasc never
        # sends, so they should be absent; they are charged if not.
        prompt_tokens = usage_tokens(usage, "input_tokens", provider=PROVIDER, model=self.name)
        written = usage_tokens(usage, "cache_creation_input_tokens", provider=PROVIDER, model=self.name, optional=True)
        cached = usage_tokens(usage, "cache_read_input_tokens", provider=PROVIDER, model=self.name, optional=True)
        completion_tokens = usage_tokens(usage, "output_tokens", provider=PROVIDER, model=self.name)
        reason = finish_reason if isinstance(finish_reason, str) else None
        return Completion(text, prompt_tokens + written + cached, completion_tokens, reason,
                          cached_tokens=cached, cache_write_tokens=written)

    async def aclose(self) -> None:
        await self._client.close()
