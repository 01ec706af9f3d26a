"""Skipping count vectors unsolved (optimize/prune.py): the floors it trusts are floors, and what it
skips never changes the binding.

Each attack is on a random small system of `tests.helpers.systems.systems` (derandomized): every
binding of every count vector is priced exactly and set against the floors, and the binder is run
with and without skipping.
"""

from __future__ import annotations

import itertools

from hypothesis import HealthCheck, given, settings

from bamasc.ir.bounds import call_bounds, cheapest_cost, worst_case_cost
from bamasc.ir.budget import check_loaded as check
from bamasc.ir.unroll import unroll
from bamasc.loader import load
from bamasc.optimize import prune
from bamasc.optimize.bind import bind_template
from bamasc.optimize.exact import TemplateSolver, has_idle_seat
from tests.helpers.systems import systems

SETTINGS = settings(max_examples=120, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture])


def _program(tmp_path, source):
    path = tmp_path / "random.bam"
    path.write_text(source, encoding="utf-8")
    program, _ = check(load(str(path)))
    return program, program.systems["s"]


def _bindings(topology, pool, counts):
    """Every model for every seat of one count vector (no numbering rule: more than the binder tries)."""
    seats = [(slot.name, k) for slot in topology.slots for k in range(counts[slot.name])]
    for models in itertools.product(pool, repeat=len(seats)):
        yield dict(zip(seats, models))


@SETTINGS
@given(source=systems())
def test_no_binding_costs_less_than_its_floors(tmp_path, source):
    program, system = _program(tmp_path, source)
    topology = program.topologies["t"]
    pool = [program.models[m] for m in system.models]
    for vector in itertools.product(*[range(s.lo, s.hi + 1) for s in topology.slots]):
        counts = {slot.name: n for slot, n in zip(topology.slots, vector)}
        unrolled = unroll(topology, counts)
        if len(pool) ** sum(vector) > 400:
            continue
        floor = cheapest_cost(unrolled.calls, pool, program, system.task_tokens)
        for model_of in _bindings(topology, pool, counts):
            bounds = call_bounds(unrolled.calls, model_of, program.roles, system.task_tokens)
            exact = worst_case_cost(unrolled.calls, bounds, unrolled.choices)
            assert floor <= exact * (1 + 1e-9) + 1e-9, (counts, model_of)
            for seat, model in model_of.items():
                # The floor of the bindings that keep this seat to this model's tier.
                tier = [m for m in pool if m.tier == model.tier]
                held = cheapest_cost(unrolled.calls, pool, program, system.task_tokens, {seat: tier})
                assert held <= exact * (1 + 1e-9) + 1e-9, (counts, seat, model.name)


# Templates of rotating slots only: those are bound by enumeration, where vectors are skipped.
ENUMERATED = systems().filter(lambda source: " refine " in source or " plan " in source)


@SETTINGS
@given(source=ENUMERATED)
def test_skipping_vectors_never_changes_the_binding(tmp_path, source, monkeypatch):
    program, system = _program(tmp_path, source)
    skipped = bind_template(program, system, "t")
    with monkeypatch.context() as patch:
        patch.setattr(prune.Vector, "cannot_win", lambda self, incumbent, earlier: False)
        patch.setattr(prune.Vector, "fits", lambda self, cost: True)
        solved = bind_template(program, system, "t")
    assert skipped.feasible == solved.feasible
    assert (skipped.counts, skipped.seats, skipped.worst_case_cost) == (solved.counts, solved.seats, solved.worst_case_cost)
    assert skipped.cheapest_cost == solved.cheapest_cost
    assert skipped.binding_rows == solved.binding_rows
    assert skipped.solves <= solved.solves


def test_the_floor_of_a_vector_counts_every_instance_it_may_call():
    # A vector's floor is priced on the unroll at its smallest counts, each seat at its largest:
    # padded slots left a range may only add calls.
    program, _ = check(load("examples/gsm8k.bam"))
    system = program.systems["gsm8k"]
    topology = program.topologies["planner"]
    pool = [program.models[m] for m in system.models]
    solver = TemplateSolver(program, system, topology, pool, None, "lexicographic")
    ranges = (range(1, 2), range(1, 4), range(0, 3), range(1, 2))
    vector = prune.Vector(0, ranges, solver, system.budget)
    assert len(vector.seats) == 1 + 3 + 2 + 1
    counts = {"planner": 1, "executor": 1, "critic": 0, "formatter": 1}
    assert vector.floor == cheapest_cost(unroll(topology, counts).calls, pool, program, system.task_tokens)
    assert not has_idle_seat(vector.unrolled, counts)


def test_the_planner_of_gsm8k_needs_one_solve():
    # Half of its 18 vectors cannot fit the budget at all, and no other holds more seats than the
    # one with the most that fits (each of its seats would have to be on the weaker model).
    program, _ = check(load("examples/gsm8k.bam"))
    system = program.systems["gsm8k"]
    found = bind_template(program, system, "planner")
    assert found.feasible and found.solves == 1
    assert dict(found.counts) == {"planner": 1, "executor": 3, "critic": 2, "formatter": 0}
