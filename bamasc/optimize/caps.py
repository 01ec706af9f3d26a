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
  still fit is monotone in j, so the largest level that keeps them is found
  by binds at single levels, each exact for its level: first the top level;
  then the level at which the binding kept last still fits by its own bound
  as the binder prices it (so that level is usually kept), and the level
  above it, which shows whether other models go further; after three such
  probes, or one that fails, bisection. A probe only ever narrows the
  levels by a bind's answer, so the hints change how fast, not what. In examples/gsm8k.bam with every cap a range
  that is 4 binds a template, against 11 for bisection alone.
- Quality, then cost: the binder's own objectives, at that level.

What it does not do: caps are not raised seat by seat past the level (every
range moves up together, and the next level does not fit), and a budget
that is not enough at the smallest caps is reported as it is there
(`cheapest_cost` is the least budget that fits with every range at its low end).
"""

from __future__ import annotations

from collections.abc import Callable

from bamasc.ir.bounds import call_bounds, worst_case_cost
from bamasc.ir.latency import worst_case_latency
from bamasc.ir.tokens import caps_at, output_cap, ranged_roles
from bamasc.optimize.binding import TemplateBinding
from bamasc.program import Program, System, Topology
from bamasc.records import replace

FixedBinder = Callable[[Program], TemplateBinding]
# Binds tried at levels a kept binding's own bound points to, before plain bisection.
HINTS = 3


def cap_steps(program: Program, topology: Topology) -> int:
    """The levels the template's caps may take, less one: its widest range (0 when every cap is fixed)."""
    ranged = ranged_roles(program, {slot.role for slot in topology.slots})
    return max((role.max_output - role.min_output for role in ranged.values()), default=0)


def bind_with_caps(bind_fixed: FixedBinder, program: Program, system: System, topology: Topology) -> TemplateBinding:
    """The binding of the template whose roles' ranges `bind_fixed` (which binds a program of fixed caps)
    sees at the largest level that keeps the best tier counts, each seat's cap recorded on it."""
    steps = cap_steps(program, topology)
    best = bind_fixed(caps_at(program, 0, steps))
    if not best.feasible or steps == 0:
        return _with_seat_caps(best, program, topology, 0, steps)
    kept, high = 0, steps  # the largest level a bind has shown to keep the tiers; no level above `high` does
    hints = HINTS  # probes still allowed off a hint; then bisection, log2 of what is left
    probe, hinted = steps, False  # often the budget holds every range at its top
    while True:
        found = bind_fixed(caps_at(program, probe, steps))
        if found.feasible and found.tier_seats == best.tier_seats:
            best, kept = found, probe
        else:
            high = probe - 1
            hints = 0 if hinted else hints  # the binder prices above the hint's bound here: bisect
        if kept >= high:
            return _with_seat_caps(best, program, topology, kept, steps)
        # The level the kept binding's own seats still fit at by its bound is kept at once, most often
        # with the same models; one level above then tells whether other models do better.
        hint = _level_that_fits(best, program, system, kept, high, steps) if hints else kept
        if hint > kept:
            probe, hinted = hint, True
        elif hints:
            probe, hinted = kept + 1, False
        else:
            probe, hinted = (kept + high + 1) // 2, False
        hints = max(hints - 1, 0)


def _level_that_fits(binding: TemplateBinding, program: Program, system: System, low: int, high: int, steps: int) -> int:
    """The largest level in low..high at which `binding`'s seats, on their models, still fit its budget (as
    the binder prices them: `joint=False`) and its system's deadline; `low` when none above it does."""
    if binding.unrolled is None:
        return low
    calls = binding.unrolled.calls
    models = {(seat.slot, seat.instance): program.models[seat.model] for seat in binding.seats}

    def fits(level: int) -> bool:
        roles = caps_at(program, level, steps).roles
        bounds = call_bounds(calls, models, roles, system.task_tokens)
        if worst_case_cost(calls, bounds, binding.unrolled.choices, joint=False) > binding.budget:
            return False
        return system.deadline is None or (worst_case_latency(calls, models, roles).seconds or 0.0) <= system.deadline

    while low < high:
        middle = (low + high + 1) // 2
        low, high = (middle, high) if fits(middle) else (low, middle - 1)
    return low


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
