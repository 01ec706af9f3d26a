"""Reads a model's `price`: a block written by hand, or `catalog("provider/model")` from the offline catalogue."""

from __future__ import annotations

from bamasc.check.attributes import Attributes, out_of_range, shown
from bamasc.diagnostics import error
from bamasc.limits import MAX_PRICE, MAX_TOKENS
from bamasc.prices import PriceTier, Pricing
from bamasc.provider_registry import lookup
from bamasc.syntax import ast

PRICE_RATES = ("input", "output", "cache_read", "cache_write")
TIER_BLOCK = "long_prompt"
CATALOG_EXAMPLE = 'price = catalog("openai/gpt-4.1-nano")'


def read_price(decl, attrs: Attributes, provider: str, diagnostics) -> Pricing:
    """The model's Pricing; on an error, a zero one (the error stops compiling)."""
    item = attrs.items.get("price")
    if item is None:
        attrs.missing("price", "price { input = 0.27  output = 1.10 }")
        return Pricing(0.0, 0.0)
    if isinstance(item, ast.Attr):
        return _from_catalog(decl.name, item.value, diagnostics)
    prices = Attributes(f"price of model '{decl.name}'", item.attrs, (*PRICE_RATES, TIER_BLOCK), diagnostics, item.name_span)
    rates = _rates(decl.name, prices, item.name_span, provider, diagnostics)
    tier = prices.block(TIER_BLOCK)
    tiers = ()
    if tier is not None:
        tiers = _tier(decl.name, tier, provider, diagnostics)
    return Pricing(*rates, tiers=tiers)


def _rates(model: str, prices: Attributes, span, provider: str, diagnostics, where: str = ""):
    found = []
    for side in PRICE_RATES:
        value = prices.value(side)
        if value is None:
            if side in ("input", "output"):
                diagnostics.append(
                    error("BAM201", f"model '{model}' has no {side} price{where}", span,
                          hint=f"add `{side} = <USD per million tokens>` to the price block")
                )
                found.append(0.0)
            else:
                found.append(None)
            continue
        found.append(_rate(model, side, value, provider if side in ("input", "output") else "", diagnostics))
    return found


def _tier(model: str, block: ast.Block, provider: str, diagnostics) -> tuple[PriceTier, ...]:
    where = f" in its {TIER_BLOCK} block"
    attrs = Attributes(f"{TIER_BLOCK} price of model '{model}'", block.attrs, ("above", *PRICE_RATES), diagnostics, block.name_span)
    above = attrs.number("above", "above = 200000")
    rates = _rates(model, attrs, block.name_span, provider, diagnostics, where)
    if above is None:
        return ()
    if above.unit or not above.is_integer or above.value < 1 or above.value > MAX_TOKENS:
        diagnostics.append(
            error("BAM223", f"'above' in the {TIER_BLOCK} price of model '{model}' must be a whole number of prompt "
                  f"tokens from 1 to {MAX_TOKENS:g}, not {shown(above.text)}", above.span,
                  hint="the tier prices every token of a call whose prompt has more than this many tokens")
        )
        return ()
    return (PriceTier(int(above.value), *rates),)


def _rate(model: str, side: str, value, provider: str, diagnostics) -> float:
    label = side.replace("_", " ")
    if isinstance(value, ast.Money) or (isinstance(value, ast.Number) and value.unit == "µ$"):
        diagnostics.append(
            error(
                "BAM208",
                f"the {label} price of model '{model}' is a rate in USD per million tokens, not an amount of money",
                value.span,
                hint=f"write `{side} = {value.text.lstrip('$')}` (or `{value.text.lstrip('$')} $/Mtok`)",
            )
        )
        return 0.0
    if not isinstance(value, ast.Number):
        diagnostics.append(error("BAM108", f"the {label} price of model '{model}' must be a number", value.span))
        return 0.0
    if value.value < 0:
        diagnostics.append(
            error("BAM202", f"the {label} price of model '{model}' is negative ({shown(value.text)})", value.span)
        )
        return 0.0
    if value.value > MAX_PRICE:
        diagnostics.append(out_of_range(f"the {label} price of model '{model}'", value, MAX_PRICE, " $/Mtok"))
        return 0.0
    if value.value == 0 and getattr(lookup(provider), "paid", False):
        diagnostics.append(
            error(
                "BAM203",
                f"the {label} price of model '{model}' is zero, but provider '{provider}' charges per token",
                value.span,
                hint="copy the price from the provider's price page; zero would hide the model's cost from the budget",
            )
        )
    return value.value


def _from_catalog(model: str, value, diagnostics) -> Pricing:
    if not (isinstance(value, ast.Call) and value.func == "catalog" and len(value.args) == 1
            and isinstance(value.args[0], ast.String)):
        diagnostics.append(
            error("BAM222", f"the price of model '{model}' must be a block or `catalog(\"provider/model\")`",
                  value.span, hint=f'write `price {{ input = 0.27  output = 1.10 }}` or `{CATALOG_EXAMPLE}`')
        )
        return Pricing(0.0, 0.0)
    ref = value.args[0]
    from bamasc import catalog  # loads the catalogue only for a file that uses it

    try:
        return catalog.pricing(ref.value)
    except ImportError:
        diagnostics.append(error("BAM222", "catalog() needs the genai-prices package, which is not installed",
                                 value.span, hint="pip install genai-prices"))
    except catalog.CatalogError as problem:
        code = "BAM221" if problem.unpriceable else "BAM220"
        close = ", ".join(f"'{entry}'" for entry in problem.close)
        diagnostics.append(
            error(code, str(problem), ref.span,
                  hint=(f"did you mean {close}? " if close and code == "BAM220" else "")
                  + "`bamasc prices TERM` searches the catalogue")
        )
    return Pricing(0.0, 0.0)
