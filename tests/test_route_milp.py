"""The template MILP on flows with `route`: it prices a route as its costliest branch, exactly.

Random route templates (branches of every combinator, nested routes, a seat
called in two branches, a route's value read later) are bound by the one MILP
with count indicators, by enumeration, and by brute force over every binding
priced on its unrolled calls with `worst_case_cost`. All must agree; had the
MILP summed the branches, it would miss bindings that fit only because one
branch runs. At several budgets the compiler never reports BAM504 (the MILP
priced a binding below its exact bound), and a larger budget loses nothing.
"""

from __future__ import annotations

import random

import pytest

from bamasc.ir.alternatives import worst_case
from bamasc.ir.bounds import call_bounds, cost_amounts
from bamasc.ir.unroll import unroll
from bamasc.optimize import bind
from tests.helpers.milp import assert_binds_like_brute_force, load, objective, strategy
from tests.helpers.routes import DEEP_OR_WIDE, random_route_source


@pytest.mark.parametrize("seed", range(40))
def test_route_milp_equals_enumeration_and_brute_force(tmp_path, seed):
    rng = random.Random(5000 + seed)
    _, source = random_route_source(rng)
    assert_binds_like_brute_force(load(tmp_path, source), source)


@pytest.mark.parametrize("seed", range(12))
def test_route_bindings_at_growing_budgets(tmp_path, seed):
    """Never BAM504 (bind raises SolverError), the bound is the costliest branch, and more budget loses nothing."""
    rng = random.Random(7000 + seed)
    _, source = random_route_source(rng)
    program = load(tmp_path, source)
    system = program.systems["s"]
    chosen = strategy(enumerate_up_to=rng.choice([0, 64]), split_from_columns=rng.choice([0, 1000]))
    previous = None
    for budget in sorted(rng.sample(range(100, 8000), 5)):
        binding = bind.bind_template(program, system, "t", float(budget), strategy=chosen)
        found = objective(binding)
        if binding.feasible:
            calls = binding.unrolled.calls
            total = sum(bound.cost for bound in binding.bounds)
            worst = worst_case(cost_amounts(calls, binding.bounds), binding.unrolled.choices)
            assert binding.worst_case_cost == pytest.approx(worst.total)
            # A branch pays for what later calls read of it, which only tightens the bound.
            whole = worst_case(((c.alternative, b.cost) for c, b in zip(calls, binding.bounds)), binding.unrolled.choices)
            assert worst.total <= whole.total + 1e-9
            assert binding.worst_case_cost <= total + 1e-9
        if previous is not None:
            assert found is not None, (source, budget)
            assert found[:-1] >= previous[:-1], (source, budget, found, previous)
        previous = found if found is not None else previous


def test_a_binding_that_fits_only_because_one_branch_runs(tmp_path):
    """Two branches on the dear model each fit the budget, both together do not: the route is bound."""
    source = """
model dear { provider = fake  name = "d"  price { input = 1  output = 10 }  tier = 1 }
model cheap { provider = fake  name = "c"  price { input = 0.1  output = 1 }  tier = 2 }
role Router { max_output = 4  prompt = "Route {{task}}" }
role Agent { max_output = 100  prompt = "Answer {{task}}" }
topology t {
  slot router : Router [1..1]
  slot left   : Agent  [1..1]
  slot right  : Agent  [1..1]
  flow { answer route router(task) { left: left(task)  otherwise: right(task) } }
}
system s { models = [dear, cheap]  topologies = [t]  budget = 1200  task_tokens = 10 }
"""
    program = load(tmp_path, source)
    system = program.systems["s"]
    binding = bind.bind_template(program, system, "t", system.budget)
    assert binding.feasible
    assert {seat.slot: seat.model for seat in binding.seats} == {"router": "dear", "left": "dear", "right": "dear"}
    calls = unroll(program.topologies["t"], dict(binding.counts)).calls
    model_of = {(s.slot, s.instance): program.models[s.model] for s in binding.seats}
    costs = {b.node: b.cost for b in call_bounds(calls, model_of, program.roles, system.task_tokens)}
    router, left, right = (costs[c.id] for c in calls)
    assert router + left + right > system.budget  # the sum would not fit ...
    assert binding.worst_case_cost == pytest.approx(router + max(left, right))  # ... the route does


