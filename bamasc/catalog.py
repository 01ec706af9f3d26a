"""The offline price catalogue: genai-prices' bundled snapshot, read as `provider/model` entries and turned into a Pricing.

Only the data the package ships is read (`genai_prices.data`), never the
prices its optional background updater fetches: a price that changed under a
running process would make a plan say what its compile did not. The package
loads in about 0.1 s, so `bamasc lint` does not import it: catalog(...) and the
check of hand-written prices read an index of every entry's Pricing kept in the
cache folder, rebuilt (from the package) when the installed data, bamasc or
the day changes. Only an alias or an unknown entry loads the package itself.

Which rates an entry gives (docs/language.md, "Prices from the catalogue"):
the elementwise highest of every price the entry can still be billed at from
today on (a time-of-day price, e.g. DeepSeek's, and a price announced for a
later date count; a dated price that a later one replaced does not). Service
tiers (priority, flex) are never requested, so only the standard prices apply.
"""

from __future__ import annotations

import datetime
import json
import os

from bamasc.prices import PriceTier, Pricing

PACKAGE = "genai-prices"
# The day each release of the package was published: its data has no date of its own.
SNAPSHOT_DATES = {"0.2.3": datetime.date(2026, 11, 10)}
# Lint warns (BAM410) when the snapshot a file's catalog() prices come from is older than this.
MAX_SNAPSHOT_AGE_DAYS = 120
INDEX_FORMAT = 2  # the layout of the cached index: a change rebuilds every cached one
_LOADED: dict = {}  # the index this process read, by its key

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


def snapshot_date() -> tuple[datetime.date, bool]:
    """The snapshot's date and whether it is estimated (a release not in SNAPSHOT_DATES: its newest
    price dated on or before today)."""
    index = _index()
    if index is not None:
        return datetime.date.fromisoformat(index["snapshot"][0]), index["snapshot"][1]
    return _snapshot_date()


def _snapshot_date() -> tuple[datetime.date, bool]:
    known = SNAPSHOT_DATES.get(version())
    if known is not None:
        return known, False
    now = today()
    dates = [
        price.constraint.start_date
        for _, model in _entries()
        for price in (model.prices if isinstance(model.prices, list) else ())
        if type(price.constraint).__name__ == "StartDateConstraint" and price.constraint.start_date <= now
    ]
    return max(dates, default=now), True


def _providers():
    from genai_prices.data import providers

    return providers


def _entries():
    for provider in _providers():
        for model in provider.models:
            yield provider, model


def entry_refs() -> list[str]:
    return [f"{provider.id}/{model.id}" for provider, model in _entries()]


def find(ref: str):
    """The (provider, model) of `provider/model`; a model may also be named by an alias the
    catalogue matches (a dated id). Raises CatalogError with the entries closest to `ref`."""
    provider_id, _, model_id = ref.partition("/")
    providers = {provider.id: provider for provider in _providers()}
    provider = providers.get(provider_id.lower())
    if provider is None or not model_id:
        what = f"no provider '{provider_id}'" if provider is None else f"no entry '{ref}'"
        raise CatalogError(f"the price catalogue has {what}: entries are `provider/model`", close_matches(ref))
    exact = next((model for model in provider.models if model.id == model_id.lower()), None)
    model = exact or provider.find_model(model_id)
    if model is None:
        raise CatalogError(f"the price catalogue has no model '{model_id}' from provider '{provider.id}'",
                           close_matches(ref))
    return provider, model


def close_matches(ref: str, limit: int = 3) -> tuple[str, ...]:
    import difflib

    refs = entry_refs()
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


def pricing(ref: str) -> Pricing:
    """The Pricing of catalogue entry `ref` (see the module docstring for which rates).

    An exact `provider/model` is read from the index; an alias, or an entry
    the catalogue lacks (for its close matches), loads the package.
    """
    index = _index()
    provider_id, _, model_id = ref.lower().partition("/")
    for entry_provider, _, models in index["providers"] if index else ():
        if entry_provider == provider_id and model_id in models:
            return _from_row(f"{provider_id}/{model_id}", models[model_id], index["snapshot"][0])
    return _priced(*find(ref))


def _priced(provider, model) -> Pricing:
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
    date, _ = _snapshot_date()
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


# ---------------------------------------------------------------- the index for hand-written prices


def declared_entry(provider: str, model_id: str, base_url: str | None) -> tuple[str, float, float] | None:
    """The catalogue entry a hand-written model is (its provider, or the one whose API its base_url
    is, and exactly its model id), with the entry's input and output rates; None when there is none."""
    index = _index()
    if index is None:
        return None
    import re

    for entry_provider, pattern, models in index["providers"]:
        if base_url is not None:
            matches = re.match(pattern, base_url) is not None
        else:
            matches = entry_provider == provider and provider in ("openai", "anthropic")
        if matches:
            row = models.get(model_id.lower())
            return (f"{entry_provider}/{model_id.lower()}", row[0], row[1]) if row and row[0] != "error" else None
    return None


