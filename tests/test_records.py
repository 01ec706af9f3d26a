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


@record
class Mixed:
    first: int
    second: str = "b"
    third: tuple = ()  # a field without a default after one with a default is allowed
    fourth: float = 0.5


@record
class Late:
    head: int
    middle: int = 1
    tail: int  # no default, after one that has a default


def test_the_compiled_constructor_behaves_as_the_generic_one():
    # A class constructed often enough compiles its own `__init__`: before and after, the same answers.
    from bamasc import records

    for _ in range(records.COMPILE_AFTER + 1):
        assert Mixed(1) == Mixed(first=1, second="b", third=(), fourth=0.5)
        assert Mixed(1, "x", (2,)).third == (2,)
        assert Mixed(1, fourth=2.0).fourth == 2.0
        assert Late(1, tail=3) == Late(head=1, middle=1, tail=3)
        assert Late(1, 2, 3).tail == 3
        with pytest.raises(TypeError, match="missing argument 'tail'"):
            Late(1)
        with pytest.raises(TypeError):
            Mixed()
        with pytest.raises(TypeError):
            Mixed(1, "b", (), 0.5, "extra")
        with pytest.raises(TypeError):
            Mixed(1, colour="red")
        with pytest.raises(ValueError, match="not 0"):
            Positive(0)
    assert Mixed.__init__ is not records._init_first and Late.__init__ is not records._init_first
    assert Positive.__init__ is not records._init_first


def test_records_pickle_and_hash_after_compiling():
    import pickle

    from bamasc import records

    for _ in range(records.COMPILE_AFTER):
        Late(0, tail=0)
    value = Late(1, tail=5)
    assert pickle.loads(pickle.dumps(value)) == value
    assert hash(Late(1, tail=5)) == hash(value)
    assert repr(value) == "Late(head=1, middle=1, tail=5)"
