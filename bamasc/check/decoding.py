"""Reads the decoding settings of a model or role: temperature, top_p, seed, stop."""

from __future__ import annotations

from bamasc.check.attributes import Attributes, shown
from bamasc.program import DecodingSettings
from bamasc.provider_registry import DECODING_FIELDS
from bamasc.diagnostics import Diagnostic, error
from bamasc.syntax import ast

DECODING_ATTRIBUTES = DECODING_FIELDS
MAX_TEMPERATURE = 2.0  # the widest range any supported provider accepts (OpenAI's)
MAX_STOP = 4  # OpenAI accepts at most four stop sequences
MAX_SEED = 2**63 - 1  # providers take the seed as a signed 64-bit integer


def read_decoding(attrs: Attributes, diagnostics: list[Diagnostic]) -> DecodingSettings:
    return DecodingSettings(
        temperature=_fraction(attrs, "temperature", 0.0, MAX_TEMPERATURE, True, diagnostics),
        top_p=_fraction(attrs, "top_p", 0.0, 1.0, False, diagnostics),
        seed=_seed(attrs, diagnostics),
        stop=_stop(attrs, diagnostics),
    )


def _fraction(attrs: Attributes, name: str, low: float, high: float, low_included: bool, diagnostics) -> float | None:
    number = attrs.number(name)
    if number is None:
        return None
    above = number.value >= low if low_included else number.value > low
    if number.unit or not (above and number.value <= high):
        low_bracket = "[" if low_included else "("
        diagnostics.append(
            error(
                "BAM214",
                f"'{name}' must be a number in {low_bracket}{low:g}, {high:g}], not {shown(number.text)}",
                number.span,
                hint="0 is greedy and reproducible" if name == "temperature" else "1 keeps the whole distribution",
            )
        )
        return None
    return number.value


def _seed(attrs: Attributes, diagnostics) -> int | None:
    number = attrs.number("seed")
    if number is None:
        return None
    if number.unit or not number.is_integer or not 0 <= number.value <= MAX_SEED:
        diagnostics.append(
            error("BAM214", f"'seed' must be a whole number from 0 to 2^63-1, not {shown(number.text)}", number.span)
        )
        return None
    return int(number.value)


def _stop(attrs: Attributes, diagnostics) -> tuple[str, ...] | None:
    value = attrs.value("stop")
    if value is None:
        return None
    items = value.items if isinstance(value, ast.ListValue) else (value,)
    strings = []
    for item in items:
        if not isinstance(item, ast.String) or not item.value:
            diagnostics.append(error("BAM214", "'stop' must be a list of non-empty strings", item.span))
            return None
        strings.append(item.value)
    if len(strings) > MAX_STOP:
        diagnostics.append(
            error("BAM214", f"'stop' has {len(strings)} strings; providers accept at most {MAX_STOP}", value.span)
        )
        return None
    return tuple(strings)
