"""Solves a template's MILP over given slot ranges and checks the answer against the exact bound.

The MILP (`template.py`) prices every binding exactly, so its optimum needs no
cut-off bindings; this module still recomputes the chosen binding's bound on
its unrolled calls, independently, and fails loudly if the two disagree. When
it offers the dynamic program, presolves, combines objectives or solves them
in steps is the binder strategy's (optimize/strategy.py); the solver counts
which way each answer was found, for the binding's `BindPath`.
"""

from __future__ import annotations

import math

from bamasc import limits
from bamasc.ir.bounds import call_bounds, worst_case_cost
from bamasc.ir.latency import worst_case_latency
from bamasc.ir.unroll import Unrolled, unroll
from bamasc.optimize.errors import InexactWeights, SolverError
from bamasc.optimize.formulation import (
    MilpRow,
    QUALITY_TOLERANCE,
    Objective,
    ordered_objectives,
    quality_follows_tiers,
    quality_objective,
    scaled_objective,
    scaled_row,
    tier_weights,
)
from bamasc.optimize.highs import optimise_columns
from bamasc.optimize import pareto
from bamasc.optimize.pareto import sweep
from bamasc.optimize.problem import SeatProblem
from bamasc.optimize.statements import Flow, analyse_fixed
from bamasc.optimize.strategy import DEFAULT_STRATEGY, BindStrategy
from bamasc.optimize.template import build
from bamasc.records import record, replace

# Relative slack for comparing float sums of µ$ against the budget.
BUDGET_TOLERANCE = 1e-9


@record
class Found:
    """A binding the exact bound has accepted, with what it scores."""

    counts: dict
    seats: tuple
    unrolled: Unrolled
    bounds: tuple
    exact: float
    tier_seats: tuple
    quality: float


def objective(found: Found, problem: SeatProblem) -> tuple:
    """What `found` scores under `problem`'s objective, larger being better."""
    return problem.score(found.tier_seats, round(found.quality, 9), found.exact)


def has_idle_seat(unrolled: Unrolled, counts: dict[str, int]) -> bool:
    """Would some instance never be called? (e.g. a third executor when one critic allows
    only two revisions). Such a seat costs nothing and does nothing, so it must not
    count towards the objective or min_agents: that count vector is skipped."""
    called = {(call.slot, call.instance) for call in unrolled.calls}
    return any((slot, k) not in called for slot, count in counts.items() for k in range(count))


