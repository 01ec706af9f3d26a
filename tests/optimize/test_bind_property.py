"""Template binding against brute force on random small systems (hypothesis)."""

from __future__ import annotations

import itertools

import networkx as nx
from hypothesis import HealthCheck, given, settings

from bamasc.ir.budget import check_loaded as check
from bamasc.check.linear import linear_row
from bamasc.ir.bounds import call_bounds, worst_case_cost
from bamasc.ir.graph import call_graph, verified_cost
from bamasc.ir.unroll import unroll
from bamasc.loader import load
from bamasc.optimize.bind import _seat_floor, _seat_problem, bind_template
from bamasc.optimize.exact import has_idle_seat
from bamasc.optimize.problem import RequireRow
from tests.helpers.systems import systems


def brute_force(program, system, name):
    """Every count vector, every ordered model choice per instance, exact bounds: the best key."""
    topology = program.topologies[name]
    pool = [program.models[m] for m in system.models]
    tiers = sorted({m.tier for m in pool})
    slot_index = {slot.name: i for i, slot in enumerate(topology.slots)}
    rows = tuple(
        RequireRow(tuple((slot_index[s], t, c) for s, t, c in r.terms), r.sense, r.rhs)
        for r in (linear_row(req) for req in topology.requires)
    )
    feasible = []
    for vector in itertools.product(*[range(s.lo, s.hi + 1) for s in topology.slots]):
        counts = dict(zip(slot_index, vector))
        unrolled = unroll(topology, counts)
        if has_idle_seat(unrolled, counts):
            continue
        problem = _seat_problem(program, system, topology, pool, counts, unrolled, rows, system.budget)
        per_slot = []
        for s, slot in enumerate(topology.slots):
            order = problem.strength_order(s)
            # instance k never stronger than instance k-1: non-decreasing positions in the order
            per_slot.append(list(itertools.combinations_with_replacement(order, counts[slot.name])))
        for choice in itertools.product(*per_slot):
            model_of = {}
            seats = []
            for slot, models in zip(topology.slots, choice):
                for k, m in enumerate(models):
                    model_of[(slot.name, k)] = pool[m]
                    seats.append((slot_index[slot.name], m))
            if len(seats) < system.min_agents:
                continue
            if not all(_row_holds(row, seats, pool) for row in rows):
                continue
            bounds = call_bounds(unrolled.calls, model_of, program.roles, system.task_tokens)
            cost = worst_case_cost(unrolled.calls, bounds, unrolled.choices)
            if cost > system.budget * (1 + 1e-9):
                continue
            tier_seats = tuple(sum(pool[m].tier == t for _, m in seats) for t in tiers)
            quality = sum(pool[m].quality_for(topology.slots[s].role) for s, m in seats)
            feasible.append((tier_seats, round(quality, 9), cost))
    return feasible


def _row_holds(row, seats, pool) -> bool:
    total = sum(coef * sum(1 for s, m in seats if s == slot and (tier is None or pool[m].tier == tier)) for slot, tier, coef in row.terms)
    return {"<=": total <= row.rhs, ">=": total >= row.rhs, "==": total == row.rhs}[row.sense]


# Derandomized so that every run tries the same programs; `test_weights_count_seats_of_smaller_vectors`
# keeps the program a fresh draw once found.
@settings(max_examples=150, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(source=systems())
def test_binding_matches_brute_force(tmp_path, source):
    path = tmp_path / "random.bam"
    path.write_text(source, encoding="utf-8")
    program, diagnostics = check(load(str(path)))
    # The lint-time floor may already call the budget unreachable; the binder must agree.
    assert [d.code for d in diagnostics if d.severity == "error"] in ([], ["BAM404"]), [d.message for d in diagnostics]
    system = program.systems["s"]
    found = bind_template(program, system, "t")
    candidates = brute_force(program, system, "t")
    assert found.feasible == bool(candidates)
    if not candidates:
        # The infeasible report names the smallest workable budget; it must lie above this one.
        assert found.cheapest_cost is None or found.cheapest_cost > system.budget
        return
    best = max(candidates, key=lambda c: (c[0], c[1]))
    assert (found.tier_seats, round(found.quality, 9)) == (best[0], best[1])
    # Lexicographic: no feasible binding has more seats of a stronger tier.
    assert all(c[0] <= found.tier_seats for c in candidates)
    assert found.worst_case_cost <= system.budget * (1 + 1e-9)
    graph = call_graph(found.unrolled.calls, found.bounds)
    assert nx.is_directed_acyclic_graph(graph)
    trusted = {call.id: call for call in found.unrolled.calls}
    total = verified_cost(graph, program.roles, program.models, system.task_tokens, trusted)
    assert abs(total - found.worst_case_cost) < 1e-6
    # Both tier objectives agree wherever the paper's weights are exact.
    weighted = bind_template(program, system, "t", method="weights")
    assert (weighted.tier_seats, round(weighted.quality, 9)) == (found.tier_seats, round(found.quality, 9))


# An executor with no critic is asked once, but at the template's largest counts (one critic) it is
# asked once per revision too: its seat on the tier-2 model then costs more than the budget of 205,
# although a binding with it fits. The paper's weights took that cost as the least a tier-2 seat
# may cost, weighed tier 2 at zero seats, and so let quality rank 2 + 1 seats above 3 + 0.
WEIGHTS_CASE = """
model m0 { provider = fake name = "m0" tier = 1 price { input = 0.05 output = 2.0 } }
model m1 { provider = fake name = "m1" tier = 2 price { input = 0.05 output = 2.0 } }
model m2 { provider = fake name = "m2" tier = 1 quality = 0.8 price { input = 0.1 output = 0.4 } }
role R1 { max_output = 64 prompt = "Do {{task}} {{previous?}}" }
role R2 { max_output = 64 prompt = "Check {{task}} {{solution?}}" }
topology t {
 slot p : R2 [1..1]
 slot a : R1 [1..2]
 slot c : R2 [0..1]
 flow {
 s = plan p(task) using a review c max_steps 2
 answer s
 }
}
system s { models = [m0, m1, m2] topologies = [t] budget = 205 task_tokens = 10 min_agents = 0 }
"""


def test_weights_count_seats_of_smaller_vectors(tmp_path):
    path = tmp_path / "weights.bam"
    path.write_text(WEIGHTS_CASE, encoding="utf-8")
    program, _ = check(load(str(path)))
    system = program.systems["s"]
    best = max(brute_force(program, system, "t"), key=lambda c: (c[0], c[1]))
    assert best[:2] == ((3, 0), 2.4)
    for method in ("lexicographic", "weights"):
        found = bind_template(program, system, "t", method=method)
        assert (found.tier_seats, round(found.quality, 9)) == best[:2], method


def test_seats_a_dynamic_plan_chooses_among_may_cost_nothing():
    # The bound takes only the costliest of a step's seats, so a seat of another may add nothing:
    # the weights then bound its tier by the seats the template allows, not by a call's price.
    program, _ = check(load("examples/gsm8k.bam"))
    system = program.systems["gsm8k"]
    topology = program.topologies["planner"]
    pool = [program.models[m] for m in system.models]
    unrolled = unroll(topology, {slot.name: slot.hi for slot in topology.slots})
    floor = dict(zip((slot.name for slot in topology.slots), _seat_floor(program, topology, pool, unrolled)))
    assert floor["executor"] == floor["critic"] == (0.0,) * len(pool)
    assert all(cost > 0 for cost in floor["planner"] + floor["formatter"])
