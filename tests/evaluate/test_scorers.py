"""Scorers on the fixture items: every reference solution is correct, every perturbed answer is wrong."""

from __future__ import annotations

import os
import re

import pytest

from bamasc.evaluate.datasets import load
from bamasc.evaluate.scorers import code_program, math_equal, normalize_math, number_equal, score_items
from tests.conftest import ROOT

FIXTURES = os.path.join(ROOT, "tests", "fixtures", "datasets")


def dataset(name: str, kind: str):
    return load(os.path.join(FIXTURES, name), kind)


# ---------------------------------------------------------------- GSM8K


def test_gsm8k_reference_solutions_score_correct_and_perturbed_answers_wrong():
    items = dataset("gsm8k.jsonl", "gsm8k").items
    verdicts = score_items("gsm8k", [(item, item.solution) for item in items])
    assert all(v.correct for v in verdicts), [v.detail for v in verdicts if not v.correct]
    wrong = [(item, f"Working.\n#### {float(item.answer) + 1:g}") for item in items]
    assert not any(v.correct for v in score_items("gsm8k", wrong))
    assert not any(v.correct for v in score_items("gsm8k", [(item, None) for item in items]))


@pytest.mark.parametrize(
    "prediction, expected",
    [
        ("so the total is\n#### 15,000", True),
        ("#### $15000.00", True),
        ("The answer is \\boxed{15000}.", True),
        ("He saves 1,250 a month, 15000 dollars a year.", True),  # the last number
        ("#### 15000 dollars", True),
        ("#### 15000.0000001", False),  # numbers compare exactly, as decimals
        ("#### 15001", False),
        ("#### 1500", False),
        ("no number at all", False),
        ("#### -15000", False),
    ],
)
def test_gsm8k_number_forms(prediction, expected):
    assert number_equal(prediction, "15000")[0] is expected


# ---------------------------------------------------------------- MATH

EQUAL = [
    ("\\frac{1}{2}", "0.5"),
    ("\\frac12", "\\frac{1}{2}"),
    ("\\dfrac{3}{4}", "\\frac{3}{4}"),
    ("\\tfrac{2}{3}", "\\frac23"),
    ("\\left(1, 2\\right)", "(1,2)"),
    ("[2,5)", "\\left[2, 5\\right)"),
    ("10\\%", "10"),
    ("90^\\circ", "90"),
    ("90^{\\circ}", "90"),
    ("5 \\text{ cm}", "5"),
    ("12\\mbox{ inches}", "12"),
    ("4\\,\\text{m}", "4"),
    ("x = 3", "3"),
    ("k=7", "7"),
    ("\\sqrt2", "\\sqrt{2}"),
    (".5", "\\frac12"),
    ("3/4", "\\frac{3}{4}"),
    ("\\$18.90", "18.9"),
    ("1,000", "1000"),
    ("6", "6.0"),
    ("  7 ", "7"),
    ("\\text{(A)}", "(A)"),
    ("\\{1,2\\}", "\\{1, 2\\}"),
    ("2\\sqrt{3}", "\\sqrt{12}"),  # sympy
    ("\\frac{\\sqrt{3}}{3}", "\\frac{1}{\\sqrt{3}}"),  # sympy
    ("\\dfrac{1}{\\sqrt{2}}", "\\frac{\\sqrt{2}}{2}"),  # sympy
    ("x^2 + 2x + 1", "(x+1)^2"),  # sympy, with a variable
    ("\\pi/2", "\\frac{\\pi}{2}"),  # sympy
    ("\\frac{1}{2}\\pi", "\\frac{\\pi}{2}"),  # sympy
    ("-\\frac{1}{3}", "\\frac{-1}{3}"),  # sympy
    ("2^{10}", "1024"),  # sympy
    ("\\frac{9}{4}", "2.25"),  # sympy
    ("\\sqrt[3]{8}", "2"),  # sympy
    ("(3, -\\frac{1}{2})", "(3,-0.5)"),  # element by element
]

UNEQUAL = [
    ("\\frac{1}{3}", "0.33"),
    ("(1,2)", "(2,1)"),
    ("[2,5)", "(2,5)"),
    ("(1,2,3)", "(1,2)"),
    ("x^2", "x^3"),
    ("x+1", "x-1"),
    ("3", "-3"),
    ("\\sqrt{2}", "2"),
    ("10", "100"),
    ("\\frac{1}{2}", "\\frac{2}{1}"),
    ("\\frac{1}{2}", "\\frac{1}{4}"),
    ("2\\sqrt{3}", "3\\sqrt{2}"),
    ("\\pi", "3.14"),
    ("A", "B"),
    ("1,2", "12"),
    ("\\infty", "-\\infty"),
    ("preview(x)", "x"),  # not a function sympy may call
    ("__import__('os')", "0"),
]


@pytest.mark.parametrize("answer, reference", EQUAL)
def test_math_equal_pairs(answer, reference):
    assert math_equal(f"Therefore the answer is $\\boxed{{{answer}}}$.", reference)[0]
    assert math_equal(f"\\boxed{{{reference}}}", answer)[0]  # both ways round


@pytest.mark.parametrize("answer, reference", UNEQUAL)
def test_math_unequal_pairs(answer, reference):
    assert not math_equal(f"\\boxed{{{answer}}}", reference)[0]
    assert not math_equal(f"\\boxed{{{reference}}}", answer)[0]


def test_there_are_at_least_thirty_normalisation_pairs():
    assert len(EQUAL) + len(UNEQUAL) >= 30 and len(EQUAL) >= 15 and len(UNEQUAL) >= 15


