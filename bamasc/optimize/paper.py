"""The BAMAS reference's seat model (`--cost-model paper`): its per-seat estimate, weights and factors.

The reference ILP does not price a flow. It charges every seat the same
estimate, `task_tokens × p_in + max_tokens × p_out`, whether the seat ever runs
or how much it reads, and maximises Σ W_tier × performance × role factor over
the seats, with W_i = 1 + Σ_{j>i} W_j·⌊B/c_j⌋ and c_j the estimate of the first
(slot, tier) group in declaration order. This module reproduces that choice so
its pools can be compared with bamasc's exact binder; it does not trust the
estimate: the chosen binding's worst case is computed exactly on its unrolled
calls, and the compile driver warns (BAM506) where that exceeds the budget.

It enumerates the per-slot model counts instead of solving an ILP: the
reference's pools are a few slots of two tiers (hundreds of vectors), and
enumeration makes its ties visible and its tie-break explicit. It deliberately
does not skip seats that never run, nor apply the dominance filter: the
reference does neither.
"""

from __future__ import annotations

import itertools
import math

from bamasc.check.linear import linear_row
from bamasc.ir.bounds import call_bounds, worst_case_cost
from bamasc.ir.tokens import output_cap
from bamasc.ir.unroll import unroll
from bamasc.optimize.binding import BindingError, TemplateBinding, TemplateSeat
from bamasc.optimize.strategy import BindPath
from bamasc.records import record

MAX_VECTORS = 200_000
"""Count vectors the paper model enumerates before it refuses a template (BAM503)."""

PAPER = BindPath("paper")  # the path of every binding this module makes

PLANNER_FACTOR = 1.001  # dynamic (planner-driven) templates: the Planner role
FIXED_FACTORS = {"Critic": 1.005, "Formatter": 0.95, "OutputFormatter": 0.95}
STRONG_EXECUTOR_FACTOR = 1.01  # fixed templates: an Executor on the strongest tier
WEAK_EXECUTOR_FACTOR = 1.0
OTHER_FIXED_FACTOR = 0.90  # fixed templates: any role not named above


class TooManyVectors(Exception):
    """The template's slots combine in more ways than the paper model enumerates."""


@record
class PaperSeat:
    """One (slot, model) group of the reference's pool: its estimate and objective weight per seat."""

    slot: int
    model: int
    estimate: float  # µ$ per seat: task_tokens × p_in + output cap × p_out
    weight: float  # W_tier × quality for the slot's role × role factor


@record
class PaperChoice:
    """The reference's pool for one template: model counts per slot, what it estimates, what it scores."""

    counts: tuple[tuple[int, ...], ...]  # counts[slot][model]
    estimate: float
    score: float


def seat_estimate(role, model, task_tokens: int) -> float:
    """The reference's price of one seat, in µ$ (prices are USD per million tokens)."""
    return model.price_input * task_tokens + model.price_output * output_cap(role, model)


def is_dynamic(topology) -> bool:
    """Planner-driven: the reference weighs these with its dynamic factors."""
    largest = {slot.name: slot.hi for slot in topology.slots}
    return any(call.combinator == "dynamic" for call in unroll(topology, largest).calls)


def role_factor(role: str, strongest: bool, dynamic: bool) -> float:
    """The reference's per-role factor, matched by role name."""
    if dynamic:
        return PLANNER_FACTOR if role == "Planner" else 1.0
    if role == "Executor":
        return STRONG_EXECUTOR_FACTOR if strongest else WEAK_EXECUTOR_FACTOR
    return FIXED_FACTORS.get(role, OTHER_FIXED_FACTOR)


