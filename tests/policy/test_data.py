"""Offline rows: reading and validating them, scoring answers, and `bamasc collect` with resume."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from bamasc.cli import main
from bamasc.evaluate import scorers
from bamasc.policy import data
from bamasc.policy.data import (
    OfflineDataError,
    answers_match,
    local_score,
    read_rows,
    reference_answer,
)
from tests.conftest import ROOT

GSM8K = os.path.join(ROOT, "examples", "gsm8k.bam")
ROW = {"task_id": "t1", "task": "2+2?", "budget": 500, "template": "linear", "success": True, "cost": 12.5, "feasible": True}


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return str(path)


def test_rows_are_read_with_optional_behavior_prob(tmp_path):
    rows = read_rows(write_jsonl(tmp_path / "rows.jsonl", [ROW, {**ROW, "template": "star", "behavior_prob": 0.25}]))
    assert [(r.template, r.behavior_prob, r.budget) for r in rows] == [("linear", None, 500.0), ("star", 0.25, 500.0)]


@pytest.mark.parametrize(
    "change, message",
    [
        ({"success": "yes"}, "'success' must be true or false"),
        ({"cost": -1}, "'cost' must be a number"),
        ({"budget": 0}, "'budget' must be above zero"),
        ({"behavior_prob": 0}, "'behavior_prob' must be a probability"),
        ({"feasible": None}, "'feasible' must be true or false"),
    ],
)
def test_a_bad_row_names_file_line_and_field(tmp_path, change, message):
    path = write_jsonl(tmp_path / "rows.jsonl", [ROW, {**ROW, **change}])
    with pytest.raises(OfflineDataError, match=rf"rows.jsonl:2: {message}"):
        read_rows(path)


def test_a_row_missing_fields_says_which(tmp_path):
    path = write_jsonl(tmp_path / "rows.jsonl", [{"task_id": "t", "task": "x"}])
    with pytest.raises(OfflineDataError, match="rows.jsonl:1: missing fields budget, template, success, cost, feasible"):
        read_rows(path)


def test_references_in_the_published_shapes():
    assert reference_answer({"answer": "He has 3+4=7 apples.\n#### 7"}, "number") == "7"
    assert reference_answer({"answer": "#### 1,250"}, "number") == "1250"
    assert reference_answer({"answer": 42}, "number") == "42"
    assert reference_answer({"solution": "So $x = \\boxed{\\frac{1}{2}}$."}, "boxed") == "\\frac{1}{2}"
    assert reference_answer({"question": "no answer"}, "number") is None


def test_answers_compare_as_numbers_else_as_text():
    assert answers_match("7.0", "7") and answers_match("1,250", "1250")
    assert not answers_match("8", "7") and not answers_match(None, "7")
    assert answers_match("\\frac{1}{2}", "\\frac{1}{2}") and answers_match("$ x $", "X")
    assert local_score("number", "Step one...\n#### 72", {"answer": "... #### 72"})
    assert not local_score("number", "#### 71", {"answer": "#### 72"})


def test_collect_scores_with_the_scorer_it_is_given(tmp_path, capsys, monkeypatch):
    """policy comes before evaluate: `collect` defaults to local_score, and `bamasc collect` passes evaluate's."""
    import inspect

    assert inspect.signature(data.collect).parameters["score"].default is local_score
    seen = []
    monkeypatch.setattr(scorers, "score", lambda kind, output, row: seen.append(kind) or True)
    out = str(tmp_path / "offline.jsonl")
    argv = ["collect", GSM8K, "--dataset", _dataset(tmp_path, 2), "--budgets", "875", "-o", out, "--fake", "echo"]
    assert main(argv) == 0
    capsys.readouterr()
    ran = [r for r in read_rows(out) if r.feasible]
    assert ran and all(r.success for r in ran)  # the echo fake gets half the tasks wrong: this scorer said right
    assert set(seen) == {"number"} and len(seen) == len(ran)


def _dataset(tmp_path, count=4):
    rows = []
    for i in range(count):
        # The offline fake answers "#### <the last number of the prompt>": right for the even tasks.
        rows.append({"id": f"q{i}", "question": f"Tom has {i + 3} pens and buys {i + 10} more. How many now?",
                     "answer": f"#### {i + 10 if i % 2 == 0 else i + 13}"})
    return write_jsonl(tmp_path / "tasks.jsonl", rows)


def test_collect_runs_every_feasible_template_and_resumes(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(scorers, "score", local_score)
    shutil.copy(GSM8K, tmp_path / "gsm8k.bam")
    dataset, out = _dataset(tmp_path), str(tmp_path / "offline.jsonl")
    argv = ["collect", str(tmp_path / "gsm8k.bam"), "--dataset", dataset, "--budgets", "300,875,1625", "-o", out, "--fake", "echo"]
    assert main(argv) == 0
    first = capsys.readouterr()
    rows = read_rows(out)
    # 4 tasks x 3 budgets x 4 templates; at 300 µ$ nothing fits, at 875 the planner does not.
    assert len(rows) == 48
    assert "no template fits 300" in first.err
    by_budget = {b: {r.template for r in rows if r.budget == b and r.feasible} for b in (300.0, 875.0, 1625.0)}
    assert by_budget == {300.0: set(), 875.0: {"linear", "star", "feedback"}, 1625.0: {"linear", "star", "feedback", "planner"}}
    ran = [r for r in rows if r.feasible]
    assert all(0 < r.cost <= r.budget for r in ran)
    assert [r.behavior_prob for r in ran if r.budget == 875.0] == pytest.approx([1 / 3] * 12)
    assert {r.success for r in ran} == {True, False}
    assert all(not r.success and r.cost == 0 for r in rows if not r.feasible)
    # Resume: a run cut mid-line loses only that line, and the same command fills the gap.
    text = Path(out).read_text(encoding="utf-8")
    lines = text.splitlines(keepends=True)
    with open(out, "w", encoding="utf-8") as handle:
        handle.write("".join(lines[:-3]) + lines[-3][:20])
    assert main(argv) == 0
    resumed = capsys.readouterr().out
    assert "3 rows written" in resumed and "45 already there" in resumed
    again = read_rows(out)
    assert len(again) == 48
    assert {(r.task_id, r.budget, r.template) for r in again} == {(r.task_id, r.budget, r.template) for r in rows}


def test_collect_refuses_a_dataset_without_references(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(scorers, "score", local_score)
    dataset = write_jsonl(tmp_path / "tasks.jsonl", [{"id": "a", "question": "What is 2+2?"}])
    out = tmp_path / "offline.jsonl"
    assert main(["collect", GSM8K, "--dataset", dataset, "--budgets", "875", "-o", str(out), "--fake", "echo"]) == 1
    assert "task 'a' has no reference answer" in capsys.readouterr().err
    assert not out.exists() or out.read_text() == ""


def test_a_duplicate_id_skipped_keeps_the_first_rows_text_and_row(tmp_path):
    from bamasc.policy.data import read_scored_tasks

    path = tmp_path / "tasks.jsonl"
    path.write_text('{"id": "a", "task": "first", "answer": "1"}\n{"id": "a", "task": "second", "answer": "2"}\n')
    tasks, problems = read_scored_tasks(str(path), skip_bad=True)
    assert [(t.id, t.text, t.row["answer"]) for t in tasks] == [("a", "first", "1")]
    assert len(problems) == 1 and "duplicate task id 'a'" in problems[0]
