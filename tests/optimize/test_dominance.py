"""Dominated models leave the binder's pool, and the best binding never changes for it."""

from __future__ import annotations

import random

import pytest

from bamasc.optimize import bind
from bamasc.optimize.dominance import undominated
from tests.helpers.milp import load, random_source

BASE = """
model strong {{ provider = fake  name = "a"  price {{ input = 1.0  output = 2.0 }}  tier = 1  max_output = 64 }}
model other {{ provider = fake  name = "b"  {other}  tier = {tier}  max_output = {cap} {extra} }}
role R {{ prompt = "Do {{{{task}}}}"  reads = answer }}
topology t {{
  slot s : R [1..2]
  flow {{ answer parallel s(task) }}
}}
system s {{ models = [strong, other]  topologies = [t]  budget = 100000  task_tokens = 10 }}
"""


def pool_after(tmp_path, other="price { input = 2.0  output = 2.0 }", tier=1, cap=64, extra=""):
    program = load(tmp_path, BASE.format(other=other, tier=tier, cap=cap, extra=extra))
    pool = [program.models[name] for name in program.systems["s"].models]
    return [m.name for m in undominated(pool, [program.roles["R"]])]


def test_a_dearer_model_of_the_same_tier_goes(tmp_path):
    assert pool_after(tmp_path) == ["strong"]


def test_an_identical_model_stays(tmp_path):
    assert pool_after(tmp_path, other="price { input = 1.0  output = 2.0 }") == ["strong", "other"]


def test_a_model_of_another_tier_stays(tmp_path):
    assert pool_after(tmp_path, tier=2) == ["strong", "other"]


def test_a_larger_output_cap_is_not_better(tmp_path):
    # Dearer but with a smaller cap: its calls may cost less, so neither dominates.
    assert pool_after(tmp_path, cap=16) == ["strong", "other"]


def test_a_better_quality_keeps_a_dearer_model(tmp_path):
    assert pool_after(tmp_path, extra="quality { R = 2.0 }") == ["strong", "other"]


def test_a_price_tier_above_the_rival_rate_keeps_the_rival(tmp_path):
    # `other` is cheaper at short prompts but bills 3.0 above 100 tokens: it does not
    # dominate `strong` everywhere, and `strong` is dearer at short prompts.
    other = "price { input = 0.5  output = 2.0  long_prompt { above = 100  input = 3.0  output = 2.0 } }"
    assert pool_after(tmp_path, other=other) == ["strong", "other"]


@pytest.mark.parametrize("seed", range(30))
def test_pruning_never_changes_the_best_binding(tmp_path, monkeypatch, seed):
    rng = random.Random(1000 + seed)
    _, source = random_source(rng)
    program = load(tmp_path, source)
    system = program.systems["s"]
    pruned = bind.bind_template(program, system, "t", system.budget)
    monkeypatch.setattr(bind, "undominated", lambda pool, roles, quality: pool)
    full = bind.bind_template(program, system, "t", system.budget)
    assert pruned.feasible == full.feasible
    if full.feasible:
        assert pruned.tier_seats == full.tier_seats
        assert pruned.quality == pytest.approx(full.quality)
        assert pruned.worst_case_cost == pytest.approx(full.worst_case_cost, rel=1e-9, abs=1e-6)