def tier_weights(groups: list[tuple[int, float]], budget: float) -> dict[int, float]:
    """W per tier from (tier, group estimate) in group order: the first group of a tier sets its c_j."""
    first: dict[int, float] = {}
    for tier, estimate in groups:
        first.setdefault(tier, estimate)
    levels = sorted(first)
    weights = {levels[-1]: 1.0}
    for i in range(len(levels) - 2, -1, -1):
        below = levels[i + 1 :]
        weights[levels[i]] = 1.0 + sum(weights[j] * math.floor(budget / first[j]) for j in below if first[j] > 0)
    return weights


def paper_seats(program, system, topology, pool, budget: float) -> list[PaperSeat]:
    """Every (slot, model) group with its estimate and weight, slots in order, models in pool order."""
    dynamic = is_dynamic(topology)
    strongest = min(model.tier for model in pool)
    groups = []
    for slot in topology.slots:
        role = program.roles[slot.role]
        for tier in sorted({m.tier for m in pool}, key=[m.tier for m in pool].index):
            members = [seat_estimate(role, m, system.task_tokens) for m in pool if m.tier == tier]
            groups.append((tier, math.fsum(members) / len(members)))
    weights = tier_weights(groups, budget)
    seats = []
    for s, slot in enumerate(topology.slots):
        role = program.roles[slot.role]
        for m, model in enumerate(pool):
            factor = role_factor(slot.role, model.tier == strongest, dynamic)
            weight = weights[model.tier] * model.quality_for(slot.role) * factor
            seats.append(PaperSeat(s, m, seat_estimate(role, model, system.task_tokens), weight))
    return seats


def _slot_vectors(slot, models: int):
    """Every way to fill the slot: model counts whose sum is within its range, fewest seats first."""
    for total in range(slot.lo, slot.hi + 1):
        for cut in itertools.combinations(range(total + models - 1), models - 1):
            bounds = (-1, *cut, total + models - 1)
            yield tuple(bounds[i + 1] - bounds[i] - 1 for i in range(models))


def best_pool(program, system, topology, pool, budget: float) -> tuple[PaperChoice | None, float | None]:
    """The reference's choice under `budget` and the cheapest estimate any pool meeting the rules has.

    Best is the highest score; ties go to the lower estimate, then to the
    first vector in enumeration order. (None, None) when the rules conflict."""
    seats = paper_seats(program, system, topology, pool, budget)
    by_slot = [[seat for seat in seats if seat.slot == s] for s in range(len(topology.slots))]
    per_slot = [list(_slot_vectors(slot, len(pool))) for slot in topology.slots]
    if math.prod(len(options) for options in per_slot) > MAX_VECTORS:
        raise TooManyVectors(
            f"template '{topology.name}' has more than {MAX_VECTORS} model-count combinations for the paper cost model"
        )
    rows = [linear_row(r) for r in topology.requires]
    slot_index = {slot.name: i for i, slot in enumerate(topology.slots)}
    best, cheapest = None, None
    limit = budget * (1 + 1e-9)
    for vector in itertools.product(*per_slot):
        if sum(map(sum, vector)) < system.min_agents or not _meets(rows, slot_index, vector, pool):
            continue
        estimate = math.fsum(g.estimate * n for groups, counts in zip(by_slot, vector) for g, n in zip(groups, counts))
        cheapest = estimate if cheapest is None else min(cheapest, estimate)
        if estimate > limit:
            continue
        score = math.fsum(g.weight * n for groups, counts in zip(by_slot, vector) for g, n in zip(groups, counts))
        if best is None or (round(score, 9), -estimate) > (round(best.score, 9), -best.estimate):
            best = PaperChoice(vector, estimate, score)
    return best, cheapest


def _meets(rows, slot_index, vector, pool) -> bool:
    for row in rows:
        total = 0
        for slot, tier, coef in row.terms:
            counts = vector[slot_index[slot]]
            total += coef * sum(n for n, model in zip(counts, pool) if tier is None or model.tier == tier)
        if not (total <= row.rhs if row.sense == "<=" else total >= row.rhs if row.sense == ">=" else total == row.rhs):
            return False
    return True


