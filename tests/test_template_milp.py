"""The template MILP against brute force, against enumeration, and under growing budgets.

Random templates (every combinator, one or two statements) and random pools
(tiers, prices, output caps, qualities) are bound three ways: by the one MILP
with count indicators, by one exact MILP per count vector, and by trying every
binding the formulation allows and pricing it on its unrolled calls. All three
must agree on the objective. A larger budget must never lose a binding.
"""

from __future__ import annotations

import random

import pytest

from bamasc.optimize import bind
from tests.helpers.milp import assert_binds_like_brute_force, load, objective, random_source, strategy


@pytest.mark.parametrize("seed", range(60))
def test_one_milp_equals_enumeration_and_brute_force(tmp_path, seed):
    rng = random.Random(seed)
    _, source = random_source(rng)
    assert_binds_like_brute_force(load(tmp_path, source), source)


@pytest.mark.parametrize("seed", range(25))
def test_a_larger_budget_never_loses_a_binding(tmp_path, seed):
    rng = random.Random(1000 + seed)
    _, source = random_source(rng)
    program = load(tmp_path, source)
    system = program.systems["s"]
    chosen = strategy(enumerate_up_to=rng.choice([0, 64]), split_from_columns=rng.choice([0, 1000]))
    previous = None
    for budget in sorted(rng.sample(range(100, 8000), 5)):
        found = objective(bind.bind_template(program, system, "t", float(budget), strategy=chosen))
        if previous is not None:
            assert found is not None, (source, budget)
            assert found[:-1] >= previous[:-1], (source, budget, found, previous)
        previous = found if found is not None else previous


CLIFF = """
%(strong)s
model weak {
  provider = fake
  name = "weak"
  price { input = 0.1  output = 0.4 }
  tier = 2
  max_output = 1
}
role Executor {
  max_output = 400
  reads = answer
  prompt = "Solve: {{task}} {{previous?}}"
}
topology linear {
  slot executor : Executor [1..5]
  flow { answer chain executor(task) }
}
system s {
  models = [%(names)s, weak]
  topologies = [linear]
  budget = 6000
  task_tokens = 200
}
"""


def test_the_budget_cliff_is_gone(tmp_path):
    """Ten tier-1 models and one tier-2 model with a 1-token cap: every budget from 6,000 to 20,000
    binds, and the bindings only get stronger (this once failed from 14,000 on after 200 cuts)."""
    strong = "\n".join(
        f'model s{i} {{\n  provider = fake\n  name = "s{i}"\n  price {{ input = {8 + 0.5 * i:.1f}  output = {2.0 + 0.3 * i:.1f} }}\n  tier = 1\n}}'
        for i in range(10)
    )
    program = load(tmp_path, CLIFF % {"strong": strong, "names": ", ".join(f"s{i}" for i in range(10))})
    system = program.systems["s"]
    previous = None
    for budget in range(6000, 20001, 1000):
        found = bind.bind_template(program, system, "linear", float(budget))
        assert found.feasible, budget
        assert found.worst_case_cost <= budget
        assert found.cuts == 0
        if previous is not None:
            assert objective(found)[:-1] >= objective(previous)[:-1]
        previous = found
