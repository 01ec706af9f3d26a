"""`{{history}}` and its cap: lint refuses a history without one (BAM225), and every call's bound counts the cap."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import bamasc
from bamasc.lint import lint_paths
from bamasc.runtime.threads import history_within
from tests.helpers.threads import DESK, HISTORY_CAP


def _desk(tmp_path, text: str) -> str:
    path = tmp_path / "desk.bam"
    path.write_text(text.replace("LATENCY", ""), encoding="utf-8")
    return str(path)


def _codes(path: str) -> list[str]:
    return [d.code for d in lint_paths([path]).diagnostics]


def test_a_history_without_a_cap_is_bam225(tmp_path):
    uncapped = DESK.replace(f"  history    = {HISTORY_CAP}\n", "")
    assert "BAM225" in _codes(_desk(tmp_path, uncapped))
    assert "BAM206" not in _codes(_desk(tmp_path, uncapped))  # the history is named, only its cap is missing
    assert _codes(_desk(tmp_path, DESK)) == []  # capped, and required: every call of the role gets one


def test_a_cap_that_is_no_token_count_is_refused(tmp_path):
    assert "BAM207" in _codes(_desk(tmp_path, DESK.replace(f"history    = {HISTORY_CAP}", "history    = -3")))


def test_every_call_bound_counts_the_history_cap(tmp_path):
    capped = bamasc.load(_desk(tmp_path, DESK)).compile()
    (tmp_path / "small").mkdir()
    smaller = DESK.replace(f"history    = {HISTORY_CAP}", "history    = 100")
    small = bamasc.load(_desk(tmp_path / "small", smaller)).compile()
    # One call per task, at 1 µ$ per input token: the bounds differ by exactly the caps' difference.
    assert capped.bound - small.bound == pytest.approx((HISTORY_CAP - 100) * 1.0)


@settings(max_examples=200, deadline=None)
@given(st.text(), st.integers(min_value=1, max_value=64))
def test_a_history_is_cut_to_its_cap_in_bytes_keeping_its_end(text, cap):
    cut = history_within(text, cap)
    assert len(cut.encode("utf-8")) <= cap
    assert text.endswith(cut)
    if len(text.encode("utf-8")) <= cap:
        assert cut == text
    else:  # at most a character's bytes short of the cap
        assert len(cut.encode("utf-8")) > cap - 4
