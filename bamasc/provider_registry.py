"""Every model provider bamasc knows, one record each: every list of providers is derived from these records.

Records only, and no SDK: a record names the function that makes its provider
object as "module:function", imported when a model of that provider is first
made (`make_provider`), so checking a file loads no provider's library.
A new provider is one `register(ProviderRecord(...))` plus its class.
"""

from __future__ import annotations

from bamasc.records import record

# What a model or role may declare about sampling (check/decoding.py reads these attributes).
DECODING_FIELDS = ("temperature", "top_p", "seed", "stop")
# The rate-limit header formats metering/rate_headers.py reads, by their prefix.
RATE_HEADER_FAMILIES = ("x-ratelimit", "anthropic-ratelimit")
# The wire APIs a provider's server may speak; the proxy serves a protocol of each (metering/protocols/).
PROTOCOL_APIS = ("openai", "anthropic")
# How each tokenizer family counts a prompt offline; a provider of none is bounded by UTF-8 bytes.
TOKENIZER_FAMILIES = {
    "tiktoken": "counted exactly with the OpenAI encoding its `tokenizer` names",
    "gguf": "counted with the model's own tokenizer",
    "bytes": "counted one token a byte",
    "recorded": "counted as the recording run counted them",
}
BOUNDED = "bounded safely"  # what happens to the prompts of a provider with no offline tokenizer
_RUNTIME = "bamasc.runtime.providers"


@record
class ProviderRecord:
    """What a provider is: how to make it, what it costs, how it is paced and priced, what it accepts."""

    name: str  # what a model writes: `provider = NAME`
    factory: object  # "module:function" or the function itself: (model, env, cassette) -> Provider
    sdk: str | None = None  # the library the factory imports (None: none outside bamasc)
    key_env: str | None = None  # the variable read for a model that names no `api_key`
    key_host: str | None = None  # the only host that variable's key is sent to (None: any base_url)
    paid: bool = False  # charges per token, so a price of zero is an error (BAM203)
    offline: bool = False  # its calls reach no server that bills them
    rate_headers: str | None = None  # the family of rate-limit headers its replies carry (RATE_HEADER_FAMILIES)
    catalog: str | None = None  # the price catalogue's provider id that a hand-written price is compared with
    tokenizer: str | None = None  # how it counts prompts offline (TOKENIZER_FAMILIES; None: none)
    decoding: tuple[str, ...] = DECODING_FIELDS  # the decoding settings it sends on
    extra: str | None = None  # the optional extra (bamasc.extras) its library comes in
    tools: bool = False  # its API can call tools
    structured_output: bool = False  # its API can hold a reply to a JSON schema
    protocol: str | None = None  # the wire API its server speaks (PROTOCOL_APIS), so the proxy can forward to it
    base_url: str | None = None  # where its server is, for a model that names no `base_url`

    def __post_init__(self) -> None:
        if not (isinstance(self.name, str) and self.name.isidentifier()):
            raise ValueError(f"a provider's name is written bare in a model, so it must be an identifier, not {self.name!r}")
        if not (callable(self.factory) or (isinstance(self.factory, str) and self.factory.count(":") == 1)):
            raise ValueError(f"provider {self.name}: factory must be 'module:function' or a function, not {self.factory!r}")
        if self.rate_headers not in (None, *RATE_HEADER_FAMILIES):
            raise ValueError(f"provider {self.name}: rate_headers must be one of {', '.join(RATE_HEADER_FAMILIES)} "
                             f"or None, not {self.rate_headers!r}")
        if self.tokenizer not in (None, *TOKENIZER_FAMILIES):
            raise ValueError(f"provider {self.name}: tokenizer must be one of {', '.join(TOKENIZER_FAMILIES)} "
                             f"or None, not {self.tokenizer!r}")
        if self.protocol not in (None, *PROTOCOL_APIS):
            raise ValueError(f"provider {self.name}: protocol must be one of {', '.join(PROTOCOL_APIS)} or None, "
                             f"not {self.protocol!r}")
        unknown = [field for field in self.decoding if field not in DECODING_FIELDS]
        if unknown:
            raise ValueError(f"provider {self.name}: unknown decoding fields {unknown}; "
                             f"they are {', '.join(DECODING_FIELDS)}")


