"""One exact MILP for a whole template: every count vector and every seat binding in one model.

Columns (docs/language.md, "How the compiler binds"):

- x[s,k,m], binary: instance k of slot s runs model m (the seat columns of
  `formulation.formulate`, with its fill, order, min_count, require and
  min_agents rows). How many instances a slot has is Σ x over its seats.
- u[s,n], binary, for slots whose count changes which seat makes which call
  (`refine`, `plan`): slot s has exactly n instances.
- y[i,v] in [0, 1] for such a statement i: its slots have the counts v. Rows
  make Σ_v y = 1 and each slot's marginal equal its u, so y is 0/1 whenever u is.
- W[j] >= 0: the tokens of statement j's value, Σ of the output caps of its
  calls, for statements whose value a later one reads; of a route's answer,
  at least each branch's answer (optimize/either.py).
- z[σ;τ] in [0, 1]: seat σ of a padded statement reads seat τ's output, per
  pair of σ's input rate and τ's output cap (optimize/coupled.py); elsewhere
  R[i,σ] >= 0, the tokens σ reads in statement i, split by model into
  Q[i,σ,m] >= 0, so Σ_m p_in[m]·Q[i,σ,m] is the product (`_Builder.reads`).
- E[i,g] >= 0: the largest output of the seats of group g, of which one call ran
  (a dynamic plan's step), for the seats that read it.
- O[i] >= 0, for statements with y: the prompt-text and output cost of unit v
  (one per route branch the statement's calls run under).
- Z[d] >= 0, for each route d: at least the cost of each of its branches
  (an epigraph row per branch, linear in the columns above), standing in for
  the branches in the budget row: only one branch runs (ir/alternatives.py).
  The deadline has its own, D[d], over each branch's steps.

The budget row is Σ of every call's exact worst case. Every linearised column
only appears with a positive sign there and in the cost objective, so at any
solution it can be lowered to the product it stands for: the row holds exactly
when the exact bound fits. Nothing is under-estimated, so no binding is ever cut
off afterwards, and a larger budget only adds solutions (the monotonicity the
binder promises).
"""

from __future__ import annotations

import math
from collections import defaultdict

from bamasc import limits
from bamasc.ir.latency import call_latency_s
from bamasc.ir.tokens import output_cap
from bamasc.ir.alternatives import decisions
from bamasc.optimize.cards import SharedCards
from bamasc.optimize import coupled
from bamasc.optimize.coupled import CoupledReads
from bamasc.optimize.deadline import DeadlineRows
from bamasc.optimize.either import ExclusiveReads, label as _label
from bamasc.optimize.formulation import Column, MilpRow, SeatIlp, formulate, scaled_row
from bamasc.optimize.loops import ToolRounds
from bamasc.optimize.offered import offered_exactly
from bamasc.optimize.problem import SeatProblem
from bamasc.optimize.statements import Statement
from bamasc.records import record, replace


@record
class TemplateIlp:
    """The MILP, and where its budget and cost live."""

    ilp: SeatIlp
    cost: tuple[float, ...]  # per column: its share of the exact worst case, µ$
    budget_row: int | None  # index of the budget row in ilp.rows
    # (z column, reader's x columns, source's x columns) of every product (optimize/coupled.py)
    products: tuple[tuple[int, tuple[int, ...], tuple[int, ...]], ...] = ()


