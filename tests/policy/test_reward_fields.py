"""The reward's `infeasible`, `task_weight` and `budget_weight`: parsed and checked from the reward block,
and what they change in the policy's reward, worked out by hand."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
from numpy.testing import assert_allclose

from bamasc.plan.compile import check_file
from bamasc.policy.data import OfflineRow
from bamasc.policy.report import outcome_metrics
from bamasc.policy.train import Reward, build_table, rewards
from tests.conftest import ROOT

PAPER = dict(success=1000.0, failure=-1000.0, overflow=1000.0, efficiency=100.0)
# success within budget (cost 250 of 1000), failure within, success over (1200), failure over.
SUCCESS = [True, False, True, False]
COST = [250.0, 100.0, 1200.0, 1200.0]
BUDGET = [1000.0] * 4


def test_weights_of_one_are_the_paper_formula():
    # 1000 + 100 * 0.75; -1000; 1000 - 1000; -1000 - 1000.
    assert_allclose(rewards(SUCCESS, COST, BUDGET, Reward(**PAPER)), [1075.0, -1000.0, 0.0, -2000.0])


def test_the_weights_multiply_the_task_and_the_budget_terms():
    got = rewards(SUCCESS, COST, BUDGET, Reward(**PAPER, task_weight=2.0, budget_weight=3.0))
    # 2 * 1000 + 3 * 75; 2 * -1000 + 3 * 0; 2 * 1000 + 3 * -1000; 2 * -1000 + 3 * -1000.
    assert_allclose(got, [2225.0, -2000.0, -1000.0, -5000.0])
    # A budget weight of 0 leaves the success or failure alone; a task weight of 0 the budget term alone.
    assert_allclose(rewards(SUCCESS, COST, BUDGET, Reward(**PAPER, budget_weight=0.0)), [1000, -1000, 1000, -1000])
    assert_allclose(rewards(SUCCESS, COST, BUDGET, Reward(**PAPER, task_weight=0.0)), [75, 0, -1000, -1000])


def _rows(budget_feasible: dict[float, bool]) -> list[OfflineRow]:
    rows = []
    for budget, star in budget_feasible.items():
        rows.append(OfflineRow("t1", "2+2?", budget, "linear", True, 100.0, True))
        rows.append(OfflineRow("t1", "2+2?", budget, "star", False, 0.0 if not star else 50.0, star))
    return rows


@pytest.mark.parametrize("infeasible, expected", [(-120.0, -120.0), (None, -1000.0)])
def test_an_infeasible_cell_earns_the_infeasible_reward(infeasible, expected):
    table = build_table(_rows({500.0: False, 1000.0: True}), ("linear", "star"), Reward(**PAPER, infeasible=infeasible))
    states = np.arange(2)  # (t1, 500) and (t1, 1000)
    star = outcome_metrics(table, states, np.array([1, 1]))
    # At 500 star has no binding: `infeasible` (the failure reward when unset); at 1000 it failed within budget.
    assert star["reward"] == pytest.approx((expected + -1000.0) / 2)
    assert star["success_rate"] == 0 and star["mean_cost"] == pytest.approx(25.0)
    # linear succeeded at 100 of 500 and of 1000: 1000 + 100 * 0.8, 1000 + 100 * 0.9.
    assert outcome_metrics(table, states, np.array([0, 0]))["reward"] == pytest.approx(1085.0)


def _system(write_bam, reward: str) -> tuple:
    text = Path(os.path.join(ROOT, "examples", "gsm8k.bam")).read_text(encoding="utf-8")
    path = write_bam(text.replace("on_exhausted = best_so_far", f"on_exhausted = best_so_far\n  reward {{ {reward} }}"))
    program, diagnostics, _ = check_file(path)
    return program, diagnostics


def test_the_reward_block_reads_the_new_fields(write_bam):
    program, diagnostics = _system(write_bam, "infeasible = -120  task_weight = 0.5  budget_weight = 0")
    assert not diagnostics
    reward = program.systems["gsm8k"].reward
    assert (reward.infeasible, reward.task_weight, reward.budget_weight) == (-120.0, 0.5, 0.0)
    assert (reward.success, reward.failure) == (1.0, -1.0)  # the rest keep their defaults
    default = _system(write_bam, "success = 2")[0].systems["gsm8k"].reward
    assert (default.infeasible, default.task_weight, default.budget_weight) == (None, 1.0, 1.0)


@pytest.mark.parametrize("reward, code, message", [
    ("task_weight = -1", "BAM224", "reward 'task_weight' is -1: a weight multiplies its term and may not be negative"),
    ("budget_weight = -0.5", "BAM224", "reward 'budget_weight' is -0.5"),
    ("infeasible = 5 µ$", "BAM208", "reward 'infeasible' is a plain number and takes no unit"),
    ("task_weight = 2000000", "BAM210", "beyond the limit"),
    ("budget_weight = \"one\"", None, "budget_weight"),
])
def test_bad_reward_values_are_errors_at_the_value(write_bam, reward, code, message):
    _, diagnostics = _system(write_bam, reward)
    (found,) = [d for d in diagnostics if d.severity == "error"]
    assert code is None or found.code == code
    assert message in found.message
    assert found.span.line > 0 and found.span.col > 0


def test_the_paper_files_set_the_reference_constants():
    expected = {"gsm8k": -120.0, "math": -120.0, "mbpp": -150.0}
    for dataset, infeasible in expected.items():
        program, _, _ = check_file(os.path.join(ROOT, "examples", "paper", f"{dataset}.bam"))
        for name in (f"{dataset}_reference", f"{dataset}_bamasc"):
            reward = program.systems[name].reward
            assert (reward.infeasible, reward.task_weight, reward.budget_weight) == (infeasible, 1.0, 1.0)


def test_train_refuses_a_negative_weight_from_the_command_line(tmp_path, capsys):
    from bamasc.cli import main
    from bamasc.policy.data import row_data

    rows = tmp_path / "offline.jsonl"
    rows.write_text("".join(json.dumps(row_data(r)) + "\n" for r in _rows({500.0: True})))
    checkpoint = tmp_path / "gsm8k.msgpack"
    argv = ["train", os.path.join(ROOT, "examples", "gsm8k.bam"), "--data", str(rows), "-o", str(checkpoint),
            "--embedding", "hashed", "--reward-budget-weight", "-1"]
    assert main(argv) == 2
    assert "--reward-budget-weight may not be negative" in capsys.readouterr().err
    assert not checkpoint.exists()
