"""GSM8K numbers compare exactly: a whole-number reference wants that number, a decimal one its exact value."""

from __future__ import annotations

import pytest

from bamasc.evaluate.scorers import number_equal


@pytest.mark.parametrize(
    "prediction, reference, expected",
    [
        ("#### 1450001", "1450000", False),  # within a relative 1e-6 as floats
        ("#### 1450000", "1450000", True),
        ("#### 1,450,000.00", "1450000", True),
        ("#### 1.45e6", "1450000", True),
        ("#### 10000000000000001", "10000000000000000", False),  # the same float
        ("#### 0.30", "0.3", True),
        ("#### .3", "0.3", True),
        ("#### 0.3000001", "0.3", False),
        ("#### 0.1", "0.3", False),
        ("#### -2.5", "-2.5", True),
        ("#### 2.5", "-2.5", False),
        ("#### 7", "7.0", True),
    ],
)
def test_numbers_compare_exactly(prediction, reference, expected):
    assert number_equal(prediction, reference)[0] is expected


def test_no_number_is_wrong_not_an_error():
    assert number_equal("#### none", "5") == (False, None)
    assert number_equal(None, "5") == (False, None)
