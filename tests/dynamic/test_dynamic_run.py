"""Dynamic plans at run time on the offline fake: never over the proven bound, and the bound is reached.

Random dynamic plans (tests/dynamic/sources.py) are compiled and run in random mode
(the planner writes any number of cards, each giving its step to any seat and reading
any earlier steps) under many seeds: charged ≤ proven bound ≤ budget on every task.
In verbose mode (a dry run) the fake planner gives each step to its costliest seat and
has it read every step before it, and every reply fills its cap: the run is charged the
bound less exactly one known slack, the JSON around the step cards. The bound counts
the plan's whole output once more for the cards, at the dearest price of the steps
that show one (ir/bounds.py `cost_amounts`), and the fake grows the first card to fill
the plan; every other token the bound counts is spent.
"""

from __future__ import annotations

import random

import pytest

from tests.dynamic.sources import random_dynamic_source
from tests.helpers.dynamic import card_slack, compiled, every_card_fits, run


@pytest.mark.parametrize("seed", range(16))
def test_charged_never_exceeds_the_bound_and_the_bound_is_reached(tmp_path, seed):
    rng = random.Random(13000 + seed)
    source = random_dynamic_source(rng, budgets=(4000, 12000, 40000))
    result = compiled(tmp_path, source)
    system = result.plan.systems[0]
    template = system.template("t")
    if not template.feasible:
        pytest.skip("no binding within this budget")  # the MILP tests cover infeasible templates
    task = "x" * result.program.systems["s"].task_tokens  # the fake counts a byte a token
    assert template.worst_case_cost <= system.budget * (1 + 1e-9)
    for run_seed in range(12):
        outcome = run(result, "random", run_seed, task[: rng.randint(1, len(task))])
        assert outcome.status == "ok", (source, outcome)
        assert outcome.cost <= template.worst_case_cost + 1e-6, (source, outcome)
    worst = run(result, "verbose", 0, task)
    assert worst.status == "ok", worst
    assert worst.cost <= template.worst_case_cost + 1e-6
    if every_card_fits(result):
        assert worst.cost == pytest.approx(template.worst_case_cost - card_slack(result), rel=1e-9, abs=1e-6), source
    else:  # the planner's cap holds fewer cards than max_steps: the later steps never run
        assert worst.cost < template.worst_case_cost - card_slack(result), source
