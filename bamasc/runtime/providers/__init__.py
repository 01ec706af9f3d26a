"""Model providers: one protocol, the real SDK-backed providers, and offline fakes and cassettes.

Each provider's record (bamasc/provider_registry.py) names the function that
makes it; its module, and so its SDK, is imported only when a model of that
provider is made. `base` holds the protocol; `sdk`, `failures` and `reply` are
what the SDK-backed providers share.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from bamasc.provider_registry import default_key_env, factory_of, lookup
from bamasc.runtime.providers.base import Completion, Message, Provider, ProviderError

__all__ = ["Completion", "Message", "Provider", "ProviderError", "api_key", "make_provider"]

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
    without `record` plays back recorded calls; otherwise the model's own
    provider, made by its record's factory with `(model, env, cassette)`, and
    wrapped to append every call to `cassette` when `record` is set (unless it
    plays a cassette itself, as provider `replay` does).
    """
    from bamasc.runtime.providers.fake import from_model as fake
    from bamasc.runtime.providers.replay import ReplayProvider

    if record and cassette is None:
        raise ProviderError(f"model '{model.name}': recording needs a cassette file", kind="client")
    if fake_mode is not None:
        provider = fake(model, env, cassette, mode=fake_mode)
    elif cassette is not None and not record:
        return ReplayProvider(model.name, cassette)
    else:
        found = lookup(model.provider)
        if found is None:
            raise ProviderError(f"model '{model.name}' has an unknown provider '{model.provider}'", kind="client")
        provider = factory_of(found)(model, env, cassette)
    if record and not isinstance(provider, ReplayProvider):
        return ReplayProvider(model.name, cassette, inner=provider, record=True)
    return provider


def api_key(model, env: Mapping[str, str] = os.environ) -> str:
    """The key from the model's variable, or from its provider's usual one (`default_key_env`).

    Another server than the provider's own never gets the usual variable's key,
    which belongs to the provider itself; without a variable of its own it
    gets NO_KEY. A variable that is not set is a ProviderError.
    """
    variable = model.api_key_env or default_key_env(model)
    if variable is None:
        return NO_KEY
    value = env.get(variable)
    if value:
        return value
    raise ProviderError(
        f"model '{model.name}' needs an API key in the environment variable {variable}, which is not set",
        kind="auth",
    )
