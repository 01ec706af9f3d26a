"""Frozen records: a record that defines `__post_init__` checks itself on every construction."""

from __future__ import annotations

import pytest

from bamasc.records import FrozenRecordError, record, replace


@record
class Positive:
    value: int
    label: str = "n"

    def __post_init__(self) -> None:
        if self.value < 1:
            raise ValueError(f"need at least 1, not {self.value}")


def test_post_init_runs_on_construction_and_on_replace():
    assert Positive(3).value == 3
    with pytest.raises(ValueError, match="not 0"):
        Positive(0)
    with pytest.raises(ValueError, match="not -2"):
        replace(Positive(3), value=-2)
    assert replace(Positive(3), label="m") == Positive(3, "m")


def test_records_stay_frozen():
    with pytest.raises(FrozenRecordError):
        Positive(3).value = 4
