"""The template MILP on dynamic plans: each step at its costliest seat, each read of a step at the
largest output of the seats that may have made it, exactly as the unrolled bound says.

Random dynamic plans (one to four seats, a formatter or none) are bound by the one MILP,
by enumeration and by brute force over every binding priced on its unrolled calls. All
must agree: had the MILP summed a step's seats where a later step reads it (the E columns,
optimize/either.py), it would miss bindings that fit only because one seat made the step.
"""

from __future__ import annotations

import random

import pytest

from bamasc.optimize import bind
from tests.dynamic.sources import random_dynamic_source
from tests.helpers.milp import assert_binds_like_brute_force, load, objective, strategy, within_search_space


@pytest.mark.parametrize("seed", range(30))
def test_dynamic_milp_equals_enumeration_and_brute_force(tmp_path, seed):
    rng = random.Random(11000 + seed)
    source, program = within_search_space(tmp_path, lambda: random_dynamic_source(rng))
    assert_binds_like_brute_force(program, source)


@pytest.mark.parametrize("seed", range(10))
def test_dynamic_bindings_at_growing_budgets(tmp_path, seed):
    """Never BAM504 (the MILP priced a binding below its exact bound), and more budget loses nothing."""
    rng = random.Random(12000 + seed)
    program = load(tmp_path, random_dynamic_source(rng))
    system = program.systems["s"]
    chosen = strategy(enumerate_up_to=rng.choice([0, 64]))
    previous = None
    for budget in sorted(rng.sample(range(200, 12000), 5)):
        found = objective(bind.bind_template(program, system, "t", float(budget), strategy=chosen))
        if previous is not None:
            assert found is not None and found[:-1] >= previous[:-1], (budget, found, previous)
        previous = found if found is not None else previous
