"""Hendrycks-strict MATH scoring: pairs reasoned out by hand from the MATH scorer's rules, and hostile inputs."""

from __future__ import annotations

import pytest

from bamasc.evaluate.datasets import Item
from bamasc.evaluate.math_strict import equivalent, last_boxed, strict_math_equal, strip_string
from bamasc.evaluate.scorers import math_equal, score_items, scorer_for

# (model output, reference answer): equal under the strict check, each by the rule named.
EQUAL = [
    ("\\boxed{\\frac12}", "\\frac{1}{2}"),  # \frac12 -> \frac{1}{2}
    ("\\boxed{\\frac1{72}}", "\\frac{1}{72}"),  # one-character numerator braced
    ("\\boxed{0.5}", "\\frac{1}{2}"),  # 0.5 is written \frac{1}{2}
    ("\\boxed{.5}", "\\frac12"),  # a leading "." gets its 0, then 0.5
    ("\\boxed{1/2}", "0.5"),  # both become \frac{1}{2}
    ("\\boxed{\\dfrac{3}{4}}", "3/4"),  # dfrac -> frac; a/b of whole numbers -> \frac{a}{b}
    ("\\boxed{\\tfrac{1}{3}}", "\\frac{1}{3}"),
    ("\\boxed{-1/2}", "\\frac{-1}{2}"),
    ("\\boxed{x = 5}", "5"),  # "x " is at most two characters before the one "="
    ("\\boxed{k=-1}", "-1"),
    ("\\boxed{y = 2x + 1}", "2x+1"),  # then the spaces go
    ("\\boxed{90^\\circ}", "90"),
    ("\\boxed{90^{\\circ}}", "90"),
    ("\\boxed{\\$18.90}", "18.90"),
    ("\\boxed{10\\%}", "10"),
    ("\\boxed{5\\text{ cm}}", "5"),  # everything from "\text{ " on is a unit
    ("\\boxed{\\left( 3, 4 \\right)}", "(3,4)"),
    ("\\boxed{\\sqrt2}", "\\sqrt{2}"),
    ("\\boxed{\\frac{\\sqrt{3}}{2}}", "\\frac{\\sqrt3}{2}"),
    ("\\boxed{\\frac{1}{\\sqrt{2}}}", "\\frac{1}{\\sqrt{2}}"),  # nested braces, balanced
    ("\\boxed{1\n2}", "12"),  # line breaks go
    ("\\boxed{\\!1,\\!000}", "1,000"),
    ("\\boxed{a\\\\b}", "a\\b"),  # a double backslash is one
    ("first \\boxed{1}, then \\boxed{2}", "2"),  # the last box
    ("\\fbox{7}", "7"),  # \fbox where there is no \boxed
    ("so \\boxed 5$.", "5"),  # \boxed and a space: up to the next $
    ("42", "42"),  # an answer already extracted (what bench passes)
    ("\\boxed{7}", "\\boxed{7}"),  # a reference written with its box
]

# Not equal under the strict check, though a reader (or the lenient scorer) might say they are.
NOT_EQUAL = [
    ("\\boxed{0.50}", "\\frac{1}{2}"),  # only "0.5" itself becomes a fraction
    ("\\boxed{\\frac{1}2}", "\\frac{1}{2}"),  # a \frac{ is left as written
    ("\\boxed{2}", "2.0"),
    ("\\boxed{1000}", "1,000"),  # commas stay
    ("\\boxed{10%}", "10"),  # only \% goes, not a bare %
    ("\\boxed{5 cm}", "5"),  # a unit needs "\text{ "
    ("\\boxed{5\\text{cm}}", "5"),  # ... with its space
    ("\\boxed{abc = 5}", "5"),  # more than two characters before "="
    ("\\boxed{01/2}", "\\frac{1}{2}"),  # 01 is not how int writes 1
    ("\\boxed{+3/4}", "\\frac{3}{4}"),
    ("\\boxed{-1/2}", "-\\frac{1}{2}"),
    ("\\boxed{\\pi}", "3.14159"),  # nothing is evaluated
    ("\\boxed{x+1}", "1+x"),
    ("\\boxed{\\frac}", "1"),  # normalising gives up: the strings as written differ
    ("\\boxed{5\\text{ cm}\\text{ m}}", "5"),  # two units: gives up
    ("\\boxed{\\sqrt}", "\\sqrt{}"),
]