class TemplateSolver:
    """Solves template MILPs over given slot ranges, checking each answer against the exact bound."""

    def __init__(self, program, system, topology, pool, order: SeatProblem, method: str,
                 largest: Unrolled | None = None, strategy: BindStrategy = DEFAULT_STRATEGY):
        """`largest`: the template unrolled at its largest counts, if the caller has it already."""
        self.program, self.system, self.topology, self.pool = program, system, topology, pool
        self.order = order
        self.method = method
        self.strategy = strategy
        self.roles = [program.roles[slot.role] for slot in topology.slots]
        self.solves = 0
        self.cuts = 0
        self.vectors_solved = 0  # count vectors solved one at a time (bind._enumerate)
        self.ways: dict[str, int] = {}  # answers found each way (strategy.WAYS), in the order first taken
        self._unrolled: dict[tuple, Unrolled] = {}
        if largest is not None:
            self._unrolled[tuple(slot.hi for slot in topology.slots)] = largest
        self._flow: Flow | None = None

    def unroll(self, counts: dict[str, int]) -> Unrolled:
        """`ir.unroll.unroll` of the template, once per count vector."""
        key = tuple(counts[slot.name] for slot in self.topology.slots)
        found = self._unrolled.get(key)
        if found is None:
            found = self._unrolled[key] = unroll(self.topology, counts)
        return found

    @property
    def flow(self) -> Flow:
        if self._flow is None:
            self._flow = Flow(self.program, self.system, self.topology, self.unroll)
        return self._flow

    def analyse(self, ranges):
        return self.flow.statements(ranges)

    def rotating(self, ranges) -> list[int]:
        """Slots whose counts rotate seats in some statement (`Flow.rotating`)."""
        return self.flow.rotating(ranges)

    def analyse_fixed(self, fixed):
        vector = tuple(r[0] for r in fixed)
        return analyse_fixed(self.program, self.system, self.topology, vector, self.unroll)

    def problem(self, ranges, budget=None, **changes) -> SeatProblem:
        lo = tuple(r[0] for r in ranges)
        hi = tuple(r[-1] for r in ranges)
        cost = tuple(tuple(self.order.cost[s][min(k, len(self.order.cost[s]) - 1)] for k in range(hi[s])) for s in range(len(hi)))
        base = replace(self.order, lo=lo, hi=hi, cost=cost)
        return replace(base, budget=self.order.budget if budget is None else budget, **changes)

    def solve(self, ranges, statements, budget=None, cheapest=False, deadline=True, **changes) -> Found | None:
        """The best binding within `ranges` (the cheapest when asked), or None.

        `changes` relax the problem's rules; deadline=False drops the system's deadline.
        """
        problem = self.problem(ranges, budget, **changes)
        seconds = self.system.deadline if deadline else None
        for _ in range(self.strategy.max_cuts + 1):
            model = build(problem, statements, self.pool, self.roles, seconds)
            model, values = self._optimise(problem, statements, seconds, model, cheapest)
            if values is None:
                return None
            seats = tuple(seat for seat, x in zip(model.ilp.seats, values) if x > 0.5)
            found = self.exact(problem, seats)
            if found.exact > limits.MAX_BUDGET:
                return None  # only seats dearer than any budget may buy are left (see template.py's ceiling)
            priced = math.fsum(c * v for c, v in zip(model.cost, values))
            if found.exact > priced + _tolerance(found.exact):
                raise SolverError(
                    f"the template MILP priced a binding at {priced:.6f} µ$ whose exact bound is {found.exact:.6f} µ$"
                )
            late = seconds is not None and self.latency(found) > seconds * (1 + BUDGET_TOLERANCE)
            if found.exact <= problem.budget * (1 + BUDGET_TOLERANCE) and not late:
                return found
            # Over the budget or the deadline only by the solver's tolerance: rule that binding out.
            self.cuts += 1
            problem = replace(problem, excluded=(*problem.excluded, seats))
        raise SolverError(f"more than {self.strategy.max_cuts} bindings came back just over the budget or the deadline")

    def _optimise(self, problem, statements, seconds, model, cheapest):
        """(the MILP its answer is a solution of, every column's value or None when infeasible)."""
        lexicographic = not cheapest and self.method == "lexicographic"
        if lexicographic and seconds is None and model.ilp.width > self.strategy.sweep_from_columns:
            swept = self._sweep(problem, statements, model)
            if swept is not None:
                self._went("sweep")
                return swept
        if cheapest:
            way, objectives = "cheapest", [scaled_objective(list(model.cost), 0.0)]
        else:
            way, objectives = self.objectives(problem, model)
        if len(objectives) > 1 and lexicographic and model.ilp.width > self.strategy.split_from_columns:
            if problem.by_value:
                return self._value_in_steps(problem, statements, seconds, model, objectives[0])
            return self._in_steps(problem, statements, seconds, model)
        self._went(way)
        self.solves += len(objectives)
        presolve = model.ilp.width <= self.strategy.presolve_up_to_columns
        return model, optimise_columns(model.ilp, objectives, presolve=presolve)

    def _went(self, way: str) -> None:
        self.ways[way] = self.ways.get(way, 0) + 1

    def _in_steps(self, problem, statements, seconds, model):
        """The tier objectives one at a time, then quality and cost, each on a MILP narrowed to the
        tier counts found so far.

        Every binding left after a tier's objective has exactly its count there (one more seat
        would have scored higher), so a row holding the count at least there loses nothing (an
        equality is no stronger, and made the medium chain row take 11 s instead of 0.7 s), and a
        tier found with no seats needs none of its models: the MILP is built again without them
        and the products of their reads. The last objectives (quality, cost) run on a MILP that
        prices reads in the R/Q form instead: the products settle the tier objectives at the root
        but only slow the cost objective down. On the medium parallel row of 20 slots x 50 models
        the bind went from 3.9 s to 1.0 s (docs/benchmarks.md). Returns the MILP solved last and
        its solution (None: infeasible).
        """
        known: dict[int, int] = {}
        current = model
        for position, tier in enumerate(problem.tier_levels):
            objective = ordered_objectives(problem, current.ilp, "lexicographic", tie_break=False)[position]
            self.solves += 1
            presolve = current.ilp.width <= self.strategy.presolve_up_to_columns
            values = optimise_columns(current.ilp, [objective], presolve=presolve)
            if values is None:
                self._went("in-steps")
                return current, None
            known[tier] = sum(x > 0.5 and problem.tiers[m] == tier for (_, _, m), x in zip(current.ilp.seats, values))
            if known[tier] == 0 and position + 1 < len(problem.tier_levels):
                current = build(problem, statements, self.pool, self.roles, seconds, tier_seats=known, coupled_reads=True)
            else:
                terms = [j for j, (_, _, m) in enumerate(current.ilp.seats) if problem.tiers[m] == tier]
                row = MilpRow(f"tier[{tier}]", tuple(terms), (1.0,) * len(terms), known[tier], math.inf)
                current = replace(current, ilp=replace(current.ilp, rows=(*current.ilp.rows, row)))
        sweep_too = model.ilp.width > self.strategy.sweep_from_columns
        swept = self._sweep_narrowed(problem, statements, seconds, known) if sweep_too else None
        if swept is not None:
            self._went("in-steps-sweep")
            return swept
        self._went("in-steps")
        narrow = build(problem, statements, self.pool, self.roles, seconds, tier_seats=known)
        rest = _after_tiers(problem, narrow, quality_follows_tiers(problem, model.ilp))
        self.solves += len(rest)
        presolve = narrow.ilp.width <= self.strategy.narrow_presolve_up_to_columns
        return narrow, optimise_columns(narrow.ilp, rest, presolve=presolve, sub_mips=False)

    def _value_in_steps(self, problem, statements, seconds, model, value):
        """By value: the total value on `model`, then the cost on a MILP that prices reads in the R/Q
        form (as `_in_steps` solves its last objectives), with a row holding the value at its optimum.

        Both MILPs price every binding alike, so the cheapest binding of the highest value is the
        same; the pairwise products only help to settle the value. Returns the MILP solved last and
        its solution (None: infeasible)."""
        self._went("in-steps")
        self.solves += 1
        presolve = model.ilp.width <= self.strategy.presolve_up_to_columns
        values = optimise_columns(model.ilp, [value], presolve=presolve)
        if values is None:
            return model, None
        best = problem.total_quality([seat for seat, x in zip(model.ilp.seats, values) if x > 0.5])
        narrow = build(problem, statements, self.pool, self.roles, seconds, coupled_reads=False)
        worth = tuple(problem.seat_quality(s, k, m) for s, k, m in narrow.ilp.seats)
        held = scaled_row(MilpRow("value", tuple(range(len(worth))), worth, best - QUALITY_TOLERANCE, math.inf))
        narrow = replace(narrow, ilp=replace(narrow.ilp, rows=(*narrow.ilp.rows, held)))
        self.solves += 1
        presolve = narrow.ilp.width <= self.strategy.narrow_presolve_up_to_columns
        return narrow, optimise_columns(narrow.ilp, [scaled_objective(list(narrow.cost), 0.0)], presolve=presolve, sub_mips=False)

    def _sweep(self, problem, statements, model):
        """(the MILP that priced it, its binding's column values: None when none fits the budget) by
        the dynamic program over slots (optimize/pareto.py), or None where that does not apply.

        Where `model` prices some reads through R and Q (a seat reading many models), the dynamic
        program prices them by a MILP built with every read a product instead, never solved: the
        same bound, and 20 slots [1..3] x 50 models with qualities of their own (up to 15 models a
        seat) bind without HiGHS (docs/benchmarks.md, "Pipelines without a MILP").
        """
        swept = sweep(problem, model, BUDGET_TOLERANCE)
        if swept is None and _reads_through_r(model) and pareto.arrangements(problem, model) <= pareto.MOST_CONFIGURATIONS:
            model = build(problem, statements, self.pool, self.roles, None, coupled_reads="all")
            swept = sweep(problem, model, BUDGET_TOLERANCE)
        return None if swept is None else (model, swept.values)

    def _sweep_narrowed(self, problem, statements, seconds, known):
        """`_sweep` on the MILP without the tiers found with no seats, or None.

        Every best binding of the whole MILP uses no model of those tiers, so a best binding of
        the narrowed one is a best binding of the whole: the same tier seats, quality and cost.
        With fewer models a slot, the arrangements may fit the dynamic program where the whole
        MILP's did not, and the quality and cost objectives are not solved at all.
        """
        none = {tier: 0 for tier, n in known.items() if n == 0}
        if seconds is not None or not none:
            return None
        # Built for the dynamic program alone, so every read is a product whatever its width.
        model = build(problem, statements, self.pool, self.roles, None, tier_seats=none, coupled_reads="all")
        swept = sweep(problem, model, BUDGET_TOLERANCE)
        if swept is None or swept.values is None:
            return None  # the MILP below decides
        return model, swept.values

    def latency(self, found: Found) -> float:
        """The binding's worst-case latency on its graph (ir/latency.py), independently of the MILP."""
        model_of = {(self.topology.slots[s].name, k): self.pool[m] for s, k, m in found.seats}
        return worst_case_latency(found.unrolled.calls, model_of, self.program.roles).seconds or 0.0

    def objectives(self, problem: SeatProblem, model) -> tuple[str, list[Objective]]:
        """Tiers strongest first, then quality, then cost: one solve each ("in-turn"), or one in all
        ("combined", `_combined`). By value: the total value, then cost, in turn."""
        if problem.by_value:
            return "in-turn", [quality_objective(problem, model.ilp), scaled_objective(list(model.cost), 0.0)]
        follows = quality_follows_tiers(problem, model.ilp)
        if self.method == "lexicographic" and follows and model.ilp.width <= self.strategy.combine_up_to_columns:
            combined = _combined(problem, model)
            if combined is not None:
                return "combined", [combined]
        tiers = ordered_objectives(problem, model.ilp, self.method, tie_break=False)
        return "in-turn", [*tiers, *_after_tiers(problem, model, follows)]

    def exact(self, problem: SeatProblem, seats) -> Found:
        counts = {name: 0 for name in problem.slot_names}
        for s, _, _ in seats:
            counts[problem.slot_names[s]] += 1
        unrolled = self.unroll(counts)
        if has_idle_seat(unrolled, counts):
            raise SolverError(f"the template MILP chose counts {counts} that leave an instance without a call")
        model_of = {(problem.slot_names[s], k): self.pool[m] for s, k, m in seats}
        bounds = tuple(call_bounds(unrolled.calls, model_of, self.program.roles, self.system.task_tokens))
        tier_seats = tuple(sum(problem.tiers[m] == t for _, _, m in seats) for t in problem.tier_levels)
        quality = problem.total_quality(seats)
        exact = worst_case_cost(unrolled.calls, bounds, unrolled.choices)
        return Found(counts, seats, unrolled, bounds, exact, tier_seats, quality)


