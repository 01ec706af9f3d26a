"""genai-prices' bundled snapshot: its entries, and each entry turned into a Pricing.

Only the data the package ships is read (`genai_prices.data`), never the
prices its optional background updater fetches: a price that changed under a
running process would make a plan say what its compile did not.

Which rates an entry gives (docs/language.md, "Prices from the catalogue"):
the elementwise highest of every price the entry can still be billed at from
today on (a time-of-day price, e.g. DeepSeek's, and a price announced for a
later date count; a dated price that a later one replaced does not). Service
tiers (priority, flex) are never requested, so only the standard prices apply.
"""

from __future__ import annotations

import datetime
import os

from bamasc.catalog.rows import error_row, to_row
from bamasc.prices import PriceTier, Pricing

PACKAGE = "genai-prices"
# The day each release of the package was published: its data has no date of its own.
SNAPSHOT_DATES = {
    "0.2.3": datetime.date(2026, 11, 10), "0.2.4": datetime.date(2026, 11, 17), "0.2.5": datetime.date(2026, 11, 19),
}

_RATES = {"input": "input_mtok", "output": "output_mtok", "cache_read": "cache_read_mtok", "cache_write": "cache_write_mtok"}
# Billed on output tokens besides the output rate; folded into it (a bound pays the dearest).
_OUTPUT_EXTRAS = ("output_reasoning_mtok", "output_citation_mtok")
# Prices per character or per message of text: bamasc bounds tokens, so it cannot bound these.
_UNBOUNDED = {"input_mchars": "character", "input_text_messages_kcount": "message"}


class CatalogError(Exception):
    """An entry the catalogue does not have, or one bamasc cannot bound; `close` are entries that look alike."""

    def __init__(self, message: str, close: tuple[str, ...] = (), *, unpriceable: bool = False):
        super().__init__(message)
        self.close = close
        self.unpriceable = unpriceable  # the entry exists, but not with prices bamasc can bound


def today() -> datetime.date:
    """The date prices are taken at: SOURCE_DATE_EPOCH when set (a reproducible build's date), else today (UTC)."""
    epoch = os.environ.get("SOURCE_DATE_EPOCH")
    if epoch and epoch.strip().isdigit():
        return datetime.datetime.fromtimestamp(int(epoch), datetime.timezone.utc).date()
    return datetime.datetime.now(datetime.timezone.utc).date()


def version() -> str:
    import genai_prices

    return genai_prices.__version__


def package_date() -> tuple[datetime.date, bool]:
    """The snapshot's date and whether it is estimated (a release not in SNAPSHOT_DATES: its newest
    price dated on or before today)."""
    known = SNAPSHOT_DATES.get(version())
    if known is not None:
        return known, False
    now = today()
    dates = [
        price.constraint.start_date
        for _, model in entries()
        for price in (model.prices if isinstance(model.prices, list) else ())
        if type(price.constraint).__name__ == "StartDateConstraint" and price.constraint.start_date <= now
    ]
    return max(dates, default=now), True


def snapshot_providers():
    from genai_prices.data import providers

    return providers


def entries():
    for provider in snapshot_providers():
        for model in provider.models:
            yield provider, model


def entry_refs() -> list[str]:
    return [f"{provider.id}/{model.id}" for provider, model in entries()]


def find(ref: str):
    """The (provider, model) of `provider/model`; a model may also be named by an alias the
    catalogue matches (a dated id). Raises CatalogError with the entries closest to `ref`."""
    provider_id, _, model_id = ref.partition("/")
    providers = {provider.id: provider for provider in snapshot_providers()}
    provider = providers.get(provider_id.lower())
    if provider is None or not model_id:
        raise missing(ref, provider is not None)
    exact = next((model for model in provider.models if model.id == model_id.lower()), None)
    model = exact or provider.find_model(model_id)
    if model is None:
        raise missing(ref, True)
    return provider, model


def missing(ref: str, provider_known: bool, refs: list[str] | None = None) -> CatalogError:
    """The error for an entry the catalogue lacks (`refs`: its entries, the snapshot's by default), with the
    entries closest to it; a pinned file words it as the package does."""
    provider_id, _, model_id = ref.partition("/")
    if not provider_known or not model_id:
        what = f"no provider '{provider_id}'" if not provider_known else f"no entry '{ref}'"
        return CatalogError(f"the price catalogue has {what}: entries are `provider/model`", close_matches(ref, refs=refs))
    return CatalogError(f"the price catalogue has no model '{model_id}' from provider '{provider_id.lower()}'",
                        close_matches(ref, refs=refs))


