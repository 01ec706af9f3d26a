"""Warns where prices may not be true: a hand-written price the catalogue disagrees with, or an old catalogue."""

from __future__ import annotations

from bamasc.diagnostics import Diagnostic, warning
from bamasc.program import Program


def check_catalog_prices(program: Program) -> list[Diagnostic]:
    found = []
    for model in program.models.values():
        pricing = model.prices()
        span = model.spans.get("price", model.span)
        if pricing.catalog:
            found.extend(_old_snapshot(model.name, pricing, span))
        elif model.provider in ("openai", "anthropic") and (model.price_input or model.price_output):
            # (Zero prices were reported already, or come from a catalog() that failed.)
            found.extend(_differs(model, span))
    return found


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
        hint=f"upgrade the package (pip install -U {catalog.PACKAGE}) and recompile",
    )]


def _differs(model, span) -> list[Diagnostic]:
    from bamasc import catalog

    entry = catalog.declared_entry(model.provider, model.model_id, model.base_url)
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

