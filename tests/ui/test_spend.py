"""The spend summary (bamasc/http/spend.py) and `bamasc report` without a browser: the totals against sums made
here from the trace, hostile lines named by file and line, HTML from trace text escaped, a key's view its own."""

from __future__ import annotations

import json
import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bamasc.cli import main
from bamasc.http.spend import SpendBook, TraceFollower, TraceLineError, read_trace

HOSTILE_ID = '<img src=x onerror="window.__pwned=1">'
HOSTILE_WHY = "</script><script>window.__pwned=2</script>"

# A proxy's trace, written out by hand: two keys of one team, one refusal, one reservation still open.
PROXY_LINES = [
    {"type": "budget", "task_id": "alpha t1", "budget": 500, "run": "r1"},
    {"type": "reserve", "id": "r1.1", "task_id": "alpha t1", "model": "m0", "reserved": 120.5, "budget": 500,
     "levels": ["key:alpha:1d@2027-01-15T00:00:00Z", "team:ops:1mo@2027-01-01T00:00:00Z"]},
    {"type": "call", "id": "r1.1", "task_id": "alpha t1", "model": "m0", "reserved": 120.5, "charged": 40.25,
     "outcome": "settled", "thread": "a later field"},
    {"type": "reserve", "id": "r1.2", "task_id": "beta t9", "model": "m1", "reserved": 80.0, "budget": 300,
     "levels": ["key:beta:1d@2027-01-15T00:00:00Z"]},
    {"type": "call", "id": "r1.2", "task_id": "beta t9", "model": "m1", "reserved": 80.0, "charged": 80.0,
     "outcome": "kept", "error": "upstream status 500"},
    {"type": "call", "task_id": "beta t9", "model": "m1", "prompt_tokens": 9, "completion_tokens": 0, "reserved": 0.0,
     "charged": 0.0, "skipped": True, "outcome": "refused", "error": "scope 'beta t9' has 0.00 µ$ left"},
    {"type": "reserve", "id": "r1.3", "task_id": "alpha t2", "model": "m0", "reserved": 33.0, "budget": 500},
]


def _write(path, records, tail: str = "") -> str:
    path.write_text("".join(json.dumps(record) + "\n" for record in records) + tail, encoding="utf-8")
    return str(path)


def _book(path: str) -> SpendBook:
    book = SpendBook()
    read_trace(book, path)
    return book


def test_a_proxy_trace_is_summed_by_key_team_window_and_model(tmp_path):
    summary = _book(_write(tmp_path / "proxy.jsonl", PROXY_LINES)).summary()
    totals = summary["totals"]
    assert (totals["spent"], totals["held"], totals["refused"], totals["attempts"]) == (120.25, 33.0, 1, 2)
    assert totals["scopes_by_status"] == {"open": 2, "refused": 1} and totals["tasks"] == 0
    assert totals["budgets"] == 500 + 300 + 500
    assert summary["by_model"] == {"m1": 80.0, "m0": 40.25}
    assert summary["by_key"] == {"beta": 80.0, "alpha": 40.25} and summary["by_team"] == {"ops": 40.25}
    assert {window["level"]: window["spent"] for window in summary["windows"]} == {
        "key:alpha:1d@2027-01-15T00:00:00Z": 40.25, "team:ops:1mo@2027-01-01T00:00:00Z": 40.25,
        "key:beta:1d@2027-01-15T00:00:00Z": 80.0}
    assert summary["refusals"] == [{"task_id": "beta t9", "source": str(tmp_path / "proxy.jsonl"), "key": "beta",
                                    "model": "m1", "node": None, "why": "scope 'beta t9' has 0.00 µ$ left"}]
    assert summary["timeline"]["spent"][-1] == 120.25
    assert [task["task_id"] for task in summary["dearest"]][:2] == ["beta t9", "alpha t1"]


def test_a_key_sees_its_own_scopes_and_nothing_of_another_key(tmp_path):
    summary = _book(_write(tmp_path / "proxy.jsonl", PROXY_LINES)).summary(lambda task: task.key == "alpha")
    text = json.dumps(summary)
    assert "beta" not in text and "m1" not in text
    assert summary["totals"]["spent"] == 40.25 and summary["totals"]["held"] == 33.0
    assert summary["totals"]["refused"] == 0 and summary["refusals"] == []


