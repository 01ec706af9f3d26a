"""The offline price catalogue: genai-prices' bundled snapshot, read as `provider/model` entries and turned into a Pricing.

Only the data the package ships is read (`genai_prices.data`), never the
prices its optional background updater fetches: a price that changed under a
running process would make a plan say what its compile did not. The package
loads in about 0.1 s, so `bamasc lint` does not import it: catalog(...) and the
check of hand-written prices read an index of every entry's Pricing kept in the
cache folder, rebuilt (from the package) when the installed data, bamasc or
the day changes. Only an alias or an unknown entry loads the package itself.

The cache is a copy, never an authority (docs/language.md, "The catalogue
cache"). Each of its files carries a checksum of what it holds, and every row
read is checked (its shape, finite rates from 0 to MAX_PRICE, ascending
tiers); a file that fails either is ignored, rebuilt from the package and
reported (`take_cache_problems`, lint's BAM411) with the file, the row and the
field. A compile (`from_package()`) does not read prices from the cache at all:
it derives each entry it uses from the package, and a cached row that differs
is reported and rewritten.

Which rates an entry gives (docs/language.md, "Prices from the catalogue"):
the elementwise highest of every price the entry can still be billed at from
today on (a time-of-day price, e.g. DeepSeek's, and a price announced for a
later date count; a dated price that a later one replaced does not). Service
tiers (priority, flex) are never requested, so only the standard prices apply.
"""

from __future__ import annotations

import contextlib
import contextvars
import datetime
import hashlib
import json
import math
import os

from bamasc.limits import MAX_BUDGET, MAX_PRICE, MAX_TOKENS
from bamasc.prices import PriceTier, Pricing

PACKAGE = "genai-prices"
# The day each release of the package was published: its data has no date of its own.
SNAPSHOT_DATES = {"0.2.3": datetime.date(2026, 11, 10)}
# Lint warns (BAM410) when the snapshot a file's catalog() prices come from is older than this.
MAX_SNAPSHOT_AGE_DAYS = 120
INDEX_FORMAT = 3  # the layout of the cached index: a change rebuilds every cached one
_LOADED: dict = {}  # the index this process read, by its key
_PROBLEMS: list[str] = []  # cache files found wrong (and rebuilt) since take_cache_problems() last took them
# Set by from_package(): prices are derived from the package, the cache only compared with it.
_FROM_PACKAGE = contextvars.ContextVar("bamasc_catalog_from_package", default=False)

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
    index = _index() if not _FROM_PACKAGE.get() else None
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
    the catalogue lacks (for its close matches), loads the package. Within
    `from_package()` every entry is derived from the package.
    """
    if _FROM_PACKAGE.get():
        return _derived(ref)
    index = _index()
    provider_id, _, model_id = ref.lower().partition("/")
    for entry_provider, _, models in index["providers"] if index else ():
        if entry_provider == provider_id and model_id in models:
            return _from_row(f"{provider_id}/{model_id}", models[model_id], index["snapshot"][0])
    return _priced(*find(ref))


@contextlib.contextmanager
def from_package():
    """Within it, pricing() derives every entry from the package and only compares the cache with it:
    a compile binds with the snapshot's prices whatever the cache holds."""
    token = _FROM_PACKAGE.set(True)
    try:
        yield
    finally:
        _FROM_PACKAGE.reset(token)


def take_cache_problems() -> list[str]:
    """What was found wrong with the cache (each file ignored and rebuilt) since the last call."""
    found = list(_PROBLEMS)
    _PROBLEMS.clear()
    return found


def _derived(ref: str) -> Pricing:
    """`ref` priced from the package; a cached row of it that says otherwise is reported and rewritten."""
    provider, model = find(ref)
    try:
        derived = _priced(provider, model)
        expected = _row(derived)
    except CatalogError as problem:
        derived, expected = problem, ["error", str(problem), problem.unpriceable]
    index = _index()
    for entry_provider, _, models in index["providers"] if index else ():
        if entry_provider == provider.id and isinstance(models, _Rows):
            cached = models.get(model.id)
            if cached is not None and _plain(cached) != _plain(expected):
                _PROBLEMS.append(f"{_cache_file(models.path)}: row '{model.id}' differs from the {PACKAGE} snapshot "
                                 f"({_differences(cached, expected)}); the snapshot's prices are used and the "
                                 "file was rebuilt from it")
                models.rebuild()
    if isinstance(derived, CatalogError):
        raise derived
    return derived


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
            try:
                matches = re.match(pattern, base_url) is not None
            except re.error:  # the package's own pattern, so never expected: no entry rather than a crash
                matches = False
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
    Each file holds its key and a checksum of the rest (`_checksum`): one of
    another key is another day's or release's, rebuilt without a word; one
    whose checksum or content is wrong is rebuilt and reported.
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
    cached = _read_cached(path, key, _providers_problem)
    if cached is not None:
        _LOADED.clear()
        _LOADED.update(cached, providers=[[id_, pattern, _Rows(folder, id_, key)] for id_, pattern in cached["providers"]])
        return _LOADED
    date, estimated = _snapshot_date()
    providers = _build_index()
    built = {"key": key, "snapshot": [date.isoformat(), estimated], "providers": providers}
    try:
        os.makedirs(folder, exist_ok=True)
        # The rows first, the list of providers last: a list with this key means its rows are there.
        for id_, _, models in providers:
            _write_cached(os.path.join(folder, f"{id_}.json"), {"key": key, "models": models})
        _write_cached(path, {**built, "providers": [[id_, pattern] for id_, pattern, _ in providers]})
    except OSError:
        pass  # a read-only cache: the index is built again next time
    _LOADED.clear()
    _LOADED.update(built)
    return built