_RECORDS: dict[str, ProviderRecord] = {}


def register(provider: ProviderRecord) -> ProviderRecord:
    """Make `provider` known to every stage, from checking to running; a name already taken is a ValueError."""
    if not isinstance(provider, ProviderRecord):
        raise TypeError(f"register takes a ProviderRecord, not {type(provider).__name__}")
    if provider.name in _RECORDS:
        raise ValueError(f"provider {provider.name!r} is registered already")
    _RECORDS[provider.name] = provider
    return provider


def unregister(name: str) -> None:
    """Forget a registered provider (a test's, once it is done)."""
    del _RECORDS[name]


def lookup(name: str) -> ProviderRecord | None:
    return _RECORDS.get(name)


def names() -> tuple[str, ...]:
    """Every provider's name, in the order they were registered."""
    return tuple(_RECORDS)


def names_where(**fields) -> tuple[str, ...]:
    """The names of the providers whose records hold these values, e.g. `names_where(paid=True)`."""
    return tuple(name for name, found in _RECORDS.items()
                 if all(getattr(found, field) == value for field, value in fields.items()))


def factory_of(provider: ProviderRecord):
    """The function that makes `provider`'s objects, its module imported now (and with it the provider's SDK)."""
    if callable(provider.factory):
        return provider.factory
    from importlib import import_module

    module, _, function = provider.factory.partition(":")
    return getattr(import_module(module), function)


def default_key_env(model) -> str | None:
    """The variable a model that names no `api_key` reads its key from: its provider's `key_env`, unless
    the model's base_url is another host than `key_host`, which must not get the provider's own key."""
    found = lookup(model.provider)
    if found is None or found.key_env is None:
        return None
    if found.key_host is None or model.base_url is None:
        return found.key_env
    from urllib.parse import urlsplit

    return found.key_env if urlsplit(model.base_url).hostname == found.key_host else None


def endpoint(model) -> str | None:
    """Where a model's server is: its own `base_url`, else its provider's (None: the SDK's default)."""
    found = lookup(model.provider)
    return model.base_url or (found.base_url if found is not None else None)


def server_address(url: object) -> tuple[str, int] | None:
    """The host and port an http(s) URL reaches (the scheme's port when it names none); None for anything else."""
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(str(url))
        port = parts.port or {"https": 443, "http": 80}.get(parts.scheme)
    except ValueError:
        return None
    return (parts.hostname, port) if parts.hostname and port else None


def at_vendor(model) -> bool:
    """Whether a model is served by its provider's own host (`key_host`), where its name says which model bills."""
    found = lookup(model.provider)
    if found is None or found.key_host is None:
        return False
    where = endpoint(model)
    if where is None:
        return True
    from urllib.parse import urlsplit

    return urlsplit(where).hostname == found.key_host


for _provider in (
    ProviderRecord(
        "openai", f"{_RUNTIME}.openai_provider:from_model", sdk="openai", key_env="OPENAI_API_KEY",
        key_host="api.openai.com", paid=True, rate_headers="x-ratelimit", catalog="openai", tokenizer="tiktoken",
        tools=True, structured_output=True, protocol="openai", base_url="https://api.openai.com/v1",
    ),
    ProviderRecord(
        "anthropic", f"{_RUNTIME}.anthropic_provider:from_model", sdk="anthropic", key_env="ANTHROPIC_API_KEY",
        paid=True, rate_headers="anthropic-ratelimit", catalog="anthropic",
        decoding=("temperature", "top_p", "stop"),  # the Messages API has no seed
        tools=True, structured_output=True,  # a structured output is a forced tool call
        protocol="anthropic", base_url="https://api.anthropic.com",
    ),
    ProviderRecord(
        "llamacpp", f"{_RUNTIME}.llamacpp_provider:from_model", sdk="llama_cpp", offline=True, tokenizer="gguf",
        extra="local",
    ),
    ProviderRecord("fake", f"{_RUNTIME}.fake:from_model", offline=True, tokenizer="bytes", tools=True,
                   structured_output=True),
    ProviderRecord("replay", f"{_RUNTIME}.replay:from_model", offline=True, tokenizer="recorded", tools=True,
                   structured_output=True),
):
    register(_provider)
del _provider