def _index() -> dict | None:
    """{snapshot: [date, estimated], providers: [[id, api_pattern, {model: row}]]} (rows: `_row`),
    cached per installed data, bamasc release and day.

    The cache holds one small file naming the providers and one file of rows per
    provider, read only when an entry of that provider is asked for: a lint of
    OpenAI and DeepSeek models reads 10 KB, not the 200 KB of every provider.
    """
    stamp = _data_stamp()
    if stamp is None:
        return None
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    folder = os.path.join(os.environ.get("BAMASC_CACHE") or os.path.join(base, "bamasc"), "catalog-index")
    path = os.path.join(folder, "providers.json")
    from bamasc import __version__

    key = f"{INDEX_FORMAT}:{__version__}:{stamp}:{today().isoformat()}"
    if _LOADED.get("key") == key:
        return _LOADED
    try:
        with open(path, encoding="utf-8") as handle:
            cached = json.load(handle)
        if isinstance(cached, dict) and cached.get("key") == key:
            cached["providers"] = [[id_, pattern, _Rows(folder, id_, key)] for id_, pattern in cached["providers"]]
            _LOADED.clear()
            _LOADED.update(cached)
            return _LOADED
    except (OSError, ValueError, TypeError):
        pass
    date, estimated = _snapshot_date()
    providers = _build_index()
    built = {"key": key, "snapshot": [date.isoformat(), estimated], "providers": providers}
    try:
        os.makedirs(folder, exist_ok=True)
        # The rows first, the list of providers last: a list with this key means its rows are there.
        for id_, _, models in providers:
            _write_json(os.path.join(folder, f"{id_}.json"), {"key": key, "models": models})
        _write_json(path, {**built, "providers": [[id_, pattern] for id_, pattern, _ in providers]})
    except OSError:
        pass  # a read-only cache: the index is built again next time
    _LOADED.clear()
    _LOADED.update(built)
    return built


def _write_json(path: str, value) -> None:
    temporary = f"{path}.{os.getpid()}"
    with open(temporary, "w", encoding="utf-8") as handle:
        json.dump(value, handle)
    os.replace(temporary, path)


class _Rows:
    """One provider's {model: row}, read from the cache on first use (rebuilt from the package
    if that file is missing or belongs to another index)."""

    def __init__(self, folder: str, provider: str, key: str):
        self.path = os.path.join(folder, f"{provider}.json")
        self.provider = provider
        self.key = key
        self.rows: dict | None = None

    def _load(self) -> dict:
        if self.rows is None:
            try:
                with open(self.path, encoding="utf-8") as handle:
                    cached = json.load(handle)
                if isinstance(cached, dict) and cached.get("key") == self.key:
                    self.rows = cached["models"]
            except (OSError, ValueError, KeyError):
                pass
            if self.rows is None:
                self.rows = next(models for id_, _, models in _build_index() if id_ == self.provider)
        return self.rows

    def get(self, model: str, default=None):
        return self._load().get(model, default)

    def __contains__(self, model: str) -> bool:
        return model in self._load()

    def __getitem__(self, model: str):
        return self._load()[model]


def _data_stamp() -> str | None:
    """The installed snapshot's identity (its data file's path, size and time), found on sys.path
    without importing the package (nor importlib.util, which lint does not otherwise load)."""
    import sys

    for folder in sys.path:
        data = os.path.join(folder or ".", "genai_prices", "data.py")
        try:
            status = os.stat(data)
        except OSError:
            continue
        return f"{os.path.abspath(data)}:{status.st_size}:{status.st_mtime_ns}"
    return None


def _build_index() -> list:
    providers = []
    for provider in _providers():
        models = {}
        for model in provider.models:
            try:
                models[model.id] = _row(_priced(provider, model))
            except CatalogError as problem:
                models[model.id] = ["error", str(problem), problem.unpriceable]
        providers.append([provider.id, provider.api_pattern, models])
    return providers


def _row(p: Pricing) -> list:
    tiers = [[t.above, t.input, t.output, t.cache_read, t.cache_write] for t in p.tiers]
    return [p.input, p.output, p.cache_read, p.cache_write, tiers, p.per_request, p.batch_input, p.batch_output]


def _from_row(entry: str, row: list, snapshot: str) -> Pricing:
    if row[0] == "error":
        raise CatalogError(row[1], unpriceable=row[2])
    rates, tiers, rest = row[:4], row[4], row[5:]
    return Pricing(*rates, tiers=tuple(PriceTier(*tier) for tier in tiers), per_request=rest[0],
                   batch_input=rest[1], batch_output=rest[2], catalog=entry, snapshot=snapshot)