def _cache_file(path: str) -> str:
    return f"the catalogue cache file {path}"


def _checksum(value: dict) -> str:
    """The SHA-256 of a cache file's content but its checksum: a file edited after it was written fails it."""
    content = {name: item for name, item in value.items() if name != "sha256"}
    text = json.dumps(content, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(text.encode("ascii")).hexdigest()


def _write_cached(path: str, value: dict) -> None:
    temporary = f"{path}.{os.getpid()}"
    with open(temporary, "w", encoding="utf-8") as handle:
        json.dump({**value, "sha256": _checksum(value)}, handle)
    os.replace(temporary, path)


def _read_cached(path: str, key: str, content_problem) -> dict | None:
    """The cache file at `path` if it is there, of this key, and sound: its content as `content_problem`
    (which names the row and the field) finds it, then its checksum. A file that is not is reported."""
    try:
        with open(path, encoding="utf-8") as handle:
            cached = json.load(handle)
    except FileNotFoundError:
        return None
    except (OSError, ValueError, RecursionError) as problem:  # (UnicodeDecodeError is a ValueError)
        reason = f"it cannot be read as JSON ({problem})"
    else:
        if isinstance(cached, dict) and "key" in cached and cached["key"] != key:
            return None  # another day's or release's: replaced without a word
        reason = "it is not a JSON object" if not isinstance(cached, dict) else content_problem(cached)
        if reason is None and cached.get("sha256") != _checksum(cached):
            reason = "its content does not match its checksum: it was changed after bamasc wrote it"
            if "models" in cached:
                reason += _changed_rows(path, cached["models"])
        if reason is None:
            return cached
    _PROBLEMS.append(f"{_cache_file(path)}: {reason}; it was ignored and rebuilt from the {PACKAGE} snapshot")
    return None


def _changed_rows(path: str, rows: dict) -> str:
    """The rows of an edited provider file that differ from the package's, as ' (row 'm': input 1 instead of 2)'."""
    provider = os.path.basename(path).removesuffix(".json")
    expected = next((models for id_, _, models in _build_index() if id_ == provider), {})
    changed = [f"row '{model}': {_differences(row, expected.get(model))}"
               for model, row in rows.items() if _plain(row) != _plain(expected.get(model))]
    changed += [f"row '{model}' is missing" for model in expected if model not in rows]
    if not changed:
        return ""
    more = f"; ... and {len(changed) - 3} more" if len(changed) > 3 else ""
    return " (" + "; ".join(changed[:3]) + more + ")"


def _providers_problem(cached: dict) -> str | None:
    """Why the list of providers cannot be used, or None."""
    snapshot = cached.get("snapshot")
    if not (isinstance(snapshot, list) and len(snapshot) == 2 and isinstance(snapshot[1], bool)
            and isinstance(snapshot[0], str) and _is_date(snapshot[0])):
        return f"field 'snapshot' is {_shown(snapshot)}, not [an ISO date, true or false]"
    providers = cached.get("providers")
    if not isinstance(providers, list):
        return f"field 'providers' is {_shown(providers)}, not a list"
    for number, entry in enumerate(providers):
        if not (isinstance(entry, list) and len(entry) == 2 and _is_name(entry[0]) and isinstance(entry[1], str)):
            return f"field 'providers', entry {number} is {_shown(entry)}, not [a provider id, its API's pattern]"
    return None


def _is_date(text: str) -> bool:
    try:
        datetime.date.fromisoformat(text)
    except ValueError:
        return False
    return True


def _is_name(value) -> bool:
    """A provider id the cache may name a file after: letters, digits, '-', '_' and '.', not starting with '.'."""
    return (isinstance(value, str) and 0 < len(value) <= 100 and not value.startswith(".")
            and value.replace("-", "").replace("_", "").replace(".", "").isalnum() and value.isascii())


def _shown(value) -> str:
    text = json.dumps(value, ensure_ascii=False) if not isinstance(value, float) else repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


class _Rows:
    """One provider's {model: row}, read from the cache on first use (rebuilt from the package
    if that file is missing, belongs to another index, or fails its checksum or a row's check)."""

    def __init__(self, folder: str, provider: str, key: str):
        self.path = os.path.join(folder, f"{provider}.json")
        self.provider = provider
        self.key = key
        self.rows: dict | None = None

    def _load(self) -> dict:
        if self.rows is None:
            cached = _read_cached(self.path, self.key, _rows_problem)
            if cached is not None:
                self.rows = cached["models"]
            else:
                self.rebuild()
        return self.rows

    def rebuild(self) -> None:
        """The rows from the package, written back over the file (a read-only cache is left as it is)."""
        self.rows = next((models for id_, _, models in _build_index() if id_ == self.provider), {})
        try:
            _write_cached(self.path, {"key": self.key, "models": self.rows})
        except OSError:
            pass

    def get(self, model: str, default=None):
        return self._load().get(model, default)

    def __contains__(self, model: str) -> bool:
        return model in self._load()

    def __getitem__(self, model: str):
        return self._load()[model]


# The fields of a row (`_row`), in order, and of a tier in it.
ROW_FIELDS = ("input", "output", "cache_read", "cache_write", "tiers", "per_request", "batch_input", "batch_output")
TIER_FIELDS = ("above", "input", "output", "cache_read", "cache_write")
_OPTIONAL = {"cache_read", "cache_write", "batch_input", "batch_output"}


def _rows_problem(cached: dict) -> str | None:
    """Why one provider's rows cannot be used, naming the row and the field; None when every row can."""
    models = cached.get("models")
    if not isinstance(models, dict):
        return f"field 'models' is {_shown(models)}, not an object of rows"
    for model, row in models.items():
        problem = row_problem(row)
        if problem is not None:
            return f"row '{model}'{'' if problem.startswith('is ') else ','} {problem}"
    return None


def row_problem(row) -> str | None:
    """Why `row` is not one `_row` writes ("field 'input' is -5, not ..."), or None."""
    if isinstance(row, list) and row[:1] == ["error"]:
        if len(row) == 3 and isinstance(row[1], str) and isinstance(row[2], bool):
            return None
        return f"is {_shown(row)}, not [\"error\", a message, true or false]"
    if not isinstance(row, list) or len(row) != len(ROW_FIELDS):
        return f"is {_shown(row)}, not a list of {len(ROW_FIELDS)} fields ({', '.join(ROW_FIELDS)})"
    for name, value in zip(ROW_FIELDS, row):
        if name == "tiers":
            problem = _tiers_problem(value)
        else:
            problem = _rate_problem(name, value, name in _OPTIONAL, MAX_BUDGET if name == "per_request" else MAX_PRICE)
        if problem is not None:
            return problem
    return None


def _tiers_problem(tiers) -> str | None:
    if not isinstance(tiers, list):
        return f"field 'tiers' is {_shown(tiers)}, not a list of tiers"
    previous = -1
    for number, tier in enumerate(tiers):
        if not isinstance(tier, list) or len(tier) != len(TIER_FIELDS):
            return f"field 'tiers[{number}]' is {_shown(tier)}, not [{', '.join(TIER_FIELDS)}]"
        above = tier[0]
        if not (type(above) is int and previous < above <= MAX_TOKENS):
            return (f"field 'tiers[{number}].above' is {_shown(above)}, not a prompt size in tokens "
                    f"(0 to {MAX_TOKENS:,}) above the tier before it")
        previous = above
        for name, value in zip(TIER_FIELDS[1:], tier[1:]):
            problem = _rate_problem(f"tiers[{number}].{name}", value, name.startswith("cache"), MAX_PRICE)
            if problem is not None:
                return problem
    return None


def _rate_problem(field: str, value, optional: bool, limit: float) -> str | None:
    if value is None and optional:
        return None
    if type(value) in (int, float) and math.isfinite(value) and 0 <= value <= limit:
        return None
    what = f"a price from 0 to {limit:,.0f}" + (", or null" if optional else "")
    return f"field '{field}' is {_shown(value)}, not {what}"


def _differences(cached, expected) -> str:
    """The fields of a cached row that differ from the snapshot's, as 'field X instead of Y'."""
    if not (isinstance(cached, list) and isinstance(expected, list) and len(cached) == len(expected) == len(ROW_FIELDS)):
        return f"{_shown(cached)} instead of {_shown(expected)}"
    found = [f"{name} {_shown(was)} instead of {_shown(now)}"
             for name, was, now in zip(ROW_FIELDS, cached, expected) if _plain(was) != _plain(now)]
    return ", ".join(found)


def _plain(value):
    """`value` as JSON gives it back (tuples as lists), for comparing a cached row with a derived one."""
    return json.loads(json.dumps(value))


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
