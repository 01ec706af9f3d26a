"""Output caps the binder chooses: a role's `max_output = lo..hi`, one cap per seat inside the range.

The objective is lexicographic: the strongest tiers first, then the largest
caps, then quality, then cost. Caps are one number here, a *level* from 0 to
`steps` (the widest range of the template's roles): at level j every ranged
role's cap is lo + (hi − lo)·j // steps, so every range is the same share of
the way up (`ir/tokens.caps_at`), and a seat's cap is its role's cap at that
level, or its model's own smaller `max_output`.

How it is found, with any binder of fixed caps (`bind_fixed`):

- Tiers. A smaller cap never makes a call dearer or slower (it bills fewer
  output tokens, and fewer input tokens downstream), so every binding that
  fits at some level also fits at level 0: the best tier counts at any caps
  are those at the smallest caps. The template is bound once there.
- Caps. For the same reason the bindings with those tier counts that fit at
  level j are a subset of those at level j − 1: whether the best tier counts
  still fit is monotone in j, and a bisection over the levels finds the
  largest level that keeps them (one bind per halving: 1 + ⌈log2(steps + 1)⌉
  binds in all, each exact for its level).
- Quality, then cost: the binder's own objectives, at that level.

What it does not do: caps of one role are not raised further on seats where
the budget would allow it (every range moves up together, so what is left of
the budget is less than one level's step on every ranged seat), and a budget
that is not enough at the smallest caps is reported as it is there
(`cheapest_cost` is the least budget that fits with every range at its low end).
"""

from __future__ import annotations

from collections.abc import Callable

from bamasc.ir.tokens import caps_at, output_cap, ranged_roles
from bamasc.optimize.binding import TemplateBinding
from bamasc.program import Program, Topology
from bamasc.records import replace

FixedBinder = Callable[[Program], TemplateBinding]


def cap_steps(program: Program, topology: Topology) -> int:
    """The levels the template's caps may take, less one: its widest range (0 when every cap is fixed)."""
    ranged = ranged_roles(program, {slot.role for slot in topology.slots})
    return max((role.max_output - role.min_output for role in ranged.values()), default=0)


def bind_with_caps(bind_fixed: FixedBinder, program: Program, topology: Topology) -> TemplateBinding:
    """The binding of the template whose roles' ranges `bind_fixed` (which binds a program of fixed caps)
    sees at the largest level that keeps the best tier counts, each seat's cap recorded on it."""
    steps = cap_steps(program, topology)
    best = bind_fixed(caps_at(program, 0, steps))
    if not best.feasible or steps == 0:
        return _with_seat_caps(best, program, topology, 0, steps)
    largest = bind_fixed(caps_at(program, steps, steps))  # often the budget holds every range at its top
    if largest.feasible and largest.tier_seats == best.tier_seats:
        return _with_seat_caps(largest, program, topology, steps, steps)
    low, high, level = 1, steps - 1, 0
    while low <= high:
        middle = (low + high) // 2
        found = bind_fixed(caps_at(program, middle, steps))
        if found.feasible and found.tier_seats == best.tier_seats:
            best, level, low = found, middle, middle + 1
        else:
            high = middle - 1
    return _with_seat_caps(best, program, topology, level, steps)


def _with_seat_caps(binding: TemplateBinding, program: Program, topology: Topology, level: int, steps: int):
    """`binding` with each seat of a ranged role given its cap at `level` (on its model)."""
    at_level = caps_at(program, level, steps)
    roles = {slot.name: slot.role for slot in topology.slots}
    ranged = ranged_roles(program, set(roles.values()))
    seats = tuple(
        replace(seat, cap=output_cap(at_level.roles[roles[seat.slot]], program.models[seat.model]))
        if roles[seat.slot] in ranged else seat
        for seat in binding.seats
    )
    return replace(binding, seats=seats)
