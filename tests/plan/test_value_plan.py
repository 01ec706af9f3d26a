"""A system that binds by value: its plan says so, `explain` names the objective and the seats' worth, a sweep's
front ranks by value, and the tier ablations are refused."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from bamasc.plan.sweep import _pareto
from tests.conftest import ROOT


def bamasc(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "bamasc", *args], cwd=ROOT, capture_output=True, text=True)


def support_by_value(tmp_path) -> str:
    text = open(os.path.join(ROOT, "examples", "support.bam"), encoding="utf-8").read()
    path = tmp_path / "support.bam"
    path.write_text(text.replace("  select       = strongest\n", "  select       = strongest\n  objective    = value\n"))
    return str(path)


def test_the_plan_and_explain_say_the_binding_is_by_value(tmp_path):
    source, plan = support_by_value(tmp_path), str(tmp_path / "plan.json")
    assert bamasc("compile", source, "--budget", "8000", "-o", plan).returncode == 0
    (template,) = json.load(open(plan, encoding="utf-8"))["systems"][0]["templates"]
    assert template["objective"]["kind"] == "value"
    # triage on nano (1 x 1), billing, account and general on gpt-4.1 (4 x 1 each), the engineer's draft on
    # gpt-4.1 (4 x 1; its revision on nano is a second instance, cheaper and worth nothing more: a slot
    # counts its best model once), the reviewer on nano (1 x 1).
    assert abs(template["objective"]["quality"] - (1 + 4 * 4 + 1)) < 1e-9
    explained = bamasc("explain", source, "--budget", "8000")
    assert explained.returncode == 0, explained.stderr
    assert "Objective: value (the sum over slots of weight x their best model's quality, then the lowest cost): 18;" in explained.stdout
    assert "weights: triage 1, billing 4, engineer 4, reviewer 1, account 4, general 4" in explained.stdout
    assert "gpt41: +1882.9 µ$ -> 9263.6 µ$; worth the same, so the cheaper binding wins" in explained.stdout


def test_a_sweep_front_ranks_by_value(tmp_path):
    swept = bamasc("compile", support_by_value(tmp_path), "--sweep", "2000:8000:2000", "--format", "json")
    front = json.loads(swept.stdout)["pareto"]
    # Each budget buys more value for more cost: every budget's binding is on the front.
    assert [round(entry["quality"], 4) for entry in front] == [9.3333, 10.0, 16.0, 18.0]


def test_by_value_a_cheaper_binding_worth_more_beats_one_with_more_strong_seats():
    strong = {"feasible": True, "worst_case_cost": 100.0, "tier_seats": [1, 0], "quality": 1.0}
    wide = {"feasible": True, "worst_case_cost": 90.0, "tier_seats": [0, 3], "quality": 3.0}
    points = [{"budget": 100.0, "templates": {"strong": strong, "wide": wide}}]
    assert {entry["template"] for entry in _pareto(points)} == {"strong", "wide"}
    assert [entry["template"] for entry in _pareto(points, by_value=True)] == ["wide"]


def test_the_tier_ablations_are_refused(tmp_path):
    source = support_by_value(tmp_path)
    for option in (["--method", "greedy"], ["--cost-model", "paper"]):
        refused = bamasc("compile", source, *option)
        assert refused.returncode == 2 and "binds by value (objective = value)" in refused.stderr