LISTS_READ_LATER = """
model dear { provider = fake  name = "d"  price { input = 10  output = 10 }  tier = 1 }
model cheap { provider = fake  name = "c"  price { input = 0.1  output = 1 }  tier = 2 }
role Router { max_output = 4  prompt = "Route {{task}}" }
role Agent { max_output = 100  prompt = "Answer {{task}}" }
role Formatter { max_output = 10  prompt = "Format {{picked}}" }
topology t {
  slot router    : Router    [1..1]
  slot many      : Agent     [2..2]
  slot one       : Agent     [1..1]
  slot formatter : Formatter [1..1]
  flow {
    picked = route router(task) { wide: parallel many(task)  otherwise: one(task) }
    answer formatter(picked)
  }
}
system s { models = [dear, cheap]  topologies = [t]  budget = %s  task_tokens = 10 }
"""


def test_a_reader_of_a_route_pays_for_its_largest_branch_answer_in_the_milp_too(tmp_path):
    """By hand, all on `dear` (10 µ$ a token in and out): router 24 in + 4 out = 280; each Agent
    call 25 + 100 = 1,250; the formatter reads `Format ` (7 bytes + 8 message tokens) and the
    larger answer, the list of two (100 + 100 and its numbering `[1] `, `[2] `, a blank line:
    4 + 4 + 2), so 225 in + 10 out = 2,350. The wide branch is the costlier (2,500): the bound
    is 280 + 2,500 + 2,350 = 5,130. Had the formatter been charged every answer (all three,
    numbered: 331 tokens), it would be 6,190, and a budget of 5,200 would put it on `cheap`."""
    program = load(tmp_path, LISTS_READ_LATER % 5200)
    system = program.systems["s"]
    binding = bind.bind_template(program, system, "t", system.budget)
    assert binding.feasible
    assert {seat.model for seat in binding.seats} == {"dear"}
    assert binding.worst_case_cost == pytest.approx(5130.0)
    formatter = next(bound for bound in binding.bounds if bound.node.startswith("formatter"))
    assert formatter.input_tokens == 225
    for budget in (5129, 5130):  # the MILP and enumeration agree with brute force at the edge
        assert_binds_like_brute_force(load(tmp_path, LISTS_READ_LATER % budget), LISTS_READ_LATER)


def test_a_branch_pays_for_what_is_read_of_its_answer(tmp_path):
    """By hand, at 10 µ$ a token: router 24 + 4 tokens = 280. `wide` makes two Agent calls of
    26 + 100 tokens (2,520) and answers a list of 210 tokens (two outputs, numbered); `deep` chains
    three, 26, 126 and 126 in, 100 out each (5,780), and answers 100 tokens; `otherwise` answers
    the task, 10 tokens. The formatter: `Format ` and 8 message tokens in, 10 out (250), plus its
    read of the answer, paid in the branch that made it: 2,100 in `wide`, 1,000 in `deep`, 100 in
    `otherwise`. So wide costs 4,620, deep 6,780, and the bound is 280 + 6,780 + 250 = 7,310: the
    run that takes `deep`. Charging the formatter the largest answer and the task beside the
    costliest branch would say 8,510, a run no choice of branch makes."""
    program = load(tmp_path, DEEP_OR_WIDE % 7310)
    system = program.systems["s"]
    binding = bind.bind_template(program, system, "t", system.budget)
    assert binding.feasible
    assert binding.worst_case_cost == pytest.approx(7310.0)
    assert not bind.bind_template(program, system, "t", 7309.0).feasible
    for budget in (7309, 7310):
        assert_binds_like_brute_force(load(tmp_path, DEEP_OR_WIDE % budget), DEEP_OR_WIDE)
