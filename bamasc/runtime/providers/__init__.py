"""Model providers: one protocol, the real SDK-backed providers, and offline fakes and cassettes.

SDKs are imported only inside the branch of `make_provider` that needs them. `base` holds the
protocol; `sdk`, `failures` and `reply` are what the SDK-backed providers share.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from bamasc.runtime.providers.base import Completion, Message, Provider, ProviderError

__all__ = ["Completion", "Message", "Provider", "ProviderError", "make_provider"]

# The variable read when a model names no `api_key`; a model on another
# OpenAI-compatible server (base_url) needs none.
DEFAULT_KEY_ENV = {"openai": "OPENAI_API_KEY", "anthropic": "ANTHROPIC_API_KEY"}
# What an OpenAI-compatible server that takes no key is sent instead.
NO_KEY = "none"


def make_provider(
    model,
    *,
    fake_mode: str | None = None,
    cassette: str | None = None,
    record: bool = False,
    env: Mapping[str, str] = os.environ,
) -> Provider:
    """The provider that serves `model` (a checked `Model`).

    In order: `fake_mode` ("echo" or "verbose") answers every model with a
    FakeProvider, whatever its provider, so a plan runs offline; a `cassette`
    without `record`, or provider `replay`, plays back recorded calls; otherwise
    the model's own provider, wrapped to append every call to `cassette` when
    `record` is set.
    """
    from bamasc.runtime.providers.fake import FakeProvider
    from bamasc.runtime.providers.replay import ReplayProvider

    if record and cassette is None:
        raise ProviderError(f"model '{model.name}': recording needs a cassette file", kind="client")
    if fake_mode is None and (model.provider == "replay" or (cassette is not None and not record)):
        if cassette is None:
            raise ProviderError(
                f"replay model '{model.name}' needs a cassette of recorded calls to play back", kind="client"
            )
        return ReplayProvider(model.name, cassette)
    if fake_mode is not None or model.provider == "fake":
        # The fake takes the time the model's `latency` block declares, so a deadline can be tried offline.
        latency = getattr(model, "latency", None)
        delays = {} if latency is None else {
            "first_token_s": latency.first_token_s, "per_output_token_s": latency.per_output_token_s
        }
        provider = FakeProvider(model.name, mode=fake_mode or "echo", **delays)
    else:
        provider = _real_provider(model, env)
    if record:
        return ReplayProvider(model.name, cassette, inner=provider, record=True)
    return provider


def _real_provider(model, env: Mapping[str, str]) -> Provider:
    if model.provider == "openai":
        from bamasc.runtime.providers.openai_provider import OpenAIProvider, is_official_endpoint

        official = is_official_endpoint(model.base_url)
        return OpenAIProvider(
            model.name,
            model.model_id,
            api_key=_api_key(model, env, default_env=official),
            base_url=model.base_url,
            # OpenAI's own field; other servers reliably know only the older one.
            token_param="max_completion_tokens" if official else "max_tokens",
            tokenizer=model.tokenizer,
        )
    if model.provider == "anthropic":
        from bamasc.runtime.providers.anthropic_provider import AnthropicProvider

        return AnthropicProvider(
            model.name, model.model_id, api_key=_api_key(model, env, default_env=True), base_url=model.base_url
        )
    if model.provider == "llamacpp":
        from bamasc.runtime.providers.llamacpp_provider import LlamaCppProvider

        return LlamaCppProvider(model.name, model.model_id, context=model.context, max_output=model.max_output)
    raise ProviderError(f"model '{model.name}' has an unknown provider '{model.provider}'", kind="client")


def upstream_key(model, env: Mapping[str, str] = os.environ) -> str:
    """The key a call to `model`'s own server sends: from its variable, or the provider's usual one for the
    provider's own endpoint (NO_KEY for another server without a variable); a ProviderError when unset."""
    from bamasc.runtime.providers.openai_provider import is_official_endpoint

    official = model.provider == "anthropic" or (model.provider == "openai" and is_official_endpoint(model.base_url))
    return _api_key(model, env, default_env=official)


def _api_key(model, env: Mapping[str, str], *, default_env: bool) -> str:
    """The key from the model's variable, or from the provider's usual one when `default_env`.

    Another server never gets the usual variable's key, which belongs to the
    provider itself; without a variable of its own it gets NO_KEY.
    """
    variable = model.api_key_env or (DEFAULT_KEY_ENV.get(model.provider) if default_env else None)
    if variable is None:
        return NO_KEY
    value = env.get(variable)
    if value:
        return value
    raise ProviderError(
        f"model '{model.name}' needs an API key in the environment variable {variable}, which is not set",
        kind="auth",
    )
