"""Counts, amounts and values in messages: "1 seat", "2 seats", µ$ rounded up, a parsed JSON value shown short."""

import json
import math


def counted(count: int, word: str) -> str:
    """`count` and `word`, the word in the plural unless the count is one (regular English plurals only)."""
    return f"{count} {word}" if count == 1 else f"{count} {word}s"


def rounded_up(amount: float) -> str:
    """µ$ rounded up to 0.1, so "needs at least X" is never below the true amount and a budget of X does fit."""
    if not math.isfinite(amount * 10):  # the limits keep amounts finite; a library caller may not
        return f"{amount:g}"
    return f"{math.ceil(amount * 10 - 1e-9) / 10:.1f}"


def show(value: object) -> str:
    """A short JSON-style rendering of any parsed value: containers by their size, long text cut."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        text = json.dumps(value[:60])
        return text[:-1] + '..."' if len(value) > 60 else text
    if isinstance(value, float):
        if math.isnan(value):
            return "NaN"
        if math.isinf(value):
            return "Infinity" if value > 0 else "-Infinity"
        return repr(value)
    if isinstance(value, int):
        digits = str(value)
        return digits if len(digits) <= 24 else f"{digits[:12]}... (a {len(digits)}-digit number)"
    if isinstance(value, list):
        return f"a list of {counted(len(value), 'item')}"
    if isinstance(value, dict):
        return "an empty object" if not value else "an object"
    return type(value).__name__
