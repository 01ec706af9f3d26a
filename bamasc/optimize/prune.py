"""Which count vectors an enumerating bind may skip unsolved, and in what order it solves the rest.

Binding by enumeration (bind.py `_best`) solves one MILP per count vector and
keeps the best. Most of those MILPs cannot win: in examples/gsm8k.bam half of
the planner template's 18 vectors cannot fit the budget at all, and the others
hold fewer seats than the best. Each vector gets a bound first, from its
unrolled calls alone (`ir/bounds.cheapest_cost`, a lower bound on the cost of
any binding), in about a tenth of the time of its MILP:

- its cost is at least the cost of its calls each on its cheapest model, so a
  vector whose floor is above the budget has no binding;
- a seat can hold a model of tier t only if the floor with that seat held to
  the pool's tier-t models fits; so no binding has more tier-1 seats than the
  seats that may be tier 1, nor (with that many) more tier-2 seats than the
  rest that may be tier 2, and so on (`Vector.best_possible`);
- its quality is at most each seat's best quality among the tiers it may hold
  (by value, where there are no tier counts and a slot is worth its instance 0,
  that sum over the instances 0 bounds the objective).

Vectors are solved best bound first; one whose bound is below the best binding
found so far (or equal to it, later in product order, which loses ties) is
skipped. Every skip is one the exact answer allows, so the binding is the
one solving every vector gives (tests/optimize/test_prune.py checks both).
"""

from __future__ import annotations

import math

from bamasc.ir.bounds import cheapest_cost, floor_parts, floor_total
from bamasc.ir.tokens import output_cap
from bamasc.optimize.exact import has_idle_seat

# A floor within this share of the budget is not trusted to rule a binding out: it is summed in
# another order than the exact bound, so a binding exactly at the budget could show a floor just above.
MARGIN = 1e-6


class Vector:
    """One count vector of an enumerating bind, with what bounds its best binding.

    `solver` is the bind's `exact.TemplateSolver`: its pool, and its problem's tiers and qualities."""

    def __init__(self, index: int, fixed: tuple[range, ...], solver, budget: float):
        self.index = index  # in product order: ties go to the earlier vector
        self.fixed = fixed
        self.solver = solver
        self.budget = budget
        # Slots left a range are only called by padded statements (bind.py `_best`), whose calls at
        # fewer instances are a part of those at more: the unroll at the smallest counts bounds the
        # cost of every count in the ranges, and the seats at the largest bound what they score.
        slots = solver.topology.slots
        self.counts = {slot.name: r[0] for slot, r in zip(slots, fixed)}
        self.unrolled = solver.unroll(self.counts)
        self.seats = tuple((s, k) for s, r in enumerate(fixed) for k in range(r[-1]))
        self._parts = self._priced = None
        self.floor = self.least()

    def least(self, seat=None, models=None) -> float:
        """The floor of this vector's cost; with `seat` (slot index, instance), of the bindings that
        seat it on one of `models`."""
        solver = self.solver
        calls = self.unrolled.calls
        if self._parts is None:
            self._parts = floor_parts(calls, lambda call: solver.pool, solver.program, solver.system.task_tokens)
            self._priced = [part.priced(solver.pool) for part in self._parts]
        if seat is None:
            return floor_total(calls, self._priced)
        slot = solver.topology.slots[seat[0]]
        role = solver.program.roles[slot.role]
        if min(output_cap(role, m) for m in models) != min(output_cap(role, m) for m in solver.pool):
            # Its smaller outputs change what later calls read: priced again from the start.
            pools = {(slot.name, seat[1]): models}
            return cheapest_cost(calls, solver.pool, solver.program, solver.system.task_tokens, pools)
        priced = [
            part.priced(models) if (call.slot, call.instance) == (slot.name, seat[1]) else base
            for call, part, base in zip(calls, self._parts, self._priced)
        ]
        return floor_total(calls, priced)

    def fits(self, cost: float) -> bool:
        return cost <= self.budget * (1 + MARGIN) + MARGIN

    def possible(self) -> bool:
        """Could any binding of this vector fit the budget (no instance left without a call)?"""
        idle = all(len(r) == 1 for r in self.fixed) and has_idle_seat(self.unrolled, self.counts)
        return not idle and self.fits(self.floor)

    def cannot_win(self, incumbent: tuple, earlier: bool) -> bool:
        """Does every binding of this vector score below `incumbent` (or equal, being later in product
        order)? Seats are counted tier by tier, strongest first, until the answer is known."""
        problem = self.solver.order
        if problem.by_value:
            return self._below(self._most_value(), incumbent, earlier)
        levels = problem.tier_levels
        if len(self.seats) < incumbent[0]:
            return True
        left = sorted(self.seats)
        level_of: dict[tuple[int, int], int] = {}
        for position, level in enumerate(levels):
            most = incumbent[position]
            if position + 1 == len(levels):
                held = left  # a seat left fits the last tier or none: bounded either way
            else:
                models = [model for m, model in enumerate(self.solver.pool) if problem.tiers[m] == level]
                held = []
                for seat in left:
                    if self.fits(self.least(seat, models)):
                        held.append(seat)
                        if len(held) > most:
                            return False  # more seats of this tier than the incumbent may have
            if len(held) < most:
                return True
            if len(held) > most:
                return False
            level_of.update((seat, level) for seat in held)
            left = [seat for seat in left if seat not in level_of]
        pool = range(len(self.solver.pool))
        quality = sum(max(problem.quality[s][m] for m in pool if problem.tiers[m] == level_of[s, k]) for s, k in self.seats)
        return self._below(quality, tuple(incumbent[len(levels) :]), earlier)

    def _below(self, quality: float, incumbent: tuple, earlier: bool) -> bool:
        """Is (at most `quality`, at least the floor's cost) below the incumbent's (quality, -cost)?"""
        bound = (round(quality, 9) + 1e-9, -self.floor * (1 - MARGIN))
        return bound < incumbent or (bound == incumbent and not earlier)

    def _most_value(self) -> float:
        """By value: each slot's highest value among the tiers whose models its instance 0 may hold
        within the budget (the other instances are worth nothing)."""
        problem = self.solver.order
        total = 0.0
        for s, k in self.seats:
            if k > 0:
                continue
            best = 0.0
            for level in problem.tier_levels:
                members = [m for m in range(len(self.solver.pool)) if problem.tiers[m] == level]
                most = max(problem.quality[s][m] for m in members)
                if most > best and self.fits(self.least((s, k), [self.solver.pool[m] for m in members])):
                    best = most
            total += best
        return total
