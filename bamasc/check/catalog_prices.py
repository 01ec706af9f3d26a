"""Warns where prices may not be true: a hand-written price the catalogue disagrees with, an old catalogue,
or a catalogue cache that was found wrong (and rebuilt)."""

from __future__ import annotations

import sys

from bamasc.diagnostics import Diagnostic, warning
from bamasc.program import Program
from bamasc.provider_registry import lookup


def check_catalog_prices(program: Program) -> list[Diagnostic]:
    found = []
    spans: dict[bool, list] = {True: [], False: []}  # prices by whether they are catalog(...)
    for model in program.models.values():
        pricing = model.prices()
        span = model.spans.get("price", model.span)
        spans[bool(pricing.catalog)].append(span)
        if pricing.catalog:
            found.extend(_old_snapshot(model.name, pricing, span))
        elif getattr(lookup(model.provider), "catalog", None) and (model.price_input or model.price_output):
            # (Zero prices were reported already, or come from a catalog() that failed.)
            found.extend(_differs(model, span))
    # A problem with the catalogue's cache is shown at the first catalog() price (or the first price).
    return found + _cache_problems((spans[True] + spans[False] + [None])[0])


def _cache_problems(span) -> list[Diagnostic]:
    """What the catalogue found wrong with its cache while this program was read (it was rebuilt)."""
    catalog = sys.modules.get("bamasc.catalog")  # not loaded: no price read the catalogue
    if catalog is None:
        return []
    return [warning("BAM411", message, span,
                    hint="nothing to do: the cache was rebuilt from the installed snapshot; if this recurs, "
                         "something else writes to the cache folder")
            for message in catalog.take_cache_problems()]


def _old_snapshot(name: str, pricing, span) -> list[Diagnostic]:
    from bamasc import catalog

    date, estimated = catalog.snapshot_date()
    age = (catalog.today() - date).days
    if age <= catalog.MAX_SNAPSHOT_AGE_DAYS:
        return []
    dated = f"dated {date.isoformat()}" + (" (estimated)" if estimated else "")
    return [warning(
        "BAM410",
        f"the prices of model '{name}' come from a catalogue snapshot {dated}, {age} days old "
        f"(more than {catalog.MAX_SNAPSHOT_AGE_DAYS}): providers may have changed them since",
        span,
        hint=(f"upgrade the package (pip install -U {catalog.PACKAGE}) and recompile" if catalog.pinned.path() is None
              else f"the catalogue is pinned in {catalog.pinned.path()}: upgrade {catalog.PACKAGE}, then write it again "
                   "with `bamasc prices --export` and recompile"),
    )]


def _differs(model, span) -> list[Diagnostic]:
    from bamasc import catalog

    entry = catalog.declared_entry(lookup(model.provider).catalog, model.model_id, model.base_url)
    if entry is None:
        return []
    ref, catalogue_input, catalogue_output = entry
    written = (model.price_input, model.price_output)
    if all(abs(a - b) <= 1e-9 * max(1.0, b) for a, b in zip(written, (catalogue_input, catalogue_output))):
        return []
    return [warning(
        "BAM409",
        f"model '{model.name}' is priced at input {model.price_input:g}, output {model.price_output:g} $/Mtok, "
        f"but the catalogue has {catalogue_input:g} and {catalogue_output:g} for '{ref}'",
        span,
        hint=f'if the catalogue is right, write `price = catalog("{ref}")`',
    )]

