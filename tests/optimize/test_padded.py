"""The combinators whose units say they are padded (ir/walk.padded) really are, and naming one wrongly cannot make a plan unsafe.

The binder trusts `padded` to skip comparing a statement's unroll at every count
with its largest one (`optimize/statements.Flow`). Here the comparison is run
anyway, over random templates and slot ranges, and must agree.
"""

from __future__ import annotations

import random

import pytest

from bamasc.ir import walk
from bamasc.ir.bounds import call_bounds, worst_case_cost
from bamasc.ir.unroll import unroll
from bamasc.optimize import bind
from bamasc.optimize.errors import SolverError
from bamasc.optimize.statements import Flow
from tests.helpers.milp import FLOWS, load, random_source

FLOWS_WITH_REF = FLOWS + [("ref", ["executor:Executor"], "done = chain executor(task)\n    answer done")]


def _ranges(rng: random.Random, topology):
    ranges = []
    for slot in topology.slots:
        lo = rng.randint(slot.lo, slot.hi)
        ranges.append(range(lo, rng.randint(lo, slot.hi) + 1))
    return tuple(ranges)


@pytest.mark.parametrize("seed", range(40))
def test_every_combinator_named_padded_is_padded(tmp_path, monkeypatch, seed):
    rng = random.Random(seed)
    monkeypatch.setattr("tests.helpers.milp.FLOWS", FLOWS_WITH_REF)
    _, source = random_source(rng)
    program = load(tmp_path, source)
    system = program.systems["s"]
    topology = program.topologies["t"]
    trusted = Flow(program, system, topology)
    compared = Flow(program, system, topology, trust_padded=False)
    for _ in range(4):
        ranges = _ranges(rng, topology)
        for fast, slow, stmt in zip(trusted.statements(ranges), compared.statements(ranges), topology.flow):
            if walk.padded(stmt.expr):
                assert slow.padded, f"{type(stmt.expr).__name__} says it is padded but its unrolls differ"
                assert fast == slow
            else:
                assert not fast.padded or fast == slow


@pytest.mark.parametrize("seed", range(40))
def test_rotating_slots_are_those_of_the_statements_not_padded(tmp_path, seed):
    # `Flow.rotating` stops comparing a statement's unrolls at the first that differs.
    rng = random.Random(seed)
    _, source = random_source(rng)
    program = load(tmp_path, source)
    topology = program.topologies["t"]
    for _ in range(4):
        ranges = _ranges(rng, topology)
        lazy = Flow(program, program.systems["s"], topology).rotating(ranges)
        every = Flow(program, program.systems["s"], topology).statements(ranges)
        assert lazy == sorted({s for statement in every if not statement.padded for s in statement.slots})


def test_all_padded_combinators_are_exercised(tmp_path):
    seen = set()
    for _, _, flow in FLOWS_WITH_REF:
        for line in flow.splitlines():
            word = line.split("=")[-1].split()[0] if "=" in line else line.split()[1]
            seen.add(word)
    # chain, parallel, vote(...), a plain slot call (formatter) and a reference (done)
    assert {"chain", "parallel", "vote(drafts)", "formatter(task,", "done"} <= seen


def test_a_combinator_wrongly_named_padded_never_yields_an_unsafe_plan(tmp_path, monkeypatch):
    """`refine` rotates instances with the counts; claiming it is padded must end in a refusal
    (BAM504's SolverError) or a binding whose recomputed bound is within the budget, never a
    plan whose bound is understated."""
    from bamasc.combinators import plan, refine

    monkeypatch.setattr(refine.Refine, "padded", True)
    monkeypatch.setattr(plan.Plan, "padded", True)
    rng = random.Random(7)
    refusals = bindings = 0
    for seed in range(30):
        rng.seed(seed)
        _, source = random_source(rng)
        if "refine" not in source and "plan planner" not in source:
            continue
        program = load(tmp_path, source)
        system = program.systems["s"]
        try:
            template = bind.bind_template(program, system, "t", system.budget)
        except SolverError:
            refusals += 1
            continue
        if not template.feasible:
            continue
        bindings += 1
        model_of = {(seat.slot, seat.instance): program.models[seat.model] for seat in template.seats}
        unrolled = unroll(program.topologies["t"], dict(template.counts))
        bounds = call_bounds(unrolled.calls, model_of, program.roles, system.task_tokens)
        exact = worst_case_cost(unrolled.calls, bounds, unrolled.choices)
        assert exact <= template.worst_case_cost + 1e-6
        assert template.worst_case_cost <= system.budget + 1e-6
    # The false claim does change answers (some compiles are refused), and no binding was unsafe.
    assert refusals >= 1 and bindings >= 1
