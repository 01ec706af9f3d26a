"""`--cost-model paper`: the reference's pools at every paper budget, and what the plan says of them."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from bamasc.optimize.paper import bind_paper, tier_weights
from bamasc.plan.compile import check_file, compile_file
from tests.helpers.paper import EXPECTED, H, L
from tests.optimize import reference_pools

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _program(dataset):
    program, diagnostics, _ = check_file(os.path.join(ROOT, "examples", "paper", f"{dataset}.bam"))
    assert program is not None, [d.message for d in diagnostics]
    return program


def _pool(program, system, binding) -> dict:
    pool = {}
    slots = {slot.name: slot.role for slot in program.topologies[binding.template].slots}
    for seat in binding.seats:
        level = H if program.models[seat.model].tier == 1 else L
        key = (slots[seat.slot], level)
        pool[key] = pool.get(key, 0) + 1
    return pool


def test_the_script_still_gives_the_table_and_no_budget_has_a_tie():
    found = {}
    for key in EXPECTED:
        pool, _, tied = reference_pools.solve(*key)
        assert not tied, f"{key}: the reference's objective ties, so its pool is not unique"
        found[key] = pool
    assert found == EXPECTED


def test_the_reference_never_wants_more_than_three_planner_driven_executors():
    # Its dynamic ILP caps executors only at 5 per level; the example's slot holds 1..3.
    for (dataset, pattern, budget), pool in EXPECTED.items():
        if pattern == "planner":
            assert sum(n for (role, _), n in pool.items() if role == "Executor") <= 3


@pytest.mark.parametrize("key", sorted(EXPECTED), ids=lambda k: f"{k[0]}-{k[1]}-{k[2]}")
def test_paper_bindings_equal_the_reference_pools(key):
    dataset, pattern, budget = key
    program = _program(dataset)
    system = program.systems[f"{dataset}_reference"]
    binding = bind_paper(program, system, f"ref_{pattern}", budget)
    assert binding.feasible
    assert _pool(program, system, binding) == EXPECTED[key]
    assert binding.estimate <= budget


def test_first_group_sets_c_j():
    # Two groups of tier 2 (200 and 100 µ$ a seat): only the first one counts.
    assert tier_weights([(1, 500.0), (2, 200.0), (2, 100.0)], 1000) == {2: 1.0, 1: 6.0}
    assert tier_weights([(2, 100.0), (1, 500.0), (2, 200.0)], 1000) == {2: 1.0, 1: 11.0}


def test_a_paper_plan_carries_the_exact_bound_and_warns_where_it_breaks_the_budget(tmp_path):
    path = os.path.join(ROOT, "examples", "paper", "gsm8k.bam")
    result = compile_file(path, "gsm8k_reference", None, "paper", str(tmp_path))
    assert result.plan is not None
    (system,) = result.plan.systems
    over = {d.message.split("'")[1] for d in result.diagnostics if d.code == "BAM506"}
    for template, binding in zip(system.templates, result.bindings["gsm8k_reference"]):
        assert template.worst_case_cost == binding.worst_case_cost
        assert binding.estimate <= system.budget
        assert (template.worst_case_cost > system.budget) == (template.name in over)
    # At 1,625 µ$ the reference puts DeepSeek on the planner with two DeepSeek executors.
    planner = next(t for t in system.templates if t.name == "ref_planner")
    assert sorted((s.slot, s.model) for s in planner.binding) == [
        ("executor", "deepseek_v3"), ("executor", "deepseek_v3"), ("planner", "deepseek_v3")]
    assert over  # the exact bounds of these pools are above the budget
    assert result.plan.compiled_with["method"] == "paper"


def test_a_paper_plan_file_reloads_and_an_exact_one_over_budget_is_still_refused(tmp_path):
    plan = tmp_path / "plan.json"
    source = os.path.join(ROOT, "examples", "paper", "gsm8k.bam")
    run = [sys.executable, "-m", "bamasc", "compile", source, "--system", "gsm8k_reference"]
    done = subprocess.run([*run, "--cost-model", "paper", "-o", str(plan)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "BAM506" in done.stderr and "bounds re-verified" in done.stdout
    from bamasc.plan.load import PlanVerificationError, load_plan, verify_plan
    from bamasc.records import replace

    loaded, program = load_plan(str(plan))
    assert json.loads(plan.read_text())["compiled_with"]["method"] == "paper"
    verify_plan(loaded, program)
    exact = replace(loaded, compiled_with=dict(loaded.compiled_with, method="lexicographic"))
    with pytest.raises(PlanVerificationError, match="exceeds the budget"):
        verify_plan(exact, program)


def test_cost_model_paper_refuses_another_method():
    source = os.path.join(ROOT, "examples", "paper", "gsm8k.bam")
    done = subprocess.run([sys.executable, "-m", "bamasc", "compile", source, "--cost-model", "paper", "--method", "weights"],
                          capture_output=True, text=True)
    assert done.returncode != 0 and "leave out --method" in done.stderr


@pytest.mark.parametrize("dataset", ["gsm8k", "math", "mbpp"])
def test_the_paper_examples_lint_without_errors_and_only_the_documented_warnings(dataset):
    from bamasc.lint import lint_paths

    result = lint_paths([os.path.join(ROOT, "examples", "paper", f"{dataset}.bam")])
    assert not [d for d in result.diagnostics if d.severity == "error"]
    # docs/paper.md: the planner templates' exact floor is above MATH's and MBPP's headline budgets,
    # and MBPP's gpt-4o-mini keeps the reference's price, below the catalogue's.
    allowed = {"gsm8k": set(), "math": {"BAM405"}, "mbpp": {"BAM405", "BAM409"}}[dataset]
    # The framework baselines list the file's budgets though their shapes fit only the largest: each smaller
    # listed budget is a BAM404 warning (docs/paper.md, "Baselines"), and no other system gets one.
    listed = [d for d in result.diagnostics if d.code == "BAM404"]
    assert listed and all(d.severity == "warning" and "_style_" in d.message and "listed budget" in d.message
                          for d in listed)
    assert {d.code for d in result.diagnostics} - {"BAM404"} == allowed
