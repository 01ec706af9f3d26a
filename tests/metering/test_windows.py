"""Budget windows are fixed UTC periods: every moment is in exactly one, windows of a period follow each other
with no gap, and each starts on its period's boundary."""

from __future__ import annotations

import datetime
import random

import pytest

from bamasc.metering.windows import PERIODS, check_per, window, window_id


def _utc(stamp: float) -> datetime.datetime:
    return datetime.datetime.fromtimestamp(stamp, datetime.timezone.utc)


@pytest.mark.parametrize("per", list(PERIODS))
def test_every_moment_is_in_one_window_and_windows_follow_each_other(per):
    rng = random.Random(per)
    for _ in range(2000):
        now = rng.uniform(0, 4.2e9) if rng.random() < 0.8 else float(rng.randint(0, 4_200_000_000))
        start, end = window(per, now)
        assert start <= now < end
        assert window(per, start) == (start, end)  # the start is in its own window
        assert window(per, end)[0] == end  # the next window starts where this one ends
        assert window(per, end - 1e-3) == (start, end)
        begun = _utc(start)
        if per == "1mo":
            assert (begun.day, begun.hour, begun.minute, begun.second) == (1, 0, 0, 0)
            assert 28 * 86400 <= end - start <= 31 * 86400
        else:
            assert end - start == PERIODS[per]
        if per == "1d":
            assert (begun.hour, begun.minute, begun.second) == (0, 0, 0)
        if per == "7d":
            assert begun.weekday() == 0 and (begun.hour, begun.minute) == (0, 0)
        if per == "1h":
            assert (begun.minute, begun.second) == (0, 0)


def test_a_window_is_named_by_its_period_and_start():
    now = datetime.datetime(2026, 12, 7, 15, 4, 5, tzinfo=datetime.timezone.utc).timestamp()
    assert window_id("1d", now) == "1d@2026-12-07T00:00:00Z"
    assert window_id("7d", now) == "7d@2026-12-07T00:00:00Z"  # a Monday
    assert window_id("1mo", now) == "1mo@2026-12-01T00:00:00Z"
    assert window_id("30s", now) == "30s@2026-12-07T15:04:00Z"
    leap = datetime.datetime(2028, 2, 29, 23, 59, 59, tzinfo=datetime.timezone.utc).timestamp()
    assert window("1mo", leap)[1] == datetime.datetime(2028, 3, 1, tzinfo=datetime.timezone.utc).timestamp()


@pytest.mark.parametrize("per", ["1s", "1w", "1M", "", None, 30, "1d "])
def test_an_unknown_period_is_refused_by_name(per):
    with pytest.raises(ValueError, match="30s, 1m, 1h, 1d, 7d, 1mo"):
        check_per(per)
