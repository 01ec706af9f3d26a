"""Reads and checks `model` declarations: provider, prices, tier, secrets, caps, quality."""

from __future__ import annotations

from bamasc.check.attributes import Attributes
from bamasc.check.program import PAID_PROVIDERS, PROVIDERS, Model
from bamasc.diagnostics import Diagnostic, error
from bamasc.syntax import ast

MODEL_ATTRIBUTES = (
    "provider", "name", "price", "tier", "base_url", "api_key",
    "max_output", "context", "tokenizer", "quality",
)


def read_model(decl: ast.ModelDecl, diagnostics: list[Diagnostic]) -> Model:
    attrs = Attributes(f"model '{decl.name}'", decl.attrs, MODEL_ATTRIBUTES, diagnostics, decl.name_span)
    provider = attrs.choice("provider", PROVIDERS, "")
    if "provider" not in attrs.items:
        attrs.missing("provider", "provider = openai")
    model_id = attrs.string("name", 'name = "gpt-4.1-nano"') or decl.name
    price_input, price_output = _prices(decl, attrs, provider, diagnostics)
    return Model(
        name=decl.name,
        provider=provider,
        model_id=model_id,
        price_input=price_input,
        price_output=price_output,
        tier=_tier(attrs, diagnostics),
        base_url=attrs.string("base_url"),
        api_key_env=_api_key(attrs, diagnostics),
        max_output=attrs.token_count("max_output"),
        context=attrs.token_count("context"),
        tokenizer=attrs.string("tokenizer"),
        quality=_quality(attrs, diagnostics),
        default_quality=_default_quality(attrs, diagnostics),
        span=decl.name_span,
        spans=attrs.spans(),
    )


def _prices(decl, attrs: Attributes, provider: str, diagnostics) -> tuple[float, float]:
    block = attrs.block("price", "price { input = 0.27  output = 1.10 }")
    if block is None:
        return 0.0, 0.0
    prices = Attributes(f"price of model '{decl.name}'", block.attrs, ("input", "output"), diagnostics, block.name_span)
    result = []
    for side in ("input", "output"):
        value = prices.value(side)
        if value is None:
            diagnostics.append(
                error(
                    "BAM201",
                    f"model '{decl.name}' has no {side} price",
                    block.name_span,
                    hint=f"add `{side} = <USD per million tokens>` to the price block",
                )
            )
            result.append(0.0)
            continue
        result.append(_price(decl.name, side, value, provider, diagnostics))
    return result[0], result[1]


def _price(model: str, side: str, value, provider: str, diagnostics) -> float:
    if isinstance(value, ast.Money) or (isinstance(value, ast.Number) and value.unit == "µ$"):
        diagnostics.append(
            error(
                "BAM208",
                f"the {side} price of model '{model}' is a rate in USD per million tokens, not an amount of money",
                value.span,
                hint=f"write `{side} = {value.text.lstrip('$')}` (or `{value.text.lstrip('$')} $/Mtok`)",
            )
        )
        return 0.0
    if not isinstance(value, ast.Number):
        diagnostics.append(error("BAM108", f"the {side} price of model '{model}' must be a number", value.span))
        return 0.0
    if value.value < 0:
        diagnostics.append(error("BAM202", f"the {side} price of model '{model}' is negative ({value.text})", value.span))
        return 0.0
    if value.value == 0 and provider in PAID_PROVIDERS:
        diagnostics.append(
            error(
                "BAM203",
                f"the {side} price of model '{model}' is zero, but provider '{provider}' charges per token",
                value.span,
                hint="copy the price from the provider's price page; zero would hide the model's cost from the budget",
            )
        )
    return value.value


def _tier(attrs: Attributes, diagnostics) -> int:
    number = attrs.number("tier", "tier = 1")
    if number is None:
        return 1
    if number.unit or not number.is_integer or number.value < 1:
        diagnostics.append(
            error("BAM204", f"tier must be a positive whole number (1 is the strongest), not {number.text}", number.span)
        )
        return 1
    return int(number.value)


def _api_key(attrs: Attributes, diagnostics) -> str | None:
    value = attrs.value("api_key")
    if value is None:
        return None
    if isinstance(value, ast.Call) and value.func == "env" and len(value.args) == 1 and isinstance(value.args[0], ast.String):
        return value.args[0].value
    if isinstance(value, ast.String):
        diagnostics.append(
            error(
                "BAM205",
                "api_key is written into the source; keys belong in the environment",
                value.span,
                hint='write `api_key = env("PROVIDER_API_KEY")` and export the key in that variable',
            )
        )
        return None
    diagnostics.append(error("BAM108", 'api_key must be `env("VAR")`', value.span))
    return None


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
    return value.value


