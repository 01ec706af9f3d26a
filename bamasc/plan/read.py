"""Reads a plan file into JSON data, and the fields that say how to compile it again.

Whatever the file holds (not UTF-8, truncated, nested past Python's limit, a
number of thousands of digits, NaN), reading it raises only PlanFormatError.
Only the fields needed to find and recompile the sources are checked here;
every other field is compared with the recompiled plan (plan/diff.py).
"""

from __future__ import annotations

import json
import math
import os
import re
import stat

from bamasc.plan.diff import IDENTIFIER, JSONObject, join, same_value
from bamasc.words import show
from bamasc.plan.schema import METHODS, SCHEMA_VERSION, PlanFormatError
from bamasc.records import record

# Far above any plan (examples/gsm8k.bam's is about 25 KB); a larger file is refused unread.
MAX_PLAN_BYTES = 64 * 1024 * 1024

_SHA256 = re.compile(r"[0-9a-f]{64}\Z")


@record
class Settings:
    """What a plan names to be compiled again: its sources and the compile options."""

    root: str  # the compiled file's label, one of the sources
    sources: tuple[tuple[str, str], ...]  # (label, sha256) for every file the plan was built from
    system: str | None  # --system
    budget: float | None  # --budget, µ$
    method: str  # --method


def read_plan_data(path: str) -> dict:
    """The plan file's top-level JSON object."""
    try:
        regular = stat.S_ISREG(os.stat(path).st_mode)
        # Opening a FIFO or a device would wait, or never end: only a regular file is read.
        raw = _read_at_most(path, MAX_PLAN_BYTES + 1) if regular else None
    except (OSError, ValueError) as problem:  # ValueError: a NUL in the path
        raise PlanFormatError(f"cannot read {path}: {getattr(problem, 'strerror', None) or problem}") from None
    if raw is None:
        raise PlanFormatError(f"{path} is not a regular file: not a plan bamasc wrote")
    if len(raw) > MAX_PLAN_BYTES:
        raise PlanFormatError(f"{path} is larger than {MAX_PLAN_BYTES} bytes: not a plan bamasc wrote")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as problem:
        raise PlanFormatError(f"{path} is not UTF-8 text (the byte at offset {problem.start} is invalid): not a plan bamasc wrote") from None
    try:
        data = json.loads(text, object_pairs_hook=JSONObject)
    except json.JSONDecodeError as problem:
        raise PlanFormatError(f"{path} is not JSON: {problem.msg} at line {problem.lineno} column {problem.colno}") from None
    except RecursionError:
        raise PlanFormatError(f"{path} is not a bamasc plan: its JSON is nested too deeply to read") from None
    except ValueError:
        # Python refuses to read integers of more than a few thousand digits; no plan holds one.
        raise PlanFormatError(f"{path} is not a bamasc plan: it holds a number of thousands of digits") from None
    if not isinstance(data, dict):
        raise PlanFormatError(f"{path} is not a bamasc plan: it holds {show(data)}, not a JSON object")
    return data


def _read_at_most(path: str, size: int) -> bytes:
    with open(path, "rb") as handle:
        return handle.read(size)


def read_settings(data: dict) -> Settings:
    """The schema version, the sources and `compiled_with`, each checked; the rest waits for the comparison."""
    version = data.get("schema_version")
    if not same_value(version, SCHEMA_VERSION):
        raise PlanFormatError(
            f"schema_version is {show(version)}: this bamasc reads plans of schema version {SCHEMA_VERSION}; recompile it"
        )
    sources = _sources(data.get("sources"))
    root = data.get("root")
    if not isinstance(root, str) or root not in {label for label, _ in sources}:
        raise PlanFormatError(f"root is {show(root)}: a plan's root is the label of one of its sources")
    settings = data.get("compiled_with")
    if not isinstance(settings, dict):
        raise PlanFormatError(f"compiled_with is {show(settings)}: expected an object with system, budget and method")
    for key in settings:
        if key not in ("system", "budget", "method"):
            raise PlanFormatError(f"{join('compiled_with', key)} is not a compile setting (it holds {show(settings[key])})")
    system = settings.get("system")
    if system is not None and (not isinstance(system, str) or not IDENTIFIER.match(system)):
        raise PlanFormatError(f"compiled_with.system is {show(system)}: expected null or a system's name")
    budget = settings.get("budget")
    if budget is not None and not _positive_number(budget):
        raise PlanFormatError(f"compiled_with.budget is {show(budget)}: expected null or a number of µ$ above zero")
    method = settings.get("method")
    if not isinstance(method, str) or method not in METHODS:
        raise PlanFormatError(f"compiled_with.method is {show(method)}: expected one of {', '.join(METHODS)}")
    _check_agreement(data.get("systems"), system, budget)
    return Settings(root, sources, system, budget, method)


def _positive_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0


def _sources(value) -> tuple[tuple[str, str], ...]:
    if not isinstance(value, list) or not value:
        raise PlanFormatError(f"sources is {show(value)}: expected a list of the files the plan was compiled from")
    found = []
    for index, source in enumerate(value):
        where = f"sources[{index}]"
        if not isinstance(source, dict):
            raise PlanFormatError(f"{where} is {show(source)}: expected an object with path and sha256")
        label, digest = source.get("path"), source.get("sha256")
        if not isinstance(label, str) or not _safe_label(label):
            raise PlanFormatError(f"{where}.path is {show(label)}: expected a path relative to the plan, or std/NAME.bam")
        if not isinstance(digest, str) or not _SHA256.match(digest):
            raise PlanFormatError(f"{where}.sha256 is {show(digest)}: expected 64 lowercase hexadecimal digits")
        found.append((label, digest))
    return tuple(found)


def _safe_label(label: str) -> bool:
    # A plan names its sources relative to itself; an absolute path or a NUL is never one bamasc wrote.
    return bool(label) and "\x00" not in label and not os.path.isabs(label) and len(label) <= 4096


def _check_agreement(systems, system: str | None, budget: float | None) -> None:
    """`compiled_with` against the systems the plan lists: an edit of either is named here,
    where recompiling would only show its consequences."""
    if not isinstance(systems, list):
        return  # the comparison with the recompiled plan names it
    named = [(i, s) for i, s in enumerate(systems) if isinstance(s, dict)]
    if system is not None:
        names = [s.get("name") for _, s in named]
        if len(systems) != 1 or names != [system]:
            listed = ", ".join(show(name) for name in names[:5]) or "none"
            raise PlanFormatError(f"compiled_with.system is {show(system)}, but the plan lists the systems {listed}")
    if budget is not None:
        for index, entry in named:
            if "budget" in entry and not same_value(entry["budget"], budget):
                label = entry.get("name") if isinstance(entry.get("name"), str) else None
                where = join("systems", label) if label and IDENTIFIER.match(label) else f"systems[{index}]"
                raise PlanFormatError(
                    f"compiled_with.budget is {show(budget)}, but {where}.budget is {show(entry['budget'])}: "
                    "the plan was compiled for one budget"
                )
