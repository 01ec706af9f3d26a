"""A greedy cost-aware binder (`--method greedy`): the BAMAS paper's ablation of its ILP.

Seats are filled one at a time and never revisited. Each slot's minimum
instances come first (slots in declaration order), each on the strongest
model (tier, then quality for the slot's role, then pool order) that still
leaves a binding within the budget when every seat not yet filled takes the
cheapest model; then the slots grow one instance at a time, in turn, each new
instance on the strongest model that keeps the exact worst case within the
budget, until no slot can grow. Every check uses the exact bound of the whole
binding on its unrolled calls, so a greedy plan's bound is proven like any
other; what greedy gives up is optimality (it spends the budget on the first
seats it meets). It skips instances that would never be called, as the MILP
does, and keeps `require` rows and `min_agents`.
"""

from __future__ import annotations

from bamasc.check.linear import linear_row
from bamasc.ir.unroll import unroll
from bamasc.optimize.exact import has_idle_seat
from bamasc.optimize.paper import exact_cost, seated, unbound
from bamasc.optimize.strategy import BindPath

TOLERANCE = 1e-9
GREEDY = BindPath("greedy")  # the path of every binding this module makes


def _preference(pool, role: str) -> list[int]:
    return sorted(range(len(pool)), key=lambda m: (pool[m].tier, -pool[m].quality_for(role), m))


def _rows_hold(rows, topology, pool, seats) -> bool:
    slot_of = {slot.name: s for s, slot in enumerate(topology.slots)}
    for row in rows:
        total = sum(
            coef * sum(1 for s, _, m in seats if s == slot_of[slot] and (tier is None or pool[m].tier == tier))
            for slot, tier, coef in row.terms
        )
        if not (total <= row.rhs if row.sense == "<=" else total >= row.rhs if row.sense == ">=" else total == row.rhs):
            return False
    return True


def greedy_seats(program, system, topology, pool, budget: float):
    """The greedy binding as (slot, instance, model) seats, or None when even the cheapest start breaks a rule."""
    rows = [linear_row(r) for r in topology.requires]
    limit = budget * (1 + TOLERANCE)

    def fits(seats) -> bool:
        return _rows_hold(rows, topology, pool, seats) and exact_cost(program, system, topology, pool, seats)[3] <= limit

    order = [(s, k) for s, slot in enumerate(topology.slots) for k in range(slot.lo)]
    seats: list[tuple[int, int, int]] = []
    for i, (s, k) in enumerate(order):
        rest = order[i + 1 :]
        for m in _preference(pool, topology.slots[s].role):
            trial = [*seats, (s, k, m)]
            filled = trial + [(t, j, _cheapest(pool)) for t, j in rest]
            if fits(tuple(filled)):
                seats = trial
                break
        else:
            return None
    seats_t = tuple(seats)
    counts = {slot.name: slot.lo for slot in topology.slots}
    growing = [s for s, slot in enumerate(topology.slots) if slot.hi > slot.lo]
    while growing:
        for s in list(growing):
            slot = topology.slots[s]
            grown = dict(counts, **{slot.name: counts[slot.name] + 1})
            if has_idle_seat(unroll(topology, grown), grown):
                growing.remove(s)
                continue
            for m in _preference(pool, slot.role):
                trial = (*seats_t, (s, counts[slot.name], m))
                if fits(trial):
                    seats_t, counts = trial, grown
                    break
            else:
                growing.remove(s)
                continue
            if counts[slot.name] == slot.hi:
                growing.remove(s)
    if len(seats_t) < system.min_agents or not fits(seats_t):
        return None
    return seats_t


def _cheapest(pool) -> int:
    """The look-ahead's model for a seat not yet filled: the lowest prices (a lower bound on its cost)."""
    return min(range(len(pool)), key=lambda m: (pool[m].price_input + pool[m].price_output, m))


def bind_greedy(program, system, template: str, budget: float | None = None):
    """The greedy binding of `template` as a TemplateBinding, with its exact worst case."""
    topology = program.topologies[template]
    budget = system.budget if budget is None else budget
    pool = [program.models[name] for name in system.models]
    tiers = tuple(sorted({m.tier for m in pool}))
    seats = greedy_seats(program, system, topology, pool, budget)
    if seats is None:
        # The least budget that would do is unknown: greedy stops at the first seat it cannot fill.
        return unbound(template, budget, tiers, None, over_budget=True, path=GREEDY)
    return seated(program, system, template, budget, pool, seats, path=GREEDY)
