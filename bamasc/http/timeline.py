"""Spend over time: the points of the spend line and of each key's and team's window, on the trace's clock.

Each line bamasc writes says when (`at`, Unix seconds, UTC; docs/trace.md).
A money line of an older trace has no `at`: it is drawn at the time of the
line before it in its trace, or, before its trace's first stamped line, at
that one's time (a trace resumed by a newer bamasc). Only where some trace
has no stamped line at all is the x-axis the order of the money lines, and
the page says so. Points are in time order (several traces, or shards of a
Ray run, interleave), and a long line is thinned, its last point kept.

A window's limit comes from the reserve lines that held in it (their
`level_budgets`); its span from its name (`key:NAME:1d@2026-12-07T00:00:00Z`,
metering/windows.py).
"""

from __future__ import annotations

import datetime
import itertools
import math

from bamasc.metering.windows import window
from bamasc.words import show

TIMELINE_POINTS = 1500  # points of the spend-over-time line
WINDOW_POINTS = 300  # points of each window's line
SHOWN_WINDOWS = 24  # windows drawn over time, the latest kept (every one has its bar)
FUTURE_SLACK_S = 86400.0  # a line stamped further past the reader's clock than this is refused
LAST_TIME = 253402300799.999  # 9999-12-31T23:59:59.999Z: the last instant RFC 3339 can write


class MoneyEvent:
    """One line that moved money or granted a budget, and when (None: not known yet)."""

    __slots__ = ("task", "charged", "granted", "levels", "at", "carried")

    def __init__(self, task, charged: float, granted: float, levels: tuple[str, ...], at: float | None) -> None:
        self.task, self.charged, self.granted, self.levels = task, charged, granted, levels
        self.at = at
        self.carried = at is None  # its time, if it gets one, is another line's


class TraceClock:
    """The time of each trace's lines as they are read: a line's own `at`, or the one before it (see above)."""

    def __init__(self) -> None:
        self.last: dict[str, float] = {}  # source -> the latest stamp read in it
        self.waiting: dict[str, list[MoneyEvent]] = {}  # source -> events read before its first stamp

    def seen(self, source: str, at: float | None) -> None:
        """A line of `source` was read, stamped `at` (None: not stamped)."""
        if at is None:
            return
        self.last[source] = at
        for event in self.waiting.pop(source, ()):
            event.at = at

    def event(self, source: str, event: MoneyEvent) -> MoneyEvent:
        """`event` (its own stamp already given to `seen`) with the time it is drawn at, when one is known."""
        if event.at is None:
            event.at = self.last.get(source)
            if event.at is None:
                self.waiting.setdefault(source, []).append(event)
        return event


def stamp_problem(value: object, now: float) -> str | None:
    """Why `value` is not a line's `at` read at Unix time `now`, or None (also when absent)."""
    if value is None:
        return None
    if type(value) not in (int, float) or not math.isfinite(value) or value < 0:
        return f"at = {show(value)}, not a time (Unix seconds, 0 or more)"
    if value > min(now + FUTURE_SLACK_S, LAST_TIME):
        return f"at = {show(value)}, a time after {_utc(now + FUTURE_SLACK_S)}: the clock that wrote it was wrong"
    return None


def _utc(seconds: float) -> str:
    moment = datetime.datetime.fromtimestamp(min(seconds, LAST_TIME), datetime.timezone.utc)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def timeline(events: list[MoneyEvent], ignored_stamps: int = 0) -> dict:
    """Spend and budgets granted, cumulative, after each event: `x` the events' times (`axis` "time", Unix
    seconds) when every one has one, else their numbers in the traces' order (`axis` "line"); `note` says why."""
    timed = all(event.at is not None for event in events)
    ordered = sorted(events, key=lambda event: event.at) if timed else events
    spent = list(itertools.accumulate(event.charged for event in ordered))
    granted = list(itertools.accumulate(event.granted for event in ordered))
    kept = _thinned(len(ordered), TIMELINE_POINTS)
    notes = []
    if not timed:
        notes.append("some trace records no times (written before bamasc stamped its lines): the x-axis is the "
                     "order of the money lines")
    else:
        carried = sum(event.carried for event in ordered)
        if carried:
            notes.append(f"{carried} money lines carry no time (written by an older bamasc): each is drawn at the "
                         "time of the line before it in its trace, or of its trace's first stamped line")
    if ignored_stamps:
        notes.append(f"{ignored_stamps} lines had an `at` that is not a time; each is drawn as a line without one")
    return {"axis": "time" if timed else "line",
            "x": [ordered[index].at if timed else index + 1 for index in kept],
            "spent": [round(spent[index], 6) for index in kept],
            "granted": [round(granted[index], 6) for index in kept],
            "note": "; ".join(notes) or None}


def window_lines(levels: list[tuple[str, float]], budgets: dict[str, float], events: list[MoneyEvent]) -> list[dict]:
    """Each window of `levels` ((name, spent), sorted by name): its spend, its limit (`budget`, None when no
    line recorded it), its span (`start`, `end`, Unix seconds; None for a name that does not give one), and
    for the latest SHOWN_WINDOWS with times, its cumulative spend over time (`x`, `y`)."""
    found = []
    for name, spent in levels:
        span = window_span(name)
        found.append({"level": name, "spent": round(spent, 6), "budget": budgets.get(name),
                      "start": span[0] if span else None, "end": span[1] if span else None, "x": [], "y": []})
    drawn = sorted((entry for entry in found if entry["start"] is not None), key=lambda entry: entry["start"])
    for entry in drawn[-SHOWN_WINDOWS:]:
        mine = [event for event in events if entry["level"] in event.levels]
        if not mine or any(event.at is None for event in mine):
            continue
        mine.sort(key=lambda event: event.at)
        spent_so_far = list(itertools.accumulate(event.charged for event in mine))
        kept = _thinned(len(mine), WINDOW_POINTS)
        entry["x"] = [mine[index].at for index in kept]
        entry["y"] = [round(spent_so_far[index], 6) for index in kept]
    return found


def window_span(level: str) -> tuple[float, float] | None:
    """The start and end (Unix seconds) of the window a level names (`kind:name:per@start`), or None."""
    parts = level.split(":", 2)
    if len(parts) != 3:
        return None
    per, _, opened = parts[2].partition("@")
    try:
        start = datetime.datetime.strptime(opened, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=datetime.timezone.utc)
        return window(per, start.timestamp())
    except (ValueError, OverflowError):  # not a period, or not a time: an older or a foreign name
        return None


def _thinned(count: int, most: int) -> list[int]:
    step = max(1, math.ceil(count / most))
    kept = list(range(0, count, step))
    if count and kept[-1] != count - 1:
        kept.append(count - 1)
    return kept