HOSTILE = [
    None,
    "",
    "The answer is 5",  # no box: compared whole, and it is not the answer
    "\\boxed{5",  # a box that never closes is no answer
    "\\boxed{5}}}}\\boxed{{{{",
    "\\boxed",
    "\\fbox{",
    "\\boxed{" * 100_000,
    "x" * 2_000_000 + "\\boxed{",
    "\\boxed{" + "{" * 50_000 + "}" * 49_999,
    "\\boxed{\\frac\\frac\\frac}",
    "\\boxed{\\sqrt\\sqrt}",
    "\\boxed{" + "/" * 10_000 + "}",
    "\\boxed{" + "=" * 10_000 + "}",
    "\\boxed{\ud800}",  # a lone surrogate
    "\x00\\boxed{\x00}",
]


@pytest.mark.parametrize("output, reference", EQUAL)
def test_equal_pairs(output, reference):
    correct, found = strict_math_equal(output, reference)
    assert correct, (output, reference, found)


@pytest.mark.parametrize("output, reference", NOT_EQUAL)
def test_unequal_pairs(output, reference):
    assert strict_math_equal(output, reference)[0] is False


def test_strict_and_lenient_disagree_where_the_benchmark_does_not_evaluate():
    # The lenient scorer fixes \frac{1}2 and trims 0.50; Hendrycks' check does neither.
    for output, reference in [("\\boxed{\\frac{1}2}", "\\frac{1}{2}"), ("\\boxed{0.50}", "\\frac{1}{2}")]:
        assert math_equal(output, reference)[0] and not strict_math_equal(output, reference)[0]


@pytest.mark.parametrize("output", HOSTILE, ids=range(len(HOSTILE)))
def test_hostile_outputs_score_zero_without_raising(output):
    assert strict_math_equal(output, "5")[0] is False


def test_a_huge_boxed_answer_is_read_whole():
    digits = "7" * 1_000_000
    assert strict_math_equal(f"so \\boxed{{{digits}}}", digits) == (True, digits)
    assert strict_math_equal(f"so \\boxed{{{digits}}}", digits + "7")[0] is False


def test_the_rules_one_by_one():
    assert strip_string("\\left(\\frac12, 3\\right)") == "(\\frac{1}{2},3)"
    assert strip_string(" .25") == "0.25"  # " ." gets its zero; the space goes later
    assert strip_string("{.25}") == "{0.25}"
    assert strip_string("") == ""
    assert last_boxed("\\boxed{a} \\fbox{b}") == "a"  # \boxed wins over a later \fbox
    assert last_boxed("\\boxed{\\frac{1}{2}} tail") == "\\frac{1}{2}"
    assert last_boxed("\\boxed{1") is None and last_boxed("none") is None
    # A rule that cannot apply compares the strings as written, as the original does.
    assert equivalent("\\frac", "\\frac") and not equivalent("\\frac", "\\frac ")


def test_score_items_picks_the_strict_scorer_by_name():
    item = Item("1", "Half of 1?", "\\frac{1}{2}")
    outputs = ["\\boxed{0.50}", "\\boxed{0.5}", None]
    strict = score_items("math", [(item, output) for output in outputs], scorer="math-strict")
    lenient = score_items("math", [(item, output) for output in outputs])
    assert [v.correct for v in strict] == [False, True, False]
    assert [v.correct for v in lenient] == [True, True, False]
    assert strict[0].detail == "0.50 is not \\frac{1}{2}" and strict[2].detail == "no prediction"


def test_a_scorer_reads_only_its_kind():
    assert scorer_for("math", None) == "math" and scorer_for("math", "math-strict") == "math-strict"
    for kind, scorer in [("gsm8k", "math-strict"), ("mbpp", "math"), ("math", "gsm8k")]:
        with pytest.raises(ValueError, match="does not read"):
            scorer_for(kind, scorer)
