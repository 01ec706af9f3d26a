"""Reads and checks `model` declarations: provider, tier, secrets, caps, quality (prices: check/prices.py)."""

from __future__ import annotations

import re

from bamasc.check.attributes import Attributes, declares, out_of_range, shown
from bamasc.check.decoding import DECODING_ATTRIBUTES, read_decoding
from bamasc.check.env import env_secret
from bamasc.check.latency import read_latency
from bamasc.check.prices import read_price
from bamasc.check.rate_limit import read_rate_limit
from bamasc.program import Model
from bamasc.diagnostics import Diagnostic, error, warning
from bamasc.encodings import ENCODINGS, OPENAI_FAMILIES, encoding_for
from bamasc.limits import MAX_QUALITY, MAX_TIER
from bamasc.provider_registry import BOUNDED, TOKENIZER_FAMILIES, lookup, names, names_where
from bamasc.secrets import looks_like_key
from bamasc.source import Span
from bamasc.syntax import ast

API_KEY_EXAMPLE = 'api_key = env("PROVIDER_API_KEY")'
# `scheme://userinfo@`: a user name or password written into the URL.
USERINFO = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://([^/?#@]*)@")

MODEL_ATTRIBUTES = declares("a model", (
    "provider", "name", "price", "tier", "base_url", "api_key",
    "max_output", "context", "tokenizer", "quality", "latency", "rate_limit", "fallback", *DECODING_ATTRIBUTES,
))


def read_model(decl: ast.ModelDecl, diagnostics: list[Diagnostic]) -> Model:
    attrs = Attributes(f"model '{decl.name}'", decl.attrs, MODEL_ATTRIBUTES, diagnostics, decl.name_span)
    provider = attrs.choice("provider", names(), "")
    if "provider" not in attrs.items:
        attrs.missing("provider", "provider = openai")
    model_id = attrs.string("name", 'name = "gpt-4.1-nano"') or decl.name
    pricing = read_price(decl, attrs, provider, diagnostics)
    fallbacks = attrs.names("fallback")
    return Model(
        name=decl.name,
        provider=provider,
        model_id=model_id,
        price_input=pricing.input,
        price_output=pricing.output,
        tier=_tier(attrs, diagnostics),
        base_url=_base_url(attrs, diagnostics),
        api_key_env=env_secret(attrs, "api_key", API_KEY_EXAMPLE, diagnostics),
        max_output=attrs.token_count("max_output"),
        context=attrs.token_count("context"),
        tokenizer=_tokenizer(attrs, provider, diagnostics),
        quality=_quality(attrs, diagnostics),
        default_quality=_default_quality(attrs, diagnostics),
        span=decl.name_span,
        spans=attrs.spans(),
        decoding=read_decoding(attrs, diagnostics),
        latency=read_latency(decl.name, attrs, diagnostics),
        pricing=pricing,
        rate_limit=read_rate_limit(decl.name, attrs, diagnostics),
        fallbacks=tuple(name for name, _ in fallbacks),
        fallback_spans=tuple(span for _, span in fallbacks),
    )


def _tokenizer(attrs: Attributes, provider: str, diagnostics) -> str | None:
    """`tokenizer`: an OpenAI encoding or model id, the only tokenizers bamasc ships offline (for the
    providers whose tokenizer family is tiktoken)."""
    name = attrs.string("tokenizer")
    if name is None:
        return None
    span = attrs.span_of("tokenizer")
    family = getattr(lookup(provider), "tokenizer", None)
    if family != "tiktoken":
        users = " and ".join(names_where(tokenizer="tiktoken"))
        diagnostics.append(
            warning("BAM215", f"tokenizer is used only by {users} models; this {provider} model ignores it", span,
                    hint=f"remove it: {provider} prompts are {TOKENIZER_FAMILIES.get(family, BOUNDED)}")
        )
        return None
    if encoding_for(name) is None:
        families = ", ".join(prefix for prefix, _ in OPENAI_FAMILIES)
        diagnostics.append(
            error("BAM215", f"unknown tokenizer {name!r}: bamasc counts exactly with {' or '.join(ENCODINGS)}, "
                  f"or the encoding of an OpenAI model id ({families}, and their variants)", span,
                  hint="remove it to bound prompts safely by their UTF-8 bytes, or name the OpenAI model this endpoint serves")
        )
        return None
    return name


def _tier(attrs: Attributes, diagnostics) -> int:
    number = attrs.number("tier", "tier = 1")
    if number is None:
        return 1
    if number.unit or not number.is_integer or number.value < 1:
        diagnostics.append(
            error(
                "BAM204",
                f"tier must be a positive whole number (1 is the strongest), not {shown(number.text)}",
                number.span,
            )
        )
        return 1
    if number.value > MAX_TIER:
        diagnostics.append(out_of_range("tier", number, MAX_TIER))
        return 1
    return int(number.value)


def _base_url(attrs: Attributes, diagnostics) -> str | None:
    """The endpoint; credentials in it (`https://user:key@host`, `?key=sk-...`) are BAM205."""
    url = attrs.string("base_url")
    if url is None:
        return None
    string = attrs.value("base_url")
    userinfo = USERINFO.match(url)
    if userinfo is None and not looks_like_key(url):
        return url
    if userinfo is not None:
        message = "base_url carries credentials before '@'; keys belong in the environment"
        # A password need not look like a key, so the part before '@' is hidden whatever it holds.
        hidden = (_part_of(string, userinfo.start(1), userinfo.end(1)) if url == string.raw[1:-1] else string.span,)
    else:
        message = "base_url holds what looks like an API key; keys belong in the environment"
        hidden = ()  # excerpts mask whatever looks like a key
    diagnostics.append(
        error(
            "BAM205",
            message,
            string.span,
            hint='give the endpoint alone, and the key as `api_key = env("PROVIDER_API_KEY")`',
            redact=hidden,
        )
    )
    return None


def _part_of(string: ast.String, start: int, end: int) -> Span:
    """The span of characters start..end of a one-line string's value (after its opening quote)."""
    span = string.span
    return Span(span.file, span.line, span.col + 1 + start, span.line, span.col + 1 + end)


def _default_quality(attrs: Attributes, diagnostics) -> float:
    value = attrs.items.get("quality")
    if isinstance(value, ast.Attr):
        return _positive_quality(value.value, diagnostics)
    return 1.0


def _quality(attrs: Attributes, diagnostics) -> dict[str, float]:
    item = attrs.items.get("quality")
    if not isinstance(item, ast.Block):
        return {}
    result = {}
    for entry in item.attrs:
        if isinstance(entry, ast.Block):
            diagnostics.append(error("BAM108", "quality entries are `Role = number`", entry.span))
            continue
        result[entry.name] = _positive_quality(entry.value, diagnostics)
    return result


def _positive_quality(value, diagnostics) -> float:
    if not isinstance(value, ast.Number) or value.unit or value.value <= 0:
        diagnostics.append(
            error("BAM209", "quality must be a positive number (1.0 is the default)", value.span)
        )
        return 1.0
    if value.value > MAX_QUALITY:
        diagnostics.append(out_of_range("quality", value, MAX_QUALITY))
        return 1.0
    return value.value