def build(
    problem: SeatProblem,
    statements: tuple[Statement, ...],
    pool,
    roles,
    deadline: float | None = None,
    tier_seats: dict[int, int] | None = None,
    coupled_reads: bool | str | None = None,
) -> TemplateIlp:
    """The template MILP for `problem`'s seats (its lo..hi ranges) and the flow's `statements`.

    `problem` carries the slot ranges and every rule but the budget's cost
    (its cost arrays only order models of equal tier and quality); `roles` is
    the role of each slot. `tier_seats` (tier -> seats) keeps only the bindings
    with at least those seats of the tiers it names (exactly those, after the
    tier objectives that found them): models of a tier with none are not
    offered. Reads take the products of optimize/coupled.py unless
    `coupled_reads` is False; by default only where `tier_seats` is None, and
    only for seats that read few models (`COUPLE_UP_TO`) unless it is "all"
    (a MILP to price bindings by, for optimize/pareto.py, not to solve).
    """
    offered = offered_exactly(problem, pool, roles)
    if tier_seats is not None:
        offered = tuple(tuple(m for m in models if tier_seats.get(problem.tiers[m]) != 0) for models in offered)
    seats = formulate(replace(problem, budget=math.inf), offered=offered)
    builder = _Builder(problem, seats, offered, pool, roles)
    if coupled_reads is None:
        coupled_reads = tier_seats is None
    builder.couple_up_to = math.inf if coupled_reads == "all" else coupled.COUPLE_UP_TO if coupled_reads else 0
    # Every seat's prompt bound first: a seat called in two statements is billed at the highest
    # prompt tier any of its calls reaches, including in the statements priced before that one.
    for statement in statements:
        builder.bound_prompts(statement)
    for statement in statements:
        builder.statement(statement)
    if deadline is not None:
        builder.deadline(statements, deadline)
    for tier, n in (tier_seats or {}).items():
        if n:
            terms = [(j, 1.0) for j, (_, _, m) in enumerate(seats.seats) if problem.tiers[m] == tier]
            builder.row(f"tier[{tier}]", terms, float(n), math.inf)
    return builder.finish()


