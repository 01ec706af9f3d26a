"""Reads and checks a model's `rate_limit { }` block: requests and tokens per minute."""

from __future__ import annotations

from bamasc.check.attributes import Attributes, describe, out_of_range, shown
from bamasc.diagnostics import Diagnostic, error
from bamasc.limits import MAX_PER_MINUTE
from bamasc.program import RateLimit
from bamasc.syntax import ast

RATE_LIMIT_ATTRIBUTES = ("requests_per_minute", "tokens_per_minute")
RATE_LIMIT_EXAMPLE = "rate_limit { requests_per_minute = 500  tokens_per_minute = 200000 }"


def read_rate_limit(model: str, attrs: Attributes, diagnostics: list[Diagnostic]) -> RateLimit | None:
    """The model's declared limits; None when it declares none, or when a value is wrong (with its diagnostics)."""
    block = attrs.block("rate_limit")
    if block is None:
        return None
    what = f"rate_limit of model '{model}'"
    fields = Attributes(what, block.attrs, RATE_LIMIT_ATTRIBUTES, diagnostics, block.name_span)
    if not fields.items:
        diagnostics.append(
            error("BAM219", f"the {what} gives no limit", block.name_span,
                  hint=f"write `{RATE_LIMIT_EXAMPLE}`, or remove the block")
        )
        return None
    before = len(diagnostics)
    values = {name: _per_minute(fields, name, what, diagnostics) for name in RATE_LIMIT_ATTRIBUTES}
    if len(diagnostics) > before:
        return None
    return RateLimit(**values)


def _per_minute(fields: Attributes, name: str, what: str, diagnostics) -> int | None:
    """A positive whole number per minute, with no unit, within MAX_PER_MINUTE."""
    if name not in fields.items:
        return None
    value = fields.value(name)
    if value is None:
        return None  # a block: BAM108 is reported
    if isinstance(value, ast.Number) and value.unit:
        diagnostics.append(
            error("BAM208", f"'{name}' in the {what} is a count per minute and takes no unit, not {value.unit}",
                  value.span, hint=f"write `{name} = {shown(value.text)}`")
        )
        return None
    if not isinstance(value, ast.Number):
        diagnostics.append(error("BAM219", f"'{name}' in the {what} must be a number, not {describe(value)}", value.span))
        return None
    if value.value > MAX_PER_MINUTE:
        diagnostics.append(out_of_range(f"'{name}' in the {what}", value, MAX_PER_MINUTE))
        return None
    if not value.is_integer or value.value < 1:
        diagnostics.append(
            error("BAM219", f"'{name}' in the {what} must be a positive whole number, not {shown(value.text)}",
                  value.span, hint=f"write `{RATE_LIMIT_EXAMPLE}`")
        )
        return None
    return int(value.value)
