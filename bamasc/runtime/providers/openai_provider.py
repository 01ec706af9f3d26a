"""Chat completions through the official `openai` SDK: OpenAI itself and OpenAI-compatible servers."""

from __future__ import annotations

from collections.abc import Mapping
from urllib.parse import urlsplit

import openai

from bamasc.encodings import counting_tokenizer
from bamasc.provider_registry import at_vendor, endpoint, lookup, server_address
from bamasc.records import replace
from bamasc.runtime.providers.base import GREEDY, Completion, Decoding, Message, reply_label
from bamasc.runtime.providers.reply import malformed_error, missing_fields, usage_tokens
from bamasc.runtime.providers.sdk import aiohttp_client, post_json
from bamasc.runtime.providers.tool_wire import ANSWER_NAME, checked_calls, reply_call
from bamasc.runtime.tokens import exact_prompt_tokens

PROVIDER = "openai"
PATH = "/chat/completions"
"""Where `post_json` sends a request, instead of `chat.completions.create` (its docstring says why)."""
TOKEN_PARAMS = ("max_completion_tokens", "max_tokens")


# OpenAI's reasoning models refuse `temperature`, `top_p` and `stop` (they
# sample in their own way); the ids are matched like the tokenizer families.
REASONING_FAMILIES = ("o1", "o3", "o4", "gpt-5")


def is_reasoning_model(model_id: str) -> bool:
    return any(model_id == family or model_id.startswith(family + "-") for family in REASONING_FAMILIES)


def from_model(model, env: Mapping[str, str], cassette: str | None) -> OpenAIProvider:
    """The provider of a checked `openai` model (its record's factory)."""
    from bamasc.runtime.providers import api_key

    official = at_vendor(model)
    return OpenAIProvider(
        model.name,
        model.model_id,
        api_key=api_key(model, env),
        base_url=endpoint(model),
        # OpenAI's own field; other servers reliably know only the older one.
        token_param="max_completion_tokens" if official else "max_tokens",
        tokenizer=model.tokenizer,
    )


def _at_openai(base_url: str | None) -> bool:
    """Whether `base_url` is OpenAI's own API (None means the SDK's default, which is)."""
    return base_url is None or urlsplit(base_url).hostname == lookup("openai").key_host


