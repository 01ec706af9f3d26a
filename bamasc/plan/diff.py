"""Compares a plan's JSON data with the data the compiler gives, naming each field that differs.

The plan data may hold anything JSON can (and NaN, Infinity, repeated keys);
the expected data is the compiler's own. The walk descends only where the
expected data has an object or a list, so hostile nesting is never recursed
into, and values are shown by a bounded summary, never by `repr` of a whole
structure.
"""

from __future__ import annotations

import re

from bamasc.words import show

# Fields the bound on the call graph gives; a difference there says so.
BOUND_FIELDS = frozenset({
    "worst_case_cost", "cost", "input_cost", "output_cost", "input_tokens", "output_tokens", "cheapest_cost",
    "worst_case_latency_s", "latency_s",
})
# Lists whose items are named in paths by their "name": systems.gsm8k.templates.star.
NAMED_LISTS = frozenset({"systems", "templates"})
# Enough differences to explain a refusal; a plan with more is counted, not listed.
MAX_DIFFERENCES = 50

IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


class JSONObject(dict):
    """A parsed JSON object that remembers the first key it held twice (JSON keeps the last)."""

    __slots__ = ("repeated",)

    def __init__(self, pairs=()):
        super().__init__()
        self.repeated = None
        for key, value in pairs:
            if key in self and self.repeated is None:
                self.repeated = key
            self[key] = value


def join(path: str, key: str) -> str:
    """`path.key`, or `path["odd key"]` for a key that is not a plain name."""
    if isinstance(key, str) and IDENTIFIER.match(key):
        return f"{path}.{key}" if path else key
    return f"{path}[{show(key)}]"


def same_value(actual, expected) -> bool:
    """JSON equality of two scalars: numbers by value (1625 is 1625.0), but true is not 1."""
    if isinstance(expected, bool) or expected is None or isinstance(expected, str):
        return type(actual) is type(expected) and actual == expected
    if isinstance(expected, (int, float)):
        return isinstance(actual, (int, float)) and not isinstance(actual, bool) and actual == expected
    return False


class Differences:
    """The differences found, in document order; past MAX_DIFFERENCES only counted."""

    def __init__(self) -> None:
        self.found: list[str] = []
        self.count = 0

    def add(self, message: str) -> None:
        self.count += 1
        if len(self.found) < MAX_DIFFERENCES:
            self.found.append(message)

    def summary(self, shown: int = 3) -> str:
        text = "; ".join(self.found[:shown])
        return text + (f"; ... and {self.count - shown} more" if self.count > shown else "")


def differences(actual, expected) -> Differences:
    """Every field of `actual` that is missing, extra, or other than in `expected`."""
    found = Differences()
    _compare(actual, expected, "", "", found)
    return found


def _compare(actual, expected, path: str, key: str, found: Differences) -> None:
    if isinstance(expected, dict):
        if not isinstance(actual, dict):
            found.add(f"{path or 'the plan'} is {show(actual)}, but the sources give an object")
            return
        repeated = getattr(actual, "repeated", None)
        if repeated is not None:
            found.add(f"{path or 'the plan'} holds the key {show(repeated)} twice")
        for name, value in expected.items():
            if name in actual:
                _compare(actual[name], value, join(path, name), name, found)
            else:
                found.add(f"{join(path, name)} is missing (the sources give {show(value)})")
        for name in actual:
            if name not in expected:
                found.add(f"{join(path, name)} is not a field of this plan (it holds {show(actual[name])})")
        return
    if isinstance(expected, list):
        if not isinstance(actual, list):
            found.add(f"{path} is {show(actual)}, but the sources give {show(expected)}")
            return
        for index in range(max(len(actual), len(expected))):
            if index >= len(actual):
                found.add(f"{_item_path(path, key, index, None, expected[index])} is missing")
            elif index >= len(expected):
                found.add(f"{path}[{index}] is not in what the sources give ({len(expected)} items)")
            else:
                item = _item_path(path, key, index, actual[index], expected[index])
                _compare(actual[index], expected[index], item, "", found)
        return
    if not same_value(actual, expected):
        if key in BOUND_FIELDS:
            who = "the graph gives"
        elif key == "plan_sha256":
            # The hash covers compiled_with, the one part of a plan the sources cannot give.
            who = "the plan compiled with its compiled_with settings hashes to"
        else:
            who = "the sources give"
        found.add(f"{path} is {show(actual)}, but {who} {show(expected)}")


def _item_path(path: str, key: str, index: int, actual, expected) -> str:
    """A system or template by its name where the plan's item has the expected one, else by position."""
    if key in NAMED_LISTS and isinstance(expected, dict):
        name = expected.get("name")
        if actual is None or (isinstance(actual, dict) and same_value(actual.get("name"), name)):
            return join(path, name)
    return f"{path}[{index}]"