class _Builder(ExclusiveReads, SharedCards, CoupledReads, DeadlineRows, ToolRounds):
    def __init__(self, problem, seats: SeatIlp, offered, pool, roles):
        self.problem = problem
        self.seats = seats
        self.offered = offered
        self.pool = pool
        self.column = {seat: j for j, seat in enumerate(seats.seats)}
        self.extra: list[Column] = []
        self.rows: list[MilpRow] = list(seats.rows)
        # Per alternative (ir/alternatives.py), each column's share of that branch's worst case;
        # `finish` folds each route's branches into its Z column, and () is the whole template's.
        self.costs: dict[tuple, dict[int, float]] = defaultdict(lambda: defaultdict(float))
        # A seat whose own calls alone cost more than the budget is in no binding within it, whatever
        # its coefficient above the budget: capping keeps 1e25 µ$ seats from reaching the solver.
        self.ceiling = 2.0 * min(problem.budget, limits.MAX_BUDGET) + 1.0
        # cap[s][m]: tokens a call of slot s's role on model m may emit.
        self.cap = [[output_cap(role, model) for model in pool] for role in roles]
        # latency[s][m]: one attempt of a call of slot s's role on model m, seconds (0 when undeclared;
        # a system with a deadline has every model declare one, BAM408).
        self.latency = [[call_latency_s(role, model) or 0.0 for model in pool] for role in roles]
        self.loops = [role.loop for role in roles]  # each slot's role's tool loop, or None (optimize/loops.py)
        self.unit_column: dict[tuple[int, tuple[int, ...]], int] = {}
        self.prompt_bound: dict[tuple[int, int], float] = {}  # per seat, the most tokens any of its prompts holds
        self.count_columns: dict[tuple[int, int], int] = {}
        self.value_column: dict[int, int | float] = {}  # a W column, or the tokens when the same in every binding
        self.value_most: dict[int, float] = {}
        self.branch_value: dict[int, dict] = defaultdict(dict)  # statement -> branch path -> W column or tokens
        self.branch_value_most: dict[tuple, float] = {}
        self.covered: set[tuple[int, int]] = set()  # seats some padded statement always calls
        self.calling: dict[tuple[int, int], list[int]] = defaultdict(list)  # seat -> y columns that call it
        self.card_column: dict[str, int] = {}  # plan call -> its C column (optimize/cards.py)
        self.largest_of: dict[tuple, int] = {}  # (statement, group of exclusive seats) -> its E column
        self.value_seats: dict[int, tuple] = {}  # padded statements read later: seats of their value
        self.input_rates: dict[tuple, float] = {}
        self.products: list = []

    # ------------------------------------------------------------ columns

    def new(self, name: str, upper: float = math.inf, integer: bool = False) -> int:
        self.extra.append(Column(name, 0.0, upper, integer))
        return len(self.seats.seats) + len(self.extra) - 1

    def models(self, seat) -> list[tuple[int, int]]:
        """(column, model) of every model offered at a seat."""
        s, k = seat
        return [(self.column[s, k, m], m) for m in self.offered[s]] if k < self.problem.hi[s] else []

    def tokens(self, seat, times: int = 1) -> list[tuple[int, float]]:
        """The output tokens of one call at `seat`, as (column, coefficient) terms."""
        return [(j, times * self.cap[seat[0]][m]) for j, m in self.models(seat)]

    def known_tokens(self, seat) -> float | None:
        """The output tokens of a call at `seat` when they are the same in every binding: the seat is
        always filled and every model offered there has one cap. None otherwise."""
        s, k = seat
        caps = {self.cap[s][m] for _, m in self.models(seat)}
        return caps.pop() if k < self.problem.lo[s] and len(caps) == 1 else None

    def most_tokens(self, seat) -> float:
        return max((self.cap[seat[0]][m] for _, m in self.models(seat)), default=0.0)

    def counts_of(self, s: int) -> dict[int, int]:
        """u[s,n] columns, made on first use with their rows."""
        lo, hi = self.problem.lo[s], self.problem.hi[s]
        if (s, lo) not in self.count_columns:
            name = self.problem.slot_names[s]
            for n in range(lo, hi + 1):
                self.count_columns[s, n] = self.new(f"u[{name},{n}]", 1.0, integer=True)
            us = [self.count_columns[s, n] for n in range(lo, hi + 1)]
            self.row(f"count[{name}]", [(j, 1.0) for j in us], 1.0, 1.0)
            instances = [(j, 1.0) for k in range(hi) for j, _ in self.models((s, k))]
            self.row(f"count[{name}]", instances + [(self.count_columns[s, n], -float(n)) for n in range(lo, hi + 1)], 0.0, 0.0)
        return {n: self.count_columns[s, n] for n in range(lo, hi + 1)}

    def row(self, family: str, terms, lower: float, upper: float) -> None:
        merged: dict[int, float] = defaultdict(float)
        for j, v in terms:
            merged[j] += v
        # Scaled by a power of two where values are huge (exact; see formulation.LARGEST_SOLVER_VALUE).
        self.rows.append(scaled_row(MilpRow(family, tuple(merged), tuple(merged.values()), lower, upper)))

    # ------------------------------------------------------------ statements

    def bound_prompts(self, statement: Statement) -> None:
        """Raise each seat's prompt bound to the most any of its prompts in `statement` holds, and
        record the most a later reader sees of the statement's value (which only caps decide)."""
        for unit in statement.units:
            for seat, calls in unit.seats:
                most = calls.fixed + sum(n * self.most_tokens(source) for source, n in calls.reads)
                most += sum(n * self.value_most[j] for j, n in calls.values)
                most += sum(n * self.most_of(group) for group, n in calls.either + calls.branch_either)
                most += sum(n * self.value_most[j] for j, n in calls.branch_values)
                most += sum(n * self.most_tokens(source) for (_, source, _), n in calls.cards)
                self.prompt_bound[seat] = max(self.prompt_bound.get(seat, 0.0), most)
        if statement.read_later:
            options = [option for unit in statement.units for option in self.options(unit)]
            self.value_most[statement.index] = max(self.most_of((option,)) for option in options)

    def statement(self, statement: Statement) -> None:
        if statement.padded:
            (unit,) = statement.units
            self.covered.update(seat for seat, _ in unit.seats)
            for seat, calls in unit.seats:
                self.own(seat, calls, None)
            self.reads(statement, [(unit, None)])
            self.card_reads(statement, [(unit, None)])
            if statement.read_later:
                if not unit.value_options:  # a route's answer is one of its options, not their sum
                    self.value_seats[statement.index] = unit.value
                self.value_rows(statement.index, [(unit, None)])
            return
        counts = {s: self.counts_of(s) for s in statement.slots}
        ys = []
        for unit in statement.units:
            y = self.new(f"y[{statement.index},{unit.vector}]", 1.0)
            self.unit_column[statement.index, unit.vector] = y
            ys.append((unit, y))
            for seat, _ in unit.seats:
                self.calling[seat].append(y)
        self.row("units", [(y, 1.0) for _, y in ys], 1.0, 1.0)
        for position, s in enumerate(statement.slots):
            for n, u in counts[s].items():
                same = [(y, 1.0) for unit, y in ys if unit.vector[position] == n]
                self.row("units", same + [(u, -1.0)], 0.0, 0.0)
        own: dict[tuple, int] = {}
        for unit, y in ys:
            terms: dict[tuple, list] = defaultdict(list)
            terms[()] = []  # outside every route: a row per unit, even an empty one
            most: dict[tuple, float] = defaultdict(float)
            for seat, calls in unit.seats:
                seat_terms = self.own(seat, calls, y)
                terms[calls.alternative] += seat_terms
                most[calls.alternative] += max((-v for _, v in seat_terms), default=0.0)
            for path in terms:
                if path not in own:
                    own[path] = self.new(f"O[{statement.index}{_label(path)}]")
                    self.costs[path][own[path]] += 1.0
                # O >= own(x) - most·(1 - y): the unit's own cost when it is the one in force.
                self.row("own", [(own[path], 1.0), *terms[path], (y, -most[path])], -most[path], math.inf)
        self.reads(statement, ys)
        self.card_reads(statement, ys)
        if statement.read_later:
            self.value_rows(statement.index, ys)

    def rates(self, seat, m: int, calls) -> tuple[float, float, float]:
        """(input, output, per-request) rates a call at `seat` on model m is bounded at (ir/bounds.py), times
        its rounds: the highest of every prompt tier its prompt could reach, taken at the most this seat could
        ever read, so a model with tiers may be priced above its exact bound (never below it)."""
        pricing = self.pool[m].prices()
        rates = pricing.worst_rates(self.most_prompt(seat) if pricing.tiers else 0)
        rounds = self.rounds(seat)
        return rates.input * rounds, rates.output * rounds, pricing.per_request * rounds

    def most_prompt(self, seat) -> int:
        """An upper bound on the prompt of any call the template makes at `seat` (any round of its loop)."""
        return int(self.prompt_bound.get(seat, 0)) + 1 + self.longest_round(seat)

    def own(self, seat, calls, y):
        """Prompt-text and output cost of a seat's calls: into the cost directly, or as terms for O."""
        s, _ = seat
        terms = []
        for j, m in self.models(seat):
            model = self.pool[m]
            rate_in, rate_out, fee = self.rates(seat, m, calls)
            value = rate_in * calls.fixed + rate_out * self.cap[s][m] * calls.calls + fee * calls.calls
            value += self.loop_cost(seat, m) * calls.calls
            if y is None:
                self.costs[calls.alternative][j] += value
            else:
                terms.append((j, -min(value, self.ceiling)))
        return terms

    def own_reads(self, statement: int, reads, values, either) -> tuple[float, list, float]:
        """What a seat's calls read under their own alternative: (known tokens, terms, most tokens)."""
        known, read = 0.0, []
        for source, n in reads:
            tokens = self.known_tokens(source)
            if tokens is None:
                read += self.tokens(source, n)
            else:
                known += n * tokens
        for j, n in values:
            column = self.value_column[j]  # a column, or the tokens when they are known (float)
            if isinstance(column, float):
                known += n * column
            else:
                read.append((column, float(n)))
        for group, n in either:
            read.append((self.largest(statement, group), float(n)))
        most = sum(n * self.most_tokens(source) for source, n in reads)
        most += sum(n * self.value_most[j] for j, n in values)
        most += sum(n * self.most_of(group) for group, n in either)
        return known, read, most

    def reads(self, statement: Statement, units) -> None:
        """What each seat pays for the outputs it reads in the statement: p_in(model) · R, with R[σ]
        the tokens seat σ reads (at least what the unit in force says), split by `split_by_model`."""
        read_of: dict = {}
        most_of: dict = defaultdict(float)
        for unit, y in units:
            for seat, calls in unit.seats:
                parts = self.branch_parts(statement.index, calls)
                # A padded statement's reads of seats are priced as products (optimize/coupled.py).
                reads, values, either = self.coupled(seat, calls) if y is None else (calls.reads, calls.values, calls.either)
                if reads or values or either:
                    parts[calls.alternative] = self.own_reads(statement.index, reads, values, either)
                for path, (known, read, most) in parts.items():
                    if not read and y is None:
                        # What the seat reads is known: its price times that is linear in x.
                        for j, m in self.models(seat):
                            self.costs[path][j] += self.rates(seat, m, calls)[0] * known
                        continue
                    if most == 0:
                        continue
                    key = (seat, path)  # a seat in two branches reads in each, and pays in each
                    if key not in read_of:
                        read_of[key] = self.new(f"R[{statement.index},{seat}]")
                    r = read_of[key]
                    most_of[key] = max(most_of[key], most)
                    negated = [(c, -v) for c, v in read]
                    if y is None:
                        self.row("reads", [(r, 1.0), *negated], known, math.inf)
                    else:
                        self.row("reads", [(r, 1.0), *negated, (y, -most)], known - most, math.inf)
        for (seat, path), r in read_of.items():
            for q, rate in self.split_by_model("reads", f"Q[{statement.index},{seat}", seat, r, most_of[seat, path]):
                self.costs[path][q] += rate

    def split_by_model(self, family: str, name: str, seat, r: int, most: float) -> list[tuple[int, float]]:
        """Q[m] splitting R (column `r`, at most `most`) by seat σ's model, each with σ's input rate
        on m, so that Σ rate·Q is p_in(σ)·R. The tight (perspective) form: R ≤ Σ_m Q[m] + Q[none],
        Q[m] ≤ Rmax·x[σ,m], Q[none] ≤ Rmax·(1 − Σ_m x[σ,m]). With x integral only the chosen
        model's Q can carry R; with x fractional the relaxation still charges R to the models x
        leans on, which keeps the LP bound close (a big-M row would let it read for free)."""
        models = self.models(seat)
        split, priced = [(r, -1.0)], []
        for j, m in models:
            q = self.new(f"{name},{m}]")
            priced.append((q, self.rates(seat, m, None)[0]))
            self.row(family, [(q, 1.0), (j, -most)], -math.inf, 0.0)
            split.append((q, 1.0))
        empty = self.new(f"{name},none]")
        self.row(family, [(empty, 1.0), *((j, most) for j, _ in models)], -math.inf, most)
        split.append((empty, 1.0))
        self.row(family, split, 0.0, math.inf)
        return priced

    def fold(self, name: str, by_path: dict[tuple, list[tuple[int, float]]]) -> list[tuple[int, float]]:
        """The template's terms from terms per alternative: innermost first, each route's branches
        become one column at least each branch's sum (`name[d]`), added to where the route runs."""
        for within, decision, branches in decisions(list(by_path)):
            epigraph = self.new(f"{name}[{decision}]")
            for branch in branches:
                terms = by_path.get(within + ((decision, branch),), ())
                if terms:
                    self.row(name, [(epigraph, 1.0), *((j, -v) for j, v in terms)], 0.0, math.inf)
            by_path.setdefault(within, []).append((epigraph, 1.0))
        return list(by_path.get((), ()))

    def finish(self) -> TemplateIlp:
        problem = self.problem
        for s, name in enumerate(problem.slot_names):
            for k in range(problem.hi[s]):
                seat = (s, k)
                if seat in self.covered:
                    continue
                # A seat no unit calls must stay empty (an idle instance; see bind.py).
                terms = [(j, 1.0) for j, _ in self.models(seat)] + [(y, -1.0) for y in self.calling.get(seat, ())]
                self.row(f"idle[{name}]", terms, -math.inf, 0.0)
        seats = len(self.seats.seats)

        def capped(j: int, value: float) -> float:
            return min(value, self.ceiling) if j < seats else value

        by_path = {path: [(j, capped(j, v)) for j, v in terms.items()] for path, terms in self.costs.items()}
        top: dict[int, float] = defaultdict(float)
        for j, v in self.fold("Z", by_path):
            top[j] += v
        width = len(self.seats.seats) + len(self.extra)
        cost = tuple(top.get(j, 0.0) for j in range(width))
        budget_row = None
        if problem.budget < math.inf:
            budget_row = len(self.rows)
            self.row("budget", [(j, c) for j, c in enumerate(cost) if c], -math.inf, float(problem.budget))
        ilp = SeatIlp(self.seats.seats, tuple(self.rows), tuple(self.extra))
        return TemplateIlp(ilp, cost, budget_row, tuple(self.products))
