"""One catalogue entry as a row of plain JSON (what the cache holds), and the check of a row read back."""

from __future__ import annotations

import json
import math

from bamasc.limits import MAX_BUDGET, MAX_PRICE, MAX_TOKENS
from bamasc.prices import PriceTier, Pricing

# The fields of a row (`to_row`), in order, and of a tier in it.
ROW_FIELDS = ("input", "output", "cache_read", "cache_write", "tiers", "per_request", "batch_input", "batch_output")
TIER_FIELDS = ("above", "input", "output", "cache_read", "cache_write")
_OPTIONAL = {"cache_read", "cache_write", "batch_input", "batch_output"}


def rows_problem(cached: dict) -> str | None:
    """Why one provider's rows cannot be used, naming the row and the field; None when every row can."""
    models = cached.get("models")
    if not isinstance(models, dict):
        return f"field 'models' is {shown(models)}, not an object of rows"
    for model, row in models.items():
        problem = row_problem(row)
        if problem is not None:
            return f"row '{model}'{'' if problem.startswith('is ') else ','} {problem}"
    return None


def row_problem(row) -> str | None:
    """Why `row` is not one `to_row` writes ("field 'input' is -5, not ..."), or None."""
    if isinstance(row, list) and row[:1] == ["error"]:
        if len(row) == 3 and isinstance(row[1], str) and isinstance(row[2], bool):
            return None
        return f"is {shown(row)}, not [\"error\", a message, true or false]"
    if not isinstance(row, list) or len(row) != len(ROW_FIELDS):
        return f"is {shown(row)}, not a list of {len(ROW_FIELDS)} fields ({', '.join(ROW_FIELDS)})"
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
        return f"field 'tiers' is {shown(tiers)}, not a list of tiers"
    previous = -1
    for number, tier in enumerate(tiers):
        if not isinstance(tier, list) or len(tier) != len(TIER_FIELDS):
            return f"field 'tiers[{number}]' is {shown(tier)}, not [{', '.join(TIER_FIELDS)}]"
        above = tier[0]
        if not (type(above) is int and previous < above <= MAX_TOKENS):
            return (f"field 'tiers[{number}].above' is {shown(above)}, not a prompt size in tokens "
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
    return f"field '{field}' is {shown(value)}, not {what}"


def differences(cached, expected) -> str:
    """The fields of a cached row that differ from the snapshot's, as 'field X instead of Y'."""
    if not (isinstance(cached, list) and isinstance(expected, list) and len(cached) == len(expected) == len(ROW_FIELDS)):
        return f"{shown(cached)} instead of {shown(expected)}"
    found = [f"{name} {shown(was)} instead of {shown(now)}"
             for name, was, now in zip(ROW_FIELDS, cached, expected) if plain(was) != plain(now)]
    return ", ".join(found)


def plain(value):
    """`value` as JSON gives it back (tuples as lists), for comparing a cached row with a derived one."""
    return json.loads(json.dumps(value))


def shown(value) -> str:
    """A value as a message quotes it, cut to 60 characters."""
    text = json.dumps(value, ensure_ascii=False) if not isinstance(value, float) else repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def to_row(p: Pricing) -> list:
    tiers = [[t.above, t.input, t.output, t.cache_read, t.cache_write] for t in p.tiers]
    return [p.input, p.output, p.cache_read, p.cache_write, tiers, p.per_request, p.batch_input, p.batch_output]


def error_row(message: str, unpriceable: bool) -> list:
    """The row of an entry bamasc cannot price: its CatalogError's message and kind."""
    return ["error", message, unpriceable]


def from_row(entry: str, row: list, snapshot: str, error: type[Exception]) -> Pricing:
    """The Pricing of a checked row; an error row raises `error(message, unpriceable=...)`."""
    if row[0] == "error":
        raise error(row[1], unpriceable=row[2])
    rates, tiers, rest = row[:4], row[4], row[5:]
    return Pricing(*rates, tiers=tuple(PriceTier(*tier) for tier in tiers), per_request=rest[0],
                   batch_input=rest[1], batch_output=rest[2], catalog=entry, snapshot=snapshot)