def test_normalisation_steps():
    assert normalize_math("\\left( \\dfrac{1}{2}, 3 \\right)") == "(\\frac{1}{2},3)"
    assert normalize_math("\\frac1{72}") == "\\frac{1}{72}"
    assert normalize_math("0.50") == "\\frac{1}{2}"
    assert normalize_math("\\sqrt3") == "\\sqrt{3}"
    assert normalize_math("5\\%") == "5"


@pytest.mark.parametrize("name", ["math", "math500.jsonl"])
def test_math_reference_solutions_score_correct_and_perturbed_answers_wrong(name):
    items = dataset(name, "math").items
    verdicts = score_items("math", [(item, item.solution) for item in items])
    assert all(v.correct for v in verdicts), [v.detail for v in verdicts if not v.correct]
    perturbed = [(item, f"\\boxed{{{item.answer}+1}}") for item in items]
    assert not any(v.correct for v in score_items("math", perturbed))
    swapped = [(item, items[(i + 1) % len(items)].solution) for i, item in enumerate(items)]
    assert not any(v.correct for v in score_items("math", swapped))


# ---------------------------------------------------------------- MBPP


def broken(code: str) -> str:
    """The reference with its function redefined to return None."""
    name = re.search(r"def (\w+)\(", code).group(1)
    return f"{code}\n\ndef {name}(*args, **kwargs):\n    return None\n"


@pytest.mark.parametrize("name", ["mbpp.jsonl", "mbpp_sanitized.json"])
def test_mbpp_reference_code_passes_and_perturbed_code_fails(name):
    items = dataset(name, "mbpp").items
    fenced = [(item, f"Here it is:\n```python\n{item.answer}\n```") for item in items]
    verdicts = score_items("mbpp", fenced, concurrency=2)
    assert all(v.correct for v in verdicts), [v.detail for v in verdicts if not v.correct]
    wrong = score_items("mbpp", [(item, broken(item.answer)) for item in items], concurrency=2)
    assert not any(v.correct for v in wrong)
    # An assert that fails, or one that raises on None (math.isclose(None, ...)).
    assert all(v.detail.startswith(("failed: AssertionError", "error: TypeError")) for v in wrong)


def test_the_program_is_imports_candidate_setup_asserts():
    (item,) = [i for i in dataset("mbpp.jsonl", "mbpp").items if i.id == "15"]
    program = code_program("def word_counts(s):\n    return {}", item)
    assert program.index("def word_counts") < program.index("from collections import Counter") < program.index("assert")
    (circle,) = [i for i in dataset("mbpp_sanitized.json", "mbpp").items if i.id == "16"]
    assert code_program("pass", circle).startswith("import math\n")


def test_missing_and_empty_code_are_wrong_without_running():
    items = dataset("mbpp.jsonl", "mbpp").items[:2]
    verdicts = score_items("mbpp", [(items[0], None), (items[1], "   ")])
    assert [v.detail for v in verdicts] == ["no prediction", "no prediction"]


def test_score_one_row_by_the_systems_answer_kind():
    from bamasc.evaluate.scorers import score

    gsm8k_row = {"question": "q", "answer": "work\n#### 1,234"}
    assert score("number", "so #### 1234", gsm8k_row)
    assert not score("number", "so #### 1235", gsm8k_row)
    assert score("boxed", "it is \\boxed{\\frac12}", {"problem": "p", "solution": "so \\boxed{0.5}"})
    mbpp_row = {"task_id": 11, "text": "add one", "code": "def f(x): return x + 1", "test_list": ["assert f(1) == 2"]}
    assert score("code", "```python\ndef f(x):\n    return x + 1\n```", mbpp_row)
    assert not score("code", "```python\ndef f(x):\n    return x\n```", mbpp_row)
    assert score("text", "  Paris ", {"answer": "Paris"})


# ---------------------------------------------------------------- MBPP: the reference kit's extraction


@pytest.mark.parametrize(
    ("output", "first", "last"),
    [
        # Two blocks: the reference takes the first that parses, bamasc's default the last.
        ("```python\ndef f(x):\n    return x + 1\n```\nor\n```python\ndef f(x):\n    return x\n```",
         "def f(x):\n    return x + 1", "def f(x):\n    return x"),
        # The first block does not parse: the next one that does (the default prefers a python block).
        ("```python\ndef f(x) return\n```\n```\ndef f(x):\n    return 2\n```", "def f(x):\n    return 2",
         "def f(x) return"),
        # No block: the function salvaged from prose, with its imports.
        ("Here you go:\nimport math\ndef f(x):\n    return math.floor(x)\nThat is all.",
         "import math\n\ndef f(x):\n    return math.floor(x)", None),
        # Plain code is taken whole.
        ("def f(x):\n    return 3\n\nprint(f(1))", "def f(x):\n    return 3\n\nprint(f(1))", None),
    ],
)
def test_the_reference_extraction_takes_the_first_block_that_parses(output, first, last):
    from bamasc.runtime.extract import extract_code, extract_code_first

    assert extract_code_first(output) == first
    if last is not None:
        assert extract_code(output) == last


def test_the_mbpp_reference_scorer_reads_mbpp_and_nothing_else():
    from bamasc.evaluate.scorers import scorer_for

    assert scorer_for("mbpp", "mbpp-reference") == "mbpp-reference"
    with pytest.raises(ValueError, match="does not read gsm8k"):
        scorer_for("gsm8k", "mbpp-reference")
