"""The offline price catalogue: genai-prices' bundled snapshot, read as `provider/model` entries and turned into a Pricing.

`snapshot.py` reads the package (which rates an entry gives, see its
docstring); `cache.py` keeps every entry's row in the cache folder, so that
lint does not load the package (about 0.1 s); `rows.py` is the row format and
its check. Only an alias or an unknown entry makes lint load the package.
`pinned.py` is a catalogue pinned in a file (`BAMASC_CATALOG`): when set, it
is the only source of prices and the package is never imported.

The cache is a copy, never an authority (docs/language.md, "The catalogue
cache"): a file of it that is damaged, edited or unreadable is rebuilt and
reported (`take_cache_problems`, lint's BAM411). Within `from_package()`
(`plan.compile.check_file`, which every command that binds, runs or serves a
program checks it with, exec's staleness check, `bamasc prices`) no rate is
read from the cache at all: each entry is derived from the package, and a
cached row that differs is reported and rewritten.
"""

from __future__ import annotations

import contextlib
import contextvars
import datetime

from bamasc.catalog import cache, pinned, snapshot
from bamasc.catalog.cache import declared_entry
from bamasc.catalog.pinned import PinnedCatalogError
from bamasc.catalog.rows import error_row, from_row, to_row
from bamasc.catalog.snapshot import (  # noqa: F401 (the interface)
    PACKAGE, SNAPSHOT_DATES, CatalogError, find, package_date, priced, reachable_prices, today,
)
from bamasc.prices import Pricing

__all__ = ["PACKAGE", "MAX_SNAPSHOT_AGE_DAYS", "CatalogError", "PinnedCatalogError", "close_matches", "declared_entry",
           "entry_refs", "export", "find", "from_package", "keep_cache_problem", "pricing", "reachable_prices", "search",
           "snapshot_date", "take_cache_problems", "today", "version"]

# Lint warns (BAM410) when the snapshot a file's catalog() prices come from is older than this.
MAX_SNAPSHOT_AGE_DAYS = 120
# Set by from_package(): prices are derived from the package, the cache only compared with it.
_FROM_PACKAGE = contextvars.ContextVar("bamasc_catalog_from_package", default=False)


def snapshot_date() -> tuple[datetime.date, bool]:
    """The snapshot's date and whether it is estimated (a release not in SNAPSHOT_DATES: its newest
    price dated on or before today)."""
    index = pinned.index() or (cache.index() if not _FROM_PACKAGE.get() else None)
    if index is not None:
        return datetime.date.fromisoformat(index["snapshot"][0]), index["snapshot"][1]
    return package_date()


def pricing(ref: str) -> Pricing:
    """The Pricing of catalogue entry `ref` (snapshot.py says which rates).

    An exact `provider/model` is read from the cache; an alias, or an entry
    the catalogue lacks (for its close matches), loads the package. Within
    `from_package()` every entry is derived from the package. A pinned
    catalogue answers every lookup itself, exact entries only.
    """
    fixed = pinned.index()
    if fixed is not None:
        found = pinned.row(ref)
        if found is None:
            raise snapshot.missing(ref, pinned.has_provider(ref.lower().partition("/")[0]), entry_refs())
        return from_row(*found, fixed["snapshot"][0], CatalogError)
    if _FROM_PACKAGE.get():
        return _derived(ref)
    index = cache.index()
    provider_id, _, model_id = ref.lower().partition("/")
    for entry_provider, _, models in index["providers"] if index else ():
        if entry_provider == provider_id and model_id in models:
            return from_row(f"{provider_id}/{model_id}", models[model_id], index["snapshot"][0], CatalogError)
    return priced(*find(ref))


def entry_refs() -> list[str]:
    """Every `provider/model` of the catalogue."""
    fixed = pinned.index()
    if fixed is None:
        return snapshot.entry_refs()
    return [f"{provider}/{model}" for provider, _, models in fixed["providers"] for model in models]


def close_matches(ref: str, limit: int = 3) -> tuple[str, ...]:
    """The entries that look most like `ref`."""
    return snapshot.close_matches(ref, limit, entry_refs())


def search(term: str) -> list[str]:
    """Entries whose `provider/model` contains `term` (case-insensitive)."""
    term = term.lower()
    return [ref for ref in entry_refs() if term in ref]


def version() -> str:
    """The catalogue's package version (a pinned file's: the one it was exported from)."""
    fixed = pinned.index()
    return snapshot.version() if fixed is None else fixed["package"]


def export(target: str) -> int:
    """Pin the installed snapshot's prices, as taken today, in `target` (`BAMASC_CATALOG`); the entries written."""
    rows = snapshot.build_rows()
    pinned.export(target, snapshot.version(), package_date(), today(), rows)
    return sum(len(models) for _, _, models in rows)


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
    return cache.take_problems()


def keep_cache_problem(message: str) -> None:
    """Keep a problem taken from take_cache_problems for the next call (a caller that shows no diagnostics)."""
    cache.keep_problem(message)


def _derived(ref: str) -> Pricing:
    """`ref` priced from the package; a cached row of it that says otherwise is reported and rewritten."""
    provider, model = find(ref)
    try:
        derived = priced(provider, model)
    except CatalogError as problem:
        cache.compare(provider.id, model.id, error_row(str(problem), problem.unpriceable))
        raise
    cache.compare(provider.id, model.id, to_row(derived))
    return derived
