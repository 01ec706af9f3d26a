"""No MATH scorer credits an answer that is the gold answer plus a stray token.

The golds are the 500 answers of MATH-500 (the test subset of Hendrycks et
al.'s MATH used by PRM800K), in fixtures/datasets/math500_answers.jsonl. Before
this check the lenient scorer read `\\frac{14}{3}1` as (14/3)·1, `3\\sqrt{13}1` as
3·√13·1 and `01` as 0·1, and credited 89 of 500 answers with a `1` appended.
"""

from __future__ import annotations

import json
import os
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bamasc.evaluate.math_strict import strict_math_equal
from bamasc.evaluate.scorers import math_equal, score_items
from tests.conftest import ROOT

ANSWERS = os.path.join(ROOT, "tests", "fixtures", "datasets", "math500_answers.jsonl")
GOLDS = [json.loads(line)["answer"] for line in open(ANSWERS, encoding="utf-8")]
SCORERS = {"math": math_equal, "math-strict": strict_math_equal}

# One token of junk: a digit, a letter, a constant.
STRAY = [*"0123456789", *"abcnxyzieE", "\\pi", "\\infty"]

# A trailing unit (`5.4 \text{ cents}`): the junk goes after the value, before the unit; after the
# unit it would be part of the unit's text, which both scorers drop by the benchmark's own rule.
_UNIT = re.compile(r"\s*\\(?:text|mbox)\{ [^{}]*\}(?:\^\d)?$")


def with_junk(gold: str, junk: str) -> str:
    unit = _UNIT.search(gold)
    if unit and unit.start() > 0:
        return gold[: unit.start()] + junk + gold[unit.start() :]
    return gold + junk


def same_number(gold: str, junk: str) -> bool:
    """`1.25` + `0` is `1.250`: the same decimal written with one more zero, not a different answer."""
    value = _UNIT.sub("", gold).replace("\\$", "")
    return junk == "0" and re.fullmatch(r"-?\d*\.\d+", value) is not None


def test_there_are_500_golds():
    assert len(GOLDS) == 500


@pytest.mark.parametrize("scorer", sorted(SCORERS))
def test_gold_plus_a_stray_token_is_never_the_gold(scorer):
    equal = SCORERS[scorer]
    credited = [
        (gold, junk)
        for gold in GOLDS
        for junk in STRAY
        if not same_number(gold, junk) and equal(with_junk(gold, junk), gold)[0]
    ]
    assert credited == []


@pytest.mark.parametrize("scorer", sorted(SCORERS))
def test_every_gold_still_equals_itself(scorer):
    assert [gold for gold in GOLDS if not SCORERS[scorer](gold, gold)[0]] == []


@settings(max_examples=200, deadline=None)
@given(gold=st.sampled_from(GOLDS), junk=st.sampled_from(STRAY), boxed=st.booleans())
def test_boxed_or_bare_the_verdict_is_the_same(gold, junk, boxed):
    prediction = with_junk(gold, junk)
    if same_number(gold, junk):
        return
    text = f"So the answer is $\\boxed{{{prediction}}}$." if boxed else prediction
    for scorer in SCORERS.values():
        assert not scorer(text, gold)[0]


@pytest.mark.parametrize(
    ("prediction", "gold"),
    [("\\frac{14}{3}1", "\\frac{14}{3}"), ("3\\sqrt{13}1", "3\\sqrt{13}"), ("01", "0"), ("0a", "0"), ("0\\pi", "0")],
)
def test_the_reported_cases_are_wrong_through_score_items(prediction, gold):
    from bamasc.evaluate.datasets import Item

    item = Item(id="x", prompt="q", answer=gold)
    for scorer in SCORERS:
        assert not score_items("math", [(item, prediction)], scorer=scorer)[0].correct


@pytest.mark.parametrize(
    ("prediction", "gold"),
    [("864", "864 \\mbox{ inches}^2"), ("15", "15\\mbox{ cm}^2"), ("2x", "x \\cdot 2"), ("1.250", "1.25")],
)
def test_units_and_values_still_match(prediction, gold):
    assert math_equal(prediction, gold)[0]
