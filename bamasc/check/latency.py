"""Reads and checks a model's `latency { }` block and a system's `deadline`, and that a deadline can be proven."""

from __future__ import annotations

import math

from bamasc.check.attributes import Attributes, describe, out_of_range, shown
from bamasc.diagnostics import Diagnostic, Note, error
from bamasc.limits import MAX_SECONDS, MAX_TOKENS_PER_S
from bamasc.program import Latency, Program
from bamasc.syntax import ast

LATENCY_ATTRIBUTES = ("first_token", "per_token", "tokens_per_s")
LATENCY_EXAMPLE = "latency { first_token = 0.6  per_token = 0.012 }"


def read_latency(model: str, attrs: Attributes, diagnostics: list[Diagnostic]) -> Latency | None:
    """The model's declared latency; None when it declares none or the block is wrong (with its diagnostics)."""
    block = attrs.block("latency")
    if block is None:
        return None
    what = f"latency of model '{model}'"
    fields = Attributes(what, block.attrs, LATENCY_ATTRIBUTES, diagnostics, block.name_span)
    first_token = _seconds(fields, "first_token", what, diagnostics)
    rates = [name for name in ("per_token", "tokens_per_s") if name in fields.items]
    if "first_token" not in fields.items:
        diagnostics.append(
            error("BAM217", f"the {what} has no 'first_token' (seconds until the first output token)", block.name_span,
                  hint=f"write `{LATENCY_EXAMPLE}`")
        )
    if not rates:
        diagnostics.append(
            error("BAM217", f"the {what} gives no output speed: it needs 'per_token' (seconds per output token) "
                  "or 'tokens_per_s'", block.name_span, hint=f"write `{LATENCY_EXAMPLE}`")
        )
    elif len(rates) == 2:
        diagnostics.append(
            error("BAM218", f"the {what} gives both 'per_token' and 'tokens_per_s'; they say the same thing, so give one",
                  fields.items["tokens_per_s"].name_span,
                  Note("per_token given here", fields.items["per_token"].name_span),
                  hint="keep one: per_token = 1 / tokens_per_s")
        )
        return None
    per_token = None
    if rates == ["per_token"]:
        per_token = _seconds(fields, "per_token", what, diagnostics)
    elif rates == ["tokens_per_s"]:
        speed = _positive(fields, "tokens_per_s", what, MAX_TOKENS_PER_S, " tokens/s", diagnostics)
        if speed is not None:
            per_token = 1.0 / speed
            if per_token > MAX_SECONDS:
                number = fields.number("tokens_per_s")
                diagnostics.append(
                    error("BAM210", f"'tokens_per_s' in the {what} is {shown(number.text)}: one token would take "
                          f"{per_token:g} s, above the limit of {MAX_SECONDS:g} s", number.span,
                          hint='the limits are listed in docs/language.md, "Limits"')
                )
                per_token = None
    if first_token is None or per_token is None:
        return None
    return Latency(first_token_s=first_token, per_output_token_s=per_token)


def read_deadline(attrs: Attributes, diagnostics: list[Diagnostic]) -> float | None:
    """`deadline = SECONDS`: the most one task may take."""
    if "deadline" not in attrs.items:
        return None
    value = attrs.value("deadline")
    if value is None:
        return None  # a block: BAM108 is reported
    return _checked(value, "deadline", "the deadline (seconds per task)", MAX_SECONDS, " s", "BAM407", diagnostics)


def check_deadlines(program: Program) -> list[Diagnostic]:
    """A system with a deadline needs every model of its pool to declare a latency: else no bound is proven."""
    diagnostics = []
    for system in program.systems.values():
        if system.deadline is None:
            continue
        where = system.spans.get("deadline", system.span)
        for name, span in zip(system.models, system.item_spans.get("models", ())):
            model = program.models.get(name)
            if model is None or model.latency is not None or "latency" in model.spans:
                continue  # unknown (BAM102), declared, or declared wrongly (its own error)
            diagnostics.append(
                error(
                    "BAM408",
                    f"system '{system.name}' has a deadline of {system.deadline:g} s, but its model '{name}' declares "
                    "no latency, so no bound on a task's time can be proven",
                    span,
                    Note("the deadline is given here", where),
                    Note(f"model '{name}' is declared here", model.span),
                    hint=f"add `{LATENCY_EXAMPLE}` to model '{name}' (its provider's worst case), or drop the deadline",
                )
            )
    return diagnostics


def _seconds(fields: Attributes, name: str, what: str, diagnostics) -> float | None:
    return _positive(fields, name, what, MAX_SECONDS, " s", diagnostics)


def _positive(fields: Attributes, name: str, what: str, limit: float, unit: str, diagnostics) -> float | None:
    if name not in fields.items:
        return None
    value = fields.value(name)
    if value is None:
        return None  # a block: BAM108 is reported
    return _checked(value, name, f"'{name}' in the {what}", limit, unit, "BAM216", diagnostics)


def seconds_value(value, name: str, what: str, code: str, diagnostics) -> float | None:
    """A positive number of seconds (`5` or `5 s`) within MAX_SECONDS; None (and a diagnostic) otherwise."""
    return _checked(value, name, what, MAX_SECONDS, " s", code, diagnostics)


def _checked(value, name: str, what: str, limit: float, unit: str, code: str, diagnostics) -> float | None:
    """A positive finite number within `limit`, plain or with its own unit (`s`); None (and a diagnostic
    at the value) otherwise."""
    if isinstance(value, ast.Number) and value.unit and value.unit != unit.strip():
        diagnostics.append(
            error("BAM208", f"{what} is in {unit.strip()} and takes no other unit, not {value.unit}",
                  value.span, hint=f"write `{name} = {shown(value.text)}`")
        )
        return None
    if not isinstance(value, ast.Number):
        diagnostics.append(error(code, f"{what} must be a number, not {describe(value)}", value.span))
        return None
    if not value.value > 0:
        diagnostics.append(error(code, f"{what} must be above zero, not {shown(value.text)}", value.span))
        return None
    if not math.isfinite(value.value) or value.value > limit:
        diagnostics.append(out_of_range(what, value, limit, unit))
        return None
    return float(value.value)
