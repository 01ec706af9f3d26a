"""The whole budget in `exec`: a tool loop's rounds bounded by what its earlier rounds were billed.

One task whose tool loop outlasts its budget, on a model whose tokenizer is
not known and whose upstream bills a token per 4 bytes (tests/helpers/
calibration.py): the loop ends with its final round answering and at most a
tenth of the budget left, never over it; with the byte bound alone (nothing
remembered) it ended far earlier.
"""

from __future__ import annotations

import pytest

from tests.helpers.calibration import exec_loop

pytest.importorskip("jsonschema", reason="tools check their arguments with jsonschema (the mcp extra)")

BUDGET = 8000.0  # µ$: about twenty rounds of the loop


@pytest.mark.parametrize("budget", [BUDGET, BUDGET * 1.7])
def test_a_tool_loop_spends_at_least_nine_tenths_of_its_budget_and_never_more(tmp_path, budget):
    result, guard = exec_loop(tmp_path, budget)
    assert result.status == "ok" and result.answer, result.error
    assert not guard.overbilled and guard.held == 0
    assert budget * 0.9 <= guard.charged <= budget


def test_the_byte_bound_alone_ends_it_far_earlier(tmp_path):
    _, calibrated = exec_loop(tmp_path, BUDGET)
    _, bytes_only = exec_loop(tmp_path, BUDGET, calibrated=False)
    assert bytes_only.charged < BUDGET * 0.8 < calibrated.charged