class OpenAIProvider:
    """One model behind an OpenAI-style `/chat/completions` endpoint.

    `token_param` names the request field that caps the reply:
    "max_completion_tokens" is OpenAI's current field (its reasoning models
    reject the other); many OpenAI-compatible servers (DeepSeek, older
    llama.cpp and Ollama builds) know only "max_tokens" and would ignore the
    new name, leaving the reply uncapped.

    `tokenizer` (an OpenAI model id or encoding name) enables exact prompt
    counts. Without it, `model_id` names the tokenizer only at OpenAI's own
    endpoint: behind any other server a name like `gpt-4o-mini` may be any
    model (one counting a token per byte was billed 5 times its bound), so
    it gets the safe bound unless the model declares its `tokenizer`.
    """

    def __init__(
        self,
        name: str,
        model_id: str,
        *,
        api_key: str,
        base_url: str | None = None,
        token_param: str = "max_completion_tokens",
        tokenizer: str | None = None,
        client: openai.AsyncOpenAI | None = None,
    ) -> None:
        if token_param not in TOKEN_PARAMS:
            raise ValueError(f"token_param must be one of {', '.join(TOKEN_PARAMS)}, not {token_param!r}")
        self.name = name
        self.model_id = model_id
        self.base_url = base_url
        self.token_param = token_param
        self._tokenizer = counting_tokenizer(model_id, tokenizer, _at_openai(base_url))
        self._api_key = api_key
        # The SDK retries on its own by default; each attempt must be budgeted, so never.
        self._client = client or openai.AsyncOpenAI(
            api_key=api_key, base_url=base_url, max_retries=0, http_client=aiohttp_client(openai, base_url)
        )

    def __repr__(self) -> str:
        return f"OpenAIProvider(name={self.name!r}, model_id={self.model_id!r}, base_url={self.base_url!r})"

    @property
    def server(self) -> tuple[str, int] | None:
        """The host and port its requests go to (the trace's `server_address` and `server_port`)."""
        return server_address(self._client.base_url)

    def count_prompt_tokens(self, messages: list[Message]) -> int | None:
        # OpenAI publishes no counting rule for tool calls and results: those prompts get the safe bound.
        if any(message.tool_calls or message.role == "tool" for message in messages):
            return None
        return exact_prompt_tokens(self._tokenizer, messages)

    async def complete(
        self, messages: list[Message], max_tokens: int, *, timeout: float, decoding: Decoding = GREEDY,
        expect: str = "text", tools: tuple = (), output_schema: dict | None = None,
    ) -> Completion:
        request = {
            "model": self.model_id,
            "messages": [wire_message(message) for message in messages],
            self.token_param: max_tokens,
            **self._sampling(decoding),
        }
        if tools:
            request["tools"] = [
                {"type": "function", "function": {"name": tool.name, "description": tool.description,
                                                  "parameters": tool.parameters}}
                for tool in tools
            ]
        if output_schema is not None:
            request["response_format"] = {
                "type": "json_schema", "json_schema": {"name": ANSWER_NAME, "schema": output_schema, "strict": False},
            }
        response, limits = await post_json(
            self._client,
            openai,
            PATH,
            request,
            provider=PROVIDER,
            model=self.name,
            timeout=timeout,
            secret=self._api_key,
            base_error=openai.OpenAIError,
        )
        return replace(self._completion(response, tools), rate_headers=limits)

    def _sampling(self, decoding: Decoding) -> dict:
        fields = {"seed": decoding.seed}
        if not is_reasoning_model(self.model_id):
            fields.update(temperature=decoding.temperature, top_p=decoding.top_p, stop=list(decoding.stop) or None)
        return {name: value for name, value in fields.items() if value is not None}

    def _completion(self, response: object, tools: tuple = ()) -> Completion:
        try:
            choice = response["choices"][0]
            message = choice["message"]
            text = message.get("content") or ""
            wire_calls = message.get("tool_calls") or []
            usage = response["usage"]
            finish_reason = choice.get("finish_reason")
        except (AttributeError, IndexError, KeyError, TypeError) as error:
            raise missing_fields(response, error, provider=PROVIDER, model=self.name) from None
        if not isinstance(text, str):
            raise malformed_error(provider=PROVIDER, model=self.name, detail="the message content is not text")
        refusal = message.get("refusal")
        if not text and not wire_calls and isinstance(refusal, str) and refusal:
            raise malformed_error(provider=PROVIDER, model=self.name, detail=f"the model refused: {refusal[:200]}")
        calls = checked_calls(self._tool_calls(wire_calls), tools, provider=PROVIDER, model=self.name)
        prompt_tokens = usage_tokens(usage, "prompt_tokens", provider=PROVIDER, model=self.name)
        completion_tokens = usage_tokens(usage, "completion_tokens", provider=PROVIDER, model=self.name)
        # Prompt caching is automatic: the cached part of the prompt is reported here (and billed lower).
        details = usage.get("prompt_tokens_details") if isinstance(usage, dict) else None
        cached = usage_tokens(details, "cached_tokens", provider=PROVIDER, model=self.name, optional=True) if isinstance(details, dict) else 0
        if cached > prompt_tokens:
            raise malformed_error(provider=PROVIDER, model=self.name,
                                  detail=f"usage reports {cached} cached tokens of a {prompt_tokens}-token prompt")
        reason = finish_reason if isinstance(finish_reason, str) else None
        return Completion(text, prompt_tokens, completion_tokens, reason, cached_tokens=cached, tool_calls=calls,
                          response_id=reply_label(response.get("id")), response_model=reply_label(response.get("model")))

    def _tool_calls(self, wire_calls: object) -> list:
        """`message.tool_calls`: `{"id", "type": "function", "function": {"name", "arguments"}}` each."""
        if not isinstance(wire_calls, list):
            raise malformed_error(provider=PROVIDER, model=self.name, detail="tool_calls is not a list")
        calls = []
        for call in wire_calls:
            function = call.get("function") if isinstance(call, dict) else None
            if not isinstance(function, dict) or call.get("type", "function") != "function":
                raise malformed_error(provider=PROVIDER, model=self.name, detail="a tool call is not a function call")
            calls.append(reply_call(call.get("id"), function.get("name"), function.get("arguments"),
                                    provider=PROVIDER, model=self.name))
        return calls

    async def aclose(self) -> None:
        await self._client.close()


def wire_message(message: Message) -> dict:
    """A message in the chat-completions form: an assistant's tool calls under `tool_calls` (its content null
    when it wrote none), a tool result as a `tool` message naming the call it answers."""
    if message.role == "tool":
        return {"role": "tool", "tool_call_id": message.tool_call_id, "content": message.content}
    if message.role == "assistant" and message.tool_calls:
        return {
            "role": "assistant",
            "content": message.content or None,
            "tool_calls": [{"id": call.id, "type": "function",
                            "function": {"name": call.name, "arguments": call.arguments}}
                           for call in message.tool_calls],
        }
    return {"role": message.role, "content": message.content}