def _reads_through_r(model) -> bool:
    """Does the template MILP price some seat's reads through R and Q (template._Builder.reads)?"""
    return any(column.name.startswith("R[") for column in model.ilp.extra)


def _after_tiers(problem: SeatProblem, model, follows: bool) -> list[Objective]:
    """Quality (unless it follows the tiers), then cost."""
    quality = []
    if not follows:
        quality = [scaled_objective(model.ilp.column_vector(lambda s, k, m: -problem.quality[s][m]), QUALITY_TOLERANCE)]
    return [*quality, scaled_objective(list(model.cost), 0.0)]


def _combined(problem: SeatProblem, model) -> Objective | None:
    """The lexicographic order as one objective, where that is exact: None where it is not.

    Seats per tier weigh the paper's tier weights (`tier_weights`: one seat of a
    tier outweighs every seat the budget buys below it), and the cost enters
    divided by twice the budget. The binding's cost never exceeds the budget, so
    the cost term stays below 0.5 while any change in tier counts moves the
    objective by at least 1: minimising the sum minimises the tiers first and
    the cost among equal tiers. Solved once instead of once per objective,
    which is what small models gain from; large ones solve faster in steps.
    """
    if not math.isfinite(problem.budget) or problem.budget <= 0:
        return None
    try:
        weights = tier_weights(problem)
    except InexactWeights:
        return None
    weight = dict(zip(problem.tier_levels, weights))
    tiers = model.ilp.column_vector(lambda s, k, m: -weight[problem.tiers[m]])
    if max(weights) * problem.capacity > 2**40:
        return None
    share = 0.5 / problem.budget
    return Objective([t + share * c for t, c in zip(tiers, model.cost)], 0.0)


def _tolerance(value: float) -> float:
    return 1e-6 * max(1.0, abs(value))
