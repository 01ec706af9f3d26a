"""Budget windows: fixed periods aligned to UTC, in which a key's or a team's budget is spent.

`per` is one of `30s`, `1m`, `1h`, `1d`, `7d`, `1mo`. A window starts on its
period's UTC boundary: a minute on :00, an hour on the hour, a day at 00:00
UTC, a week on Monday 00:00 UTC, a month on the 1st at 00:00 UTC; `30s` on
:00 and :30. The next window starts with nothing spent.

A call is reserved in the window open when it is admitted, and settled in
that same window, whenever its answer comes: a hold that crosses a boundary
is charged to the window it was taken from, never the next one, so no window
ever holds more than its budget.
"""

from __future__ import annotations

import calendar
import datetime
import math

# Each period's length in seconds; a month has none (its windows are calendar months).
PERIODS = {"30s": 30, "1m": 60, "1h": 3600, "1d": 86400, "7d": 7 * 86400, "1mo": None}
# The Unix time of a Monday 00:00 UTC (1970-01-05), where weeks are counted from.
_MONDAY = 4 * 86400


def check_per(per: object) -> str:
    """`per` itself, or a ValueError naming the periods a window may have."""
    if per not in PERIODS:
        raise ValueError(f"a window's `per` is one of {', '.join(PERIODS)}, not {str(per)[:20]!r}")
    return per


def window(per: str, now: float) -> tuple[float, float]:
    """The window of period `per` open at Unix time `now`: its start and its end (start included, end not)."""
    if not math.isfinite(now):
        raise ValueError(f"no window holds the time {now!r}")
    length = PERIODS[check_per(per)]
    if length is not None:
        origin = _MONDAY if per == "7d" else 0
        start = origin + math.floor((now - origin) / length) * length
        return float(start), float(start + length)
    moment = datetime.datetime.fromtimestamp(now, datetime.timezone.utc)
    start = datetime.datetime(moment.year, moment.month, 1, tzinfo=datetime.timezone.utc)
    days = calendar.monthrange(moment.year, moment.month)[1]
    return start.timestamp(), (start + datetime.timedelta(days=days)).timestamp()


def window_id(per: str, now: float) -> str:
    """The name of the window open at `now`: its period and its start in UTC (`1d@2026-12-07T00:00:00Z`)."""
    start, _ = window(per, now)
    stamp = datetime.datetime.fromtimestamp(start, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    return f"{per}@{stamp}"
