"""Seat problems refuse malformed input at construction, `replace` included."""

from __future__ import annotations

import pytest

from bamasc.optimize.problem import RequireRow
from bamasc.records import FrozenRecordError, replace
from tests.optimize.problems import paper_pool


def test_malformed_problems_are_rejected():
    with pytest.raises(ValueError, match="lo <= hi"):
        replace(paper_pool(), lo=(6,))
    with pytest.raises(ValueError, match="one row per instance"):
        replace(paper_pool(), hi=(4,))
    with pytest.raises(ValueError, match="sense"):
        RequireRow(((0, None, 1),), "<", 1)
    with pytest.raises(ValueError, match="outside the problem"):
        replace(paper_pool(), excluded=(((0, 5, 0),),))


def test_a_problem_is_frozen_and_fills_in_quality():
    problem = paper_pool()
    assert problem.quality == ((1.0, 1.0),)
    with pytest.raises(FrozenRecordError):
        problem.budget = 1.0
    assert replace(problem, budget=2000.0) == paper_pool(2000.0)