def test_an_exec_trace_counts_tasks_by_status_and_cost_against_the_bound(tmp_path):
    lines = [
        {"type": "reserve", "id": "a.1", "task_id": "t1", "node": "w[0]@1.answer", "model": "fast", "attempt": 1,
         "reserved": 100},
        {"type": "call", "id": "a.1", "task_id": "t1", "node": "w[0]@1.answer", "role": "W", "model": "fast",
         "reserved": 100, "charged": 45, "latency_ms": 1200.0, "attempt": 1, "skipped": False, "error": None},
        {"type": "task", "task_id": "t1", "status": "ok", "cost": 45, "budget": 200, "bound": 100,
         "template": "solo", "elapsed_s": 1.3},
        {"type": "call", "id": None, "task_id": "t2", "node": "w[0]@1.answer", "role": "W", "model": "fast",
         "reserved": 0, "charged": 0, "latency_ms": 0, "attempt": 1, "skipped": True, "error": "budget: no room"},
        {"type": "task", "task_id": "t2", "status": "exhausted", "cost": 0, "budget": 200, "bound": 100,
         "template": "solo", "elapsed_s": 0.01},
        {"type": "reserve", "id": "a.2", "task_id": "t3", "node": "w[0]@1.answer", "model": "fast", "attempt": 1,
         "reserved": 70},
    ]
    summary = _book(_write(tmp_path / "exec.jsonl", lines)).summary()
    totals = summary["totals"]
    assert totals["tasks_by_status"] == {"exhausted": 1, "ok": 1, "unfinished": 1} and totals["scopes"] == 0
    assert (totals["spent"], totals["held"], totals["refused"]) == (45, 70, 1)
    assert summary["by_template"] == {"solo": 45.0, "(unfinished)": 0.0}
    ratios = summary["ratios"]
    assert ratios["measured"] == 2 and ratios["counts"][0] == 1 and ratios["counts"][9] == 1  # 0% and 45%
    assert summary["slowest"][0]["task_id"] == "t1" and summary["slowest"][0]["calls"][0]["ms"] == 1200.0


@pytest.mark.parametrize("line, says", [
    ("{not json", "not JSON"),
    ('{"type": "call", "task_id": "t", "charged": -5}', "charged = -5, not an amount"),
    ('{"type": "call", "task_id": "t", "charged": "5"}', 'charged = "5", not an amount'),
    ('{"type": "call", "task_id": "t", "charged": NaN}', "NaN is not a JSON number"),
    ('{"type": "call", "charged": 1}', "call line without a task_id"),
    ('{"type": "payout", "task_id": "t"}', 'unknown record type "payout"'),
    ('{"type": "reserve", "task_id": "t", "reserved": 5}', "reserve line without an id"),
    ('{"type": "task", "task_id": "t", "budget": -1}', "budget = -1, not a number"),
    ('{"type": "call", "task_id": "t", "charged": 1, "latency_ms": "fast"}', 'latency_ms = "fast"'),
    ('[1, 2]', "not a trace record (a JSON object)"),
])
def test_a_tampered_line_is_named_by_file_and_line(tmp_path, capsys, line, says):
    path = tmp_path / "run.jsonl"
    path.write_text(json.dumps(PROXY_LINES[0]) + "\n" + line + "\n" + json.dumps(PROXY_LINES[1]) + "\n",
                    encoding="utf-8")
    with pytest.raises(TraceLineError, match=re.escape(f"{path}:2: ") + ".*" + re.escape(says)):
        _book(str(path))
    out = tmp_path / "report.html"
    assert main(["report", str(path), "-o", str(out)]) == 1
    err = capsys.readouterr().err
    assert f"run.jsonl:2: " in err and says in err and "Traceback" not in err
    assert not out.exists()


def test_a_task_of_many_calls_lists_its_last_calls_and_counts_every_one(tmp_path):
    lines = [{"type": "call", "task_id": "busy", "model": f"m{number % 2}", "reserved": 2, "charged": 1}
             for number in range(300)]
    summary = _book(_write(tmp_path / "busy.jsonl", lines)).summary()
    assert summary["by_model"] == {"m0": 150.0, "m1": 150.0} and summary["totals"]["spent"] == 300
    assert 0 < len(summary["dearest"][0]["calls"]) < 300 and summary["dearest"][0]["attempts"] == 300


