"""Dataset loaders on fixtures in each published format: items, ids, references, and bad rows named by file, line and field."""

from __future__ import annotations

import json
import os

import pytest

from bamasc.evaluate.datasets import DatasetError, load
from tests.conftest import ROOT

FIXTURES = os.path.join(ROOT, "tests", "fixtures", "datasets")


def fixture(name: str) -> str:
    return os.path.join(FIXTURES, name)


def test_gsm8k_jsonl():
    dataset = load(fixture("gsm8k.jsonl"), "gsm8k")
    assert [item.id for item in dataset.items] == ["1", "2", "3", "4", "5", "6"]
    assert [item.answer for item in dataset.items] == ["12", "110", "23", "150", "7", "15000"]
    first = dataset.items[0]
    assert first.prompt.startswith("A baker makes 24 muffins")
    assert first.solution.endswith("#### 12")
    assert first.source.endswith("gsm8k.jsonl:1")
    assert dataset.problems == []


def test_a_bad_gsm8k_row_names_file_line_and_field():
    path = fixture("gsm8k_bad.jsonl")
    with pytest.raises(DatasetError, match=r"gsm8k_bad.jsonl:2: field 'answer': is missing"):
        load(path, "gsm8k")
    dataset = load(path, "gsm8k", skip_bad=True)
    # Everything else is kept: the good first and last rows, under their line numbers.
    assert [item.id for item in dataset.items] == ["1", "7"]
    found = [(p.line, p.field) for p in dataset.problems]
    assert found == [(2, "answer"), (3, "answer"), (4, None), (5, "answer")]
    assert "does not end with '#### <number>'" in str(dataset.problems[1])
    assert "not JSON" in str(dataset.problems[2])
    assert "'#### many' is not a number" in str(dataset.problems[3])


def test_mbpp_jsonl_and_the_paper_split():
    dataset = load(fixture("mbpp.jsonl"), "mbpp")
    assert [item.id for item in dataset.items] == ["11", "12", "13", "14", "15", "601"]
    palindrome = dataset.items[2]
    assert palindrome.tests[0] == "assert is_palindrome(121) == True"
    assert palindrome.challenge_tests == ("assert is_palindrome(1234321) == True",)
    assert palindrome.prompt.startswith("Write a function to check whether a number is a palindrome.")
    assert "Your code should pass these tests:" in palindrome.prompt and palindrome.tests[0] in palindrome.prompt
    assert dataset.items[4].setup == "from collections import Counter"
    test_split = load(fixture("mbpp.jsonl"), "mbpp", split="test")
    assert [item.id for item in test_split.items] == ["11", "12", "13", "14", "15"]
    assert [item.id for item in load(fixture("mbpp.jsonl"), "mbpp", split="train").items] == ["601"]


def test_mbpp_sanitized_json_array():
    dataset = load(fixture("mbpp_sanitized.json"), "mbpp")
    assert [item.id for item in dataset.items] == ["16", "17"]
    assert dataset.items[0].imports == ("import math",)
    assert dataset.items[0].prompt.startswith("Write a function to find the area of a circle")
    assert [item.source.rsplit(":", 1)[1] for item in dataset.items] == ["2", "3"]  # the line each element starts on


def test_math_folder_of_json_files():
    dataset = load(fixture("math"), "math")
    assert [item.id for item in dataset.items] == ["algebra/1.json", "algebra/2.json", "geometry/3.json"]
    assert [item.answer for item in dataset.items] == ["\\frac{1}{2}", "2\\sqrt{3}", "10"]
    assert dataset.items[0].level == "Level 2" and dataset.items[0].subject == "Algebra"
    assert dataset.items[2].subject == "Geometry"


def test_math500_jsonl_with_answers():
    dataset = load(fixture("math500.jsonl"), "math")
    assert [item.id for item in dataset.items][:2] == ["test/prealgebra/1.json", "test/algebra/2.json"]
    assert [item.answer for item in dataset.items] == ["\\frac{3}{4}", "(1,2)", "45", "\\frac{1}{3}"]
    assert dataset.items[1].subject == "Algebra" and dataset.items[1].level == "2"


def test_bad_math_and_mbpp_rows(tmp_path):
    math_file = tmp_path / "math.json"
    math_file.write_text(
        "[\n"
        + json.dumps({"problem": "fine", "solution": "so \\boxed{3}"}) + ",\n"
        + json.dumps({"problem": "no answer anywhere", "solution": "it is three"}) + ",\n"
        + json.dumps({"solution": "\\boxed{1}"}) + "\n]\n"
    )
    dataset = load(str(math_file), "math", skip_bad=True)
    assert [item.answer for item in dataset.items] == ["3"]
    assert [(p.line, p.field) for p in dataset.problems] == [(3, "solution"), (4, "problem")]
    mbpp_file = tmp_path / "mbpp.jsonl"
    rows = [
        {"task_id": 11, "text": "t", "code": "c", "test_list": ["assert True"]},
        {"task_id": 11, "text": "again", "code": "c", "test_list": ["assert True"]},
        {"task_id": "x", "text": "t", "code": "c", "test_list": ["assert True"]},
        {"task_id": 13, "text": "t", "code": "c", "test_list": "assert True"},
        {"task_id": 14, "code": "c", "test_list": ["assert True"]},
    ]
    mbpp_file.write_text("".join(json.dumps(row) + "\n" for row in rows))
    with pytest.raises(DatasetError, match=r"mbpp.jsonl:2: field 'task_id': duplicate id '11'"):
        load(str(mbpp_file), "mbpp")
    dataset = load(str(mbpp_file), "mbpp", skip_bad=True)
    assert [item.id for item in dataset.items] == ["11"]
    assert [(p.line, p.field) for p in dataset.problems] == [(2, "task_id"), (3, "task_id"), (4, "test_list"), (5, "text")]


def test_unknown_kinds_and_splits_are_refused():
    with pytest.raises(ValueError, match="unknown dataset kind"):
        load(fixture("gsm8k.jsonl"), "humaneval")
    with pytest.raises(ValueError, match="MBPP only"):
        load(fixture("gsm8k.jsonl"), "gsm8k", split="test")


def test_exec_and_collect_ask_an_mbpp_task_as_bench_does():
    """An MBPP row's description alone does not name the function its tests call: `exec` and
    `collect` (and so a policy trained on collected rows) must ask what `bench` asks."""
    from bamasc.policy.data import read_scored_tasks

    path = os.path.join(FIXTURES, "mbpp.jsonl")
    benched = {item.id: item.prompt for item in load(path, "mbpp").items}
    collected, _ = read_scored_tasks(path)
    assert collected and {task.id: task.text for task in collected} == benched
    assert all("Your code should pass these tests:" in text and "assert " in text for text in benched.values())
    # A GSM8K row is asked as written.
    gsm8k = os.path.join(FIXTURES, "gsm8k.jsonl")
    questions = {item.id: item.prompt for item in load(gsm8k, "gsm8k").items}
    assert {task.id: task.text for task in read_scored_tasks(gsm8k)[0]} == questions
