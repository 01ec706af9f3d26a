"""Spend over time (bamasc/http/timeline.py): a time axis from the trace's `at`, its points the trace's cumulative
spend; older lines without a time drawn beside their neighbours; tampered times refused by file and line (the
report) or read as absent (a live server's follower); each key's and team's window against its limit."""

from __future__ import annotations

import itertools
import json
import math
import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bamasc.cli import main
from bamasc.http.spend import SpendBook, TraceFollower, TraceLineError, read_trace
from bamasc.http.timeline import window_span
from bamasc.runtime.trace import TraceWriter, read_ledgers

DAY = 1768464000.0  # 2026-01-15T08:00:00Z
KEY_WINDOW = "key:alpha:1d@2026-01-15T00:00:00Z"
TEAM_WINDOW = "team:ops:1mo@2026-01-01T00:00:00Z"


def _write(path, records) -> str:
    path.write_text("".join(json.dumps(record) + "\n" for record in records), encoding="utf-8")
    return str(path)


def _summary(*paths: str, visible=None) -> dict:
    book = SpendBook()
    for path in paths:
        read_trace(book, path)
    return book.summary(visible)


def _proxy_lines(at) -> list[dict]:
    """Three calls of a key in its day window and its team's month, each reserved then settled; `at(n)` stamps
    the n-th line (None: no stamp, as an older bamasc wrote)."""
    lines = []
    for number, charged in enumerate((40.0, 25.5, 70.0)):
        lines.append({"type": "reserve", "id": f"r.{number}", "task_id": "alpha t1", "model": "m0", "reserved": 100.0,
                      "budget": 500, "levels": [KEY_WINDOW, TEAM_WINDOW], "level_budgets": [150.0, 4000.0]})
        lines.append({"type": "call", "id": f"r.{number}", "task_id": "alpha t1", "model": "m0", "reserved": 100.0,
                      "charged": charged})
    for number, line in enumerate(lines):
        if at(number) is not None:
            line["at"] = at(number)
    return lines


def test_a_stamped_trace_is_drawn_on_its_clock_with_its_cumulative_spend(tmp_path):
    lines = _proxy_lines(lambda number: DAY + 10 * number)
    timeline = _summary(_write(tmp_path / "p.jsonl", lines))["timeline"]
    assert timeline["axis"] == "time" and timeline["note"] is None
    money = [line for line in lines if line["type"] == "call" or line.get("budget")]
    # the first reserve grants the scope's budget; each call line adds its charge
    assert timeline["x"] == [line["at"] for line in money if line["type"] == "call" or line["id"] == "r.0"]
    charges = [0.0] + [line["charged"] for line in lines if line["type"] == "call"]
    assert timeline["spent"] == list(itertools.accumulate(charges))
    assert timeline["granted"] == [500.0] * 4


def test_lines_of_several_traces_are_put_in_time_order(tmp_path):
    early = _write(tmp_path / "a.jsonl", [{"type": "call", "task_id": "a", "charged": 1.0, "at": DAY + 5},
                                          {"type": "call", "task_id": "a", "charged": 2.0, "at": DAY + 20}])
    late = _write(tmp_path / "b.jsonl", [{"type": "call", "task_id": "b", "charged": 4.0, "at": DAY + 10}])
    timeline = _summary(early, late)["timeline"]
    assert (timeline["x"], timeline["spent"]) == ([DAY + 5, DAY + 10, DAY + 20], [1.0, 5.0, 7.0])


def test_an_older_run_resumed_by_a_newer_one_is_drawn_at_the_first_stamp(tmp_path):
    """Lines before the trace's first stamp (an older bamasc) take its time; an unstamped line after a stamped one
    takes the one before it. The page says how many lines were placed so."""
    lines = _proxy_lines(lambda number: None if number < 2 or number == 5 else DAY + number)
    summary = _summary(_write(tmp_path / "mixed.jsonl", lines))
    timeline = summary["timeline"]
    assert timeline["axis"] == "time"
    # r.0's grant and call (unstamped) at r.1's reserve, r.1's call at its own time, r.2's call at r.2's reserve
    assert timeline["x"] == [DAY + 2, DAY + 2, DAY + 3, DAY + 4]
    assert timeline["spent"] == [0.0, 40.0, 65.5, 135.5]
    assert "3 money lines carry no time" in timeline["note"]
    assert summary["totals"]["spent"] == 135.5


def test_a_trace_without_times_falls_back_to_line_order_and_says_so(tmp_path):
    timeline = _summary(_write(tmp_path / "old.jsonl", _proxy_lines(lambda number: None)))["timeline"]
    assert timeline["axis"] == "line" and timeline["x"] == [1, 2, 3, 4]
    assert timeline["spent"] == [0.0, 40.0, 65.5, 135.5]
    assert "records no times" in timeline["note"]


