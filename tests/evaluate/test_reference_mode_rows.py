"""The reproduce kit runs the reference-mode rows beside bamasc's when asked: labelled by system,
bound with the paper cost model, run under the after-the-fact check, estimated at their bounds."""

from __future__ import annotations

import io
import json
import os
import sys

import pytest

from bamasc.cli import main
from bamasc.evaluate.paper_rows import choose, plan_cells
from bamasc.plan.compile import check_file
from tests.conftest import ROOT

GSM8K = os.path.join(ROOT, "examples", "paper", "gsm8k.bam")
TASKS = os.path.join(ROOT, "tests", "fixtures", "datasets", "gsm8k.jsonl")


def _program():
    program, diagnostics, _ = check_file(GSM8K)
    assert program is not None, [d.message for d in diagnostics]
    return program


def test_reference_mode_rows_are_on_request_and_bound_as_the_reference():
    program = _program()
    default = choose(program, GSM8K)
    assert "gsm8k_reference_mode" not in default.systems and "gsm8k_reference" in default.systems
    asked = choose(program, GSM8K, systems=["gsm8k_reference", "gsm8k_reference_mode", "gsm8k_bamasc"])
    assert asked.paper_cost == ("gsm8k_reference", "gsm8k_reference_mode")
    labels = {cell.label: cell.binder for cell in plan_cells(asked, program)}
    assert labels["gsm8k_reference_mode"] == labels["gsm8k_reference"] == "paper"
    assert labels["gsm8k_bamasc"] == "lexicographic"


def test_reproduce_runs_reference_mode_rows_beside_bamasc_rows(tmp_path, monkeypatch):
    monkeypatch.setenv("BAMASC_CACHE", str(tmp_path / "cache"))
    out = tmp_path / "out"
    stdout = io.StringIO()
    monkeypatch.setattr(sys, "stdout", stdout)
    code = main(["reproduce", GSM8K, "--dataset", TASKS, "-o", str(out), "--limit", "2", "--budgets", "1625",
                 "--systems", "gsm8k_reference_mode,gsm8k_bamasc", "--learn", "none", "--greedy", "none",
                 "--fake", "verbose", "--yes"])
    assert code == 0, stdout.getvalue()
    rows = json.loads((out / "table.json").read_text(encoding="utf-8"))["rows"]
    assert [(row["row"], row["binder"]) for row in rows] == [
        ("gsm8k_reference_mode", "paper"), ("gsm8k_bamasc", "lexicographic")]
    cells = [json.loads(line) for line in (out / "bench" / "cells.jsonl").read_text(encoding="utf-8").splitlines()]
    by_label = {cell["label"]: cell for cell in cells}
    # At 1,625 µ$ the strongest reference template is its planner, which the reference never stops:
    # every dry-run task spends past the budget, and never past the plan's bound.
    reference = by_label["gsm8k_reference_mode"]["items"]
    assert reference and all(item["template"] == "reference_planner" and item["cost"] > 1625 for item in reference)
    assert all(item["cost"] <= 1625 for item in by_label["gsm8k_bamasc"]["items"])