def close_matches(ref: str, limit: int = 3, refs: list[str] | None = None) -> tuple[str, ...]:
    """The entries of `refs` (the snapshot's by default) that look most like `ref`."""
    import difflib

    refs = entry_refs() if refs is None else refs
    lowered = ref.lower()
    found = difflib.get_close_matches(lowered, refs, n=limit, cutoff=0.6)
    if not found:
        # A model named without its provider, or a part of a name.
        tail = lowered.rpartition("/")[2]
        found = [r for r in refs if tail and tail in r][:limit]
    return tuple(found)


def search(term: str) -> list[str]:
    """Entries whose `provider/model` contains `term` (case-insensitive)."""
    term = term.lower()
    return [ref for ref in entry_refs() if term in ref]


def priced(provider, model) -> Pricing:
    entry = f"{provider.id}/{model.id}"
    standard = reachable_prices(model, today())
    for prices in standard:
        for key, what in _UNBOUNDED.items():
            if getattr(prices, key, None) is not None:
                raise CatalogError(f"catalogue entry '{entry}' is priced per {what}, which bamasc cannot bound; "
                                   "write its price by hand", unpriceable=True)
    for key in ("input_mtok", "output_mtok"):
        if all(getattr(prices, key, None) is None for prices in standard):
            side = key.split("_")[0]
            raise CatalogError(f"catalogue entry '{entry}' has no {side} price per token: it is not a chat model "
                               "bamasc can price", unpriceable=True)
    starts = sorted({tier.start for prices in standard for value in prices.__dict__.values()
                     if hasattr(value, "tiers") for tier in value.tiers})
    base = _level(standard, 0)
    tiers = []
    previous = base
    for start in starts:
        level = _level(standard, start + 1)
        if level != previous:
            tiers.append(PriceTier(start, *level))
        previous = level
    batch = _batch(model)
    date, _ = package_date()
    per_request = max(float(getattr(p, "requests_kcount", None) or 0) for p in standard) * 1000
    return Pricing(*base, tiers=tuple(tiers), per_request=per_request, batch_input=batch[0], batch_output=batch[1],
                   catalog=entry, snapshot=date.isoformat())


def reachable_prices(model, day: datetime.date) -> list:
    """Every standard price of `model` that a call on `day` or later may be billed at.

    Later prices take precedence in the catalogue: the last price that is
    unconditional or dated on or before `day` replaced every one before it;
    prices after it (a later date, a time of day) can still apply.
    """
    conditional = model.prices if isinstance(model.prices, list) else None
    if conditional is None:
        return [model.prices]
    start = 0
    for index, price in enumerate(conditional):
        constraint = price.constraint
        if constraint is None or (hasattr(constraint, "start_date") and constraint.start_date <= day):
            start = index
    return [price.prices for price in conditional[start:]]


def _value(price, prompt_tokens: int) -> float | None:
    """A price (a number or tiered prices) for a prompt of `prompt_tokens` tokens; None when absent."""
    if price is None:
        return None
    if hasattr(price, "tiers"):
        rate = price.base
        for tier in price.tiers:
            if prompt_tokens > tier.start:
                rate = tier.price
        return float(rate)
    return float(price)


def _level(standard: list, prompt_tokens: int) -> tuple[float, float, float | None, float | None]:
    """The highest (input, output, cache read, cache write) of `standard` for a prompt of this size."""
    rates = {}
    for name, key in _RATES.items():
        found = []
        for prices in standard:
            value = _value(getattr(prices, key, None), prompt_tokens)
            if value is None and name.startswith("cache") and _has(standard, key):
                # A price without this key bills such tokens as input.
                value = _value(getattr(prices, "input_mtok", None), prompt_tokens)
            if name == "output":
                extras = [_value(getattr(prices, extra, None), prompt_tokens) for extra in _OUTPUT_EXTRAS]
                value = max([v for v in (value, *extras) if v is not None], default=None)
            if value is not None:
                found.append(value)
        rates[name] = max(found) if found else (None if name.startswith("cache") else 0.0)
    return rates["input"], rates["output"], rates["cache_read"], rates["cache_write"]


def _has(standard: list, key: str) -> bool:
    return any(getattr(prices, key, None) is not None for prices in standard)


def _batch(model) -> tuple[float | None, float | None]:
    """The batch API's base input and output rates, when the entry has them (recorded, never used)."""
    for variant in model.price_variants or ():
        if variant.when == {"processing": "batch"}:
            values = (_value(getattr(variant.prices, "input_mtok", None), 0),
                      _value(getattr(variant.prices, "output_mtok", None), 0))
            if None not in values:
                return values
    return None, None


def build_rows() -> list:
    """[[provider id, its API's pattern, {model: row}]] for every provider of the snapshot (rows: `to_row`)."""
    providers = []
    for provider in snapshot_providers():
        models = {}
        for model in provider.models:
            try:
                models[model.id] = to_row(priced(provider, model))
            except CatalogError as problem:
                models[model.id] = error_row(str(problem), problem.unpriceable)
        providers.append([provider.id, provider.api_pattern, models])
    return providers