def test_a_window_is_drawn_against_its_limit_over_its_span(tmp_path):
    lines = _proxy_lines(lambda number: DAY + number)
    windows = {window["level"]: window for window in _summary(_write(tmp_path / "w.jsonl", lines))["windows"]}
    day = windows[KEY_WINDOW]
    assert (day["spent"], day["budget"]) == (135.5, 150.0)
    assert (day["start"], day["end"]) == (1768435200.0, 1768435200.0 + 86400)  # 2026-01-15, 00:00 to 24:00 UTC
    assert day["x"] == [DAY + 1, DAY + 3, DAY + 5] and day["y"] == [40.0, 65.5, 135.5]
    month = windows[TEAM_WINDOW]
    assert month["budget"] == 4000.0 and month["end"] - month["start"] == 31 * 86400
    assert window_span("key:alpha:fortnight@2026-01-15T00:00:00Z") is None and window_span("total") is None


@pytest.mark.parametrize("at, says", [
    ('"2026-01-15T08:00:00Z"', 'at = "2026-01-15T08:00:00Z", not a time'),
    ("-1", "at = -1, not a time"),
    ("true", "at = true, not a time"),
    ("NaN", "NaN is not a JSON number"),
    ("1e300", "the clock that wrote it was wrong"),
    ("32503680000", "the clock that wrote it was wrong"),  # the year 3000
])
def test_a_tampered_time_stops_the_report_at_its_file_and_line(tmp_path, capsys, at, says):
    path = tmp_path / "run.jsonl"
    path.write_text('{"type": "call", "task_id": "t", "charged": 1, "at": 1768464000.5}\n'
                    f'{{"type": "call", "task_id": "t", "charged": 1, "at": {at}}}\n', encoding="utf-8")
    with pytest.raises(TraceLineError, match=re.escape(f"{path}:2: ") + ".*" + re.escape(says)):
        _summary(str(path))
    out = tmp_path / "report.html"
    assert main(["report", str(path), "-o", str(out)]) == 1
    err = capsys.readouterr().err
    assert "run.jsonl:2: " in err and says in err and "Traceback" not in err and not out.exists()
    if at != "NaN":  # resuming reads money only: a bad time stops nothing there
        assert read_ledgers(str(path))["t"].charged == 2


def test_a_live_server_keeps_the_money_of_a_line_with_a_tampered_time(tmp_path):
    path = tmp_path / "live.jsonl"
    path.write_text('{"type": "call", "task_id": "t", "charged": 1, "at": 1768464000.5}\n'
                    '{"type": "call", "task_id": "t", "charged": 2, "at": "noon"}\n'
                    '{"type": "call", "task_id": "t", "charged": 4, "at": 32503680000}\n', encoding="utf-8")
    follower = TraceFollower(str(path))
    summary = follower.refresh().summary()
    assert summary["totals"]["spent"] == 7 and follower.bad == 0
    assert summary["timeline"]["x"] == [DAY + 0.5] * 3 and summary["timeline"]["spent"] == [1, 3, 7]
    assert "2 lines had an `at` that is not a time" in summary["timeline"]["note"]


def test_the_writer_stamps_every_line_with_its_clock(tmp_path):
    ticks = iter([DAY + 0.0004, DAY + 1.2344, DAY + 2])
    writer = TraceWriter(str(tmp_path / "t.jsonl"), clock=lambda: next(ticks))
    held = writer.reserve({"task_id": "t", "reserved": 5.0, "at": 1})  # a record cannot choose its own time
    writer.call({"id": held, "task_id": "t", "charged": 3.0})
    writer.task({"task_id": "t", "status": "ok"})
    writer.close()
    records = [json.loads(line) for line in (tmp_path / "t.jsonl").read_text().splitlines()]
    assert [record["at"] for record in records] == [DAY, DAY + 1.234, DAY + 2]
    assert [list(record)[:2] for record in records] == [["type", "at"]] * 3


@st.composite
def _stamped(draw):
    """Calls over two traces, each line stamped or not, in any clock order."""
    traces = [[], []]
    for _ in range(draw(st.integers(1, 20))):
        line = {"type": "call", "task_id": draw(st.sampled_from(["a", "b"])),
                "charged": draw(st.integers(0, 10_000)) / 100}
        if draw(st.booleans()):
            line["at"] = DAY + draw(st.integers(0, 10_000)) / 1000
        traces[draw(st.integers(0, 1))].append(line)
    return traces


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(_stamped())
def test_the_line_ends_at_the_traces_total_and_never_goes_back_in_time(tmp_path, traces):
    paths = [_write(tmp_path / f"{number}.jsonl", lines) for number, lines in enumerate(traces)]
    summary = _summary(*paths)
    timeline = summary["timeline"]
    charged = [line["charged"] for lines in traces for line in lines if line["charged"]]
    stamped_each = all(any("at" in line for line in lines) for lines in traces if any(l["charged"] for l in lines))
    assert timeline["axis"] == ("time" if stamped_each else "line")
    if charged:
        assert timeline["spent"][-1] == pytest.approx(sum(charged), abs=1e-6)
        assert all(later >= earlier for earlier, later in zip(timeline["spent"], timeline["spent"][1:]))
    if timeline["axis"] == "time":
        assert timeline["x"] == sorted(timeline["x"]) and all(math.isfinite(x) for x in timeline["x"])
    json.dumps(summary, allow_nan=False)