def test_a_torn_last_line_is_skipped_as_a_crash_leaves_it(tmp_path):
    path = _write(tmp_path / "torn.jsonl", PROXY_LINES, tail='{"type": "call", "task_id": "alpha t1", "char')
    assert _book(path).summary()["totals"]["spent"] == 120.25


def test_the_command_needs_its_traces_and_a_writable_output(tmp_path, capsys):
    assert main(["report", str(tmp_path / "absent.jsonl"), "-o", str(tmp_path / "r.html")]) == 2
    trace = _write(tmp_path / "proxy.jsonl", PROXY_LINES)
    assert main(["report", trace, "-o", str(tmp_path)]) == 2
    assert "no such file" in capsys.readouterr().err


def test_trace_text_cannot_break_out_of_the_page(tmp_path):
    pytest.importorskip("plotly", reason="the report extra (plotly) is not installed")
    lines = [{**PROXY_LINES[5], "task_id": HOSTILE_ID, "error": HOSTILE_WHY, "model": "<b>m</b>"}]
    out = tmp_path / "report.html"
    assert main(["report", _write(tmp_path / "evil.jsonl", lines), "-o", str(out), "--title", "<i>t</i>"]) == 0
    page = out.read_text(encoding="utf-8")
    assert "<img src=x" not in page and "window.__pwned" in page  # there, but only as escaped JSON
    assert page.count("</script>") == page.count("<script")  # no script element closed early
    assert "<i>t</i>" not in page and "&lt;i&gt;t&lt;/i&gt;" in page
    data = page.split('id="bamasc-summary">', 1)[1].split("</script>", 1)[0]
    assert json.loads(data)["refusals"][0]["why"] == HOSTILE_WHY


def test_a_follower_reads_whole_lines_as_they_come_and_counts_bad_ones(tmp_path):
    path = tmp_path / "live.jsonl"
    path.write_text(json.dumps(PROXY_LINES[1]) + "\n" + json.dumps(PROXY_LINES[2])[:20], encoding="utf-8")
    follower = TraceFollower(str(path))
    assert follower.refresh().summary()["totals"]["held"] == 120.5
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(json.dumps(PROXY_LINES[2])[20:] + "\n" + "garbage\n")
    summary = follower.refresh().summary()
    assert (summary["totals"]["spent"], summary["totals"]["held"], follower.bad) == (40.25, 0.0, 1)


_amounts = st.integers(0, 10_000).map(lambda cents: cents / 100)


@st.composite
def _traces(draw):
    """A family of traces: reservations settled, refused, or left open, over a few scopes and models."""
    records, expected = [], {"spent": 0.0, "held": 0.0, "refused": 0}
    for number in range(draw(st.integers(0, 25))):
        scope = draw(st.sampled_from(["k1 a", "k2 b", "t3", HOSTILE_ID]))
        model = draw(st.sampled_from(["m0", "m1"]))
        ending = draw(st.sampled_from(["settled", "refused", "open"]))
        reserved, charged = draw(_amounts), draw(_amounts)
        if ending == "refused":
            records.append({"type": "call", "task_id": scope, "model": model, "reserved": 0, "charged": 0,
                            "skipped": True, "error": draw(st.text(max_size=20))})
            expected["refused"] += 1
            continue
        records.append({"type": "reserve", "id": f"x.{number}", "task_id": scope, "model": model,
                        "reserved": reserved, "budget": 1000})
        if ending == "settled":
            records.append({"type": "call", "id": f"x.{number}", "task_id": scope, "model": model,
                            "reserved": reserved, "charged": charged, "extra": draw(st.text(max_size=5))})
            expected["spent"] += charged
        else:
            expected["held"] += reserved
    return records, expected


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(_traces())
def test_the_totals_are_the_traces_sums_for_any_family_of_lines(tmp_path, trace):
    records, expected = trace
    summary = _book(_write(tmp_path / "family.jsonl", records)).summary()
    totals = summary["totals"]
    assert totals["spent"] == pytest.approx(expected["spent"], abs=1e-6)
    assert totals["held"] == pytest.approx(expected["held"], abs=1e-6)
    assert totals["refused"] == expected["refused"]
    assert sum(summary["by_model"].values()) == pytest.approx(expected["spent"], abs=1e-5)
    json.dumps(summary, allow_nan=False)  # what the page embeds is plain JSON