def seats_of(topology, pool, counts) -> tuple[tuple[int, int, int], ...]:
    """(slot, instance, model) for a pool: each slot's instances filled strongest model first."""
    seats = []
    for s, per_model in enumerate(counts):
        order = sorted(range(len(pool)), key=lambda m: (pool[m].tier, -pool[m].quality_for(topology.slots[s].role), m))
        instance = 0
        for m in order:
            for _ in range(per_model[m]):
                seats.append((s, instance, m))
                instance += 1
    return tuple(seats)


def exact_cost(program, system, topology, pool, seats):
    """The exact worst case of a binding on its unrolled calls: (counts, unrolled, bounds, µ$)."""
    counts = {slot.name: 0 for slot in topology.slots}
    for s, _, _ in seats:
        counts[topology.slots[s].name] += 1
    unrolled = unroll(topology, counts)
    model_of = {(topology.slots[s].name, k): pool[m] for s, k, m in seats}
    bounds = tuple(call_bounds(unrolled.calls, model_of, program.roles, system.task_tokens))
    return counts, unrolled, bounds, worst_case_cost(unrolled.calls, bounds, unrolled.choices)


def bind_paper(program, system, template: str, budget: float | None = None):
    """The reference's pool for `template` as a bamasc binding, carrying its exact worst case.

    `feasible` means the pool's estimate fits the budget, as in the reference;
    `worst_case_cost` is still the exact bound of that binding, which may be
    above the budget (the compile driver warns, BAM506)."""
    topology = program.topologies[template]
    budget = system.budget if budget is None else budget
    pool = [program.models[name] for name in system.models]
    tiers = tuple(sorted({m.tier for m in pool}))
    try:
        choice, cheapest = best_pool(program, system, topology, pool, budget)
    except TooManyVectors as problem:
        raise BindingError(str(problem)) from None
    if choice is None:
        return unbound(template, budget, tiers, cheapest, path=PAPER)
    seats = seats_of(topology, pool, choice.counts)
    return seated(program, system, template, budget, pool, seats, choice.estimate, path=PAPER)


def unbound(template: str, budget: float, tiers, cheapest: float | None, over_budget: bool | None = None,
            path: BindPath | None = None) -> TemplateBinding:
    """The binding of a template nothing fits: `cheapest` is the least budget that would, if known;
    `over_budget` says the budget is what rules it out (by default, when `cheapest` is known)."""
    return TemplateBinding(
        template=template, budget=budget, feasible=False, counts=(), seats=(), unrolled=None, bounds=(),
        worst_case_cost=math.inf, tiers=tiers, tier_seats=tuple(0 for _ in tiers), quality=0.0, solves=0, cuts=0,
        cheapest_cost=cheapest, estimate=None,
        binding_rows=("budget",) if (cheapest is not None if over_budget is None else over_budget) else (),
        path=path,
    )


def seated(program, system, template: str, budget: float, pool, seats, estimate: float | None = None,
           path: BindPath | None = None) -> TemplateBinding:
    """The binding of these (slot, instance, model) seats, with their exact worst case."""
    topology = program.topologies[template]
    tiers = tuple(sorted({m.tier for m in pool}))
    counts, unrolled, bounds, exact = exact_cost(program, system, topology, pool, seats)
    return TemplateBinding(
        template=template,
        budget=budget,
        feasible=True,
        counts=tuple(counts.items()),
        seats=tuple(TemplateSeat(topology.slots[s].name, k, pool[m].name) for s, k, m in seats),
        unrolled=unrolled,
        bounds=bounds,
        worst_case_cost=exact,
        tiers=tiers,
        tier_seats=tuple(sum(pool[m].tier == t for _, _, m in seats) for t in tiers),
        quality=math.fsum(pool[m].quality_for(topology.slots[s].role) for s, _, m in seats),
        solves=0,
        cuts=0,
        cheapest_cost=None,
        binding_rows=(),
        estimate=estimate,
        path=path,
    )
