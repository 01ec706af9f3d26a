"""The ledger of many scopes in one process: per-scope budgets and the total, reserved before a call, settled after.

One arithmetic (`metering.afford`) decides every reservation. The event loop
runs one request's check and hold with no await between them, so two requests
cannot both take the last µ$. The trace is its memory: a restart on the same
trace starts each scope from what the trace holds for it (charges, and every
reservation whose call line never came, kept in full), as `exec --resume`
does, with the tightest budget it was given (a `budget` line is written when
a request sets or lowers it, refused or not) and closed if it was overbilled.
Several processes share one ledger through Redis instead
(metering/redis_ledger.py), with the same `reserve` and `close`.
"""

from __future__ import annotations

import json
import math
import os

from bamasc.metering.afford import Cost, afford
from bamasc.metering.refusals import BudgetExhausted, Refused, ScopeClosed, ShortOfTotal
from bamasc.records import record

@record
class Level:
    """A budget a reservation must fit in besides its scope's and the total: a key's or a team's window."""

    name: str  # its counter in the ledger, e.g. "key:support-bot:1d@2026-12-07T00:00:00Z" (metering/windows.py)
    budget: float  # µ$
    what: str  # how a refusal names it, e.g. "key 'support-bot' (1d window from 2026-12-07T00:00:00Z)"


@record
class Hold:
    """Money held for one forwarded call: in its scope, the total, and each of its levels."""

    id: str
    scope: str
    model: str
    tokens: int  # the output cap sent upstream
    amount: float  # µ$
    levels: tuple[str, ...] = ()  # the counters of its levels (Level.name), settled with it


class Counter:
    """What a level has charged and holds (its budget comes with each reservation)."""

    __slots__ = ("charged", "held")

    def __init__(self, charged: float = 0.0):
        self.charged = charged
        self.held = 0.0


class Scope:
    __slots__ = ("budget", "charged", "held", "calls", "overbilled")

    def __init__(self, budget: float, charged: float = 0.0):
        self.budget = budget
        self.charged = charged
        self.held = 0.0
        self.calls = 0
        self.overbilled: str | None = None

    def view(self, name: str) -> dict:
        return {"scope": name, "budget": self.budget, "charged": round(self.charged, 6), "held": round(self.held, 6),
                "left": round(max(0.0, self.budget - self.charged - self.held), 6), "calls": self.calls,
                "status": "overbilled" if self.overbilled else "open", "overbilled": self.overbilled}


def refusal(scope: str, budget: float, spent: float, total_left: float | None, cost: Cost) -> Refused:
    """Why `cost` does not fit in a scope (`budget`, `spent` of it) or in the total (`total_left`; None: none)."""
    if total_left is not None and total_left < budget - spent:
        return ShortOfTotal(scope, f"the proxy's total budget has {max(total_left, 0.0):.2f} µ$ left, not enough for "
                                   f"this call (its prompt alone may cost {cost.input_cost:.2f} µ$)")
    return BudgetExhausted(scope, f"scope '{scope}' has {max(budget - spent, 0.0):.2f} µ$ left of its budget of "
                                  f"{budget:g} µ$, not enough for this call (its prompt alone may cost "
                                  f"{cost.input_cost:.2f} µ$, and at least {min(cost.min_tokens, cost.requested)} "
                                  "output tokens are needed)")


def short_of(level: Level, spent: float, cost: Cost) -> BudgetExhausted:
    """Why `cost` does not fit in `level`, which has `spent` of its budget."""
    return BudgetExhausted(level.name, f"{level.what} has {max(level.budget - spent, 0.0):.2f} µ$ left of its "
                                       f"{level.budget:g} µ$, not enough for this call (its prompt alone may cost "
                                       f"{cost.input_cost:.2f} µ$)")


def distinct(levels: tuple[Level, ...]) -> tuple[Level, ...]:
    """`levels` with one of each name (the lowest budget): a counter is held once however often it is named."""
    kept: dict[str, Level] = {}
    for level in levels:
        if level.name not in kept or level.budget < kept[level.name].budget:
            kept[level.name] = level
    return tuple(kept.values())


def level_fields(levels: tuple[Level, ...]) -> dict:
    """A reserve line's `levels` (the counters it holds in) and `level_budgets` (each one's budget, µ$, in the
    same order, so a report can draw a window against its limit); nothing when there are none."""
    if not levels:
        return {}
    return {"levels": [level.name for level in levels], "level_budgets": [level.budget for level in levels]}


def tightest(left: float, levels: tuple[Level, ...], spent: list[float]) -> tuple[float, int | None]:
    """The least of `left` and each level's room (its budget less `spent`), and which level it is (None: none)."""
    binding = None
    for index, level in enumerate(levels):
        room = level.budget - spent[index]
        if room < left:
            left, binding = room, index
    return left, binding


def closed(scope: str, why: str) -> ScopeClosed:
    return ScopeClosed(scope, f"scope '{scope}' is closed: {why}")


# How a call line's `error` says the upstream billed past the reservation (trace.md).
_OVERBILLED = "overbilled: "


def trace_lines(path: str | None):
    """The records of an existing trace, in order, skipping any line that is not a JSON object with a task_id.

    The money comes from `runtime.trace.read_ledgers`, which refuses a damaged
    trace; only its torn last line is skipped here.
    """
    if not path or not os.path.exists(path):
        return
    with open(path, "rb") as handle:
        for line in handle:
            try:
                data = json.loads(line)
            except ValueError:
                continue
            if isinstance(data, dict) and isinstance(data.get("task_id"), str):
                yield data


def line_limit(data: dict) -> tuple[float | None, str | None]:
    """The budget a trace line gave its scope (a `reserve` or `budget` line) and the reason a `call` line closed
    it as overbilled; None for what it does not say."""
    given = data.get("budget") if data.get("type") in ("reserve", "budget") else None
    budget = float(given) if type(given) in (int, float) and math.isfinite(given) else None
    error = data.get("error") if data.get("type") == "call" else None
    overbilled = error[len(_OVERBILLED):] if isinstance(error, str) and error.startswith(_OVERBILLED) else None
    return budget, overbilled


def tighter(limit: tuple[float | None, str | None], other: tuple[float | None, str | None]):
    """Two (budget, overbilled) limits as one: the lower budget, the first reason."""
    budgets = [budget for budget in (limit[0], other[0]) if budget is not None]
    return (min(budgets) if budgets else None), limit[1] or other[1]


def level_spend(path: str | None) -> dict[str, float]:
    """Each level's spend in an existing trace: the charges of the calls whose reservation named it, and in full
    each reservation of it whose call line never came (as a scope's)."""
    open_holds: dict[str, tuple[tuple[str, ...], float]] = {}
    spent: dict[str, float] = {}
    for data in trace_lines(path):
        levels = data.get("levels")
        if data.get("type") == "reserve" and isinstance(levels, list) and levels:
            open_holds[str(data.get("id"))] = (tuple(str(level) for level in levels), float(data["reserved"]))
        elif data.get("type") == "call" and str(data.get("id")) in open_holds:
            levels, _ = open_holds.pop(str(data.get("id")))
            for level in levels:
                spent[level] = spent.get(level, 0.0) + float(data["charged"])
    for levels, reserved in open_holds.values():
        for level in levels:
            spent[level] = spent.get(level, 0.0) + reserved
    return spent


def scope_limits(path: str | None) -> dict[str, tuple[float | None, str | None]]:
    """Each scope's tightest budget and its overbilled reason (or None) in an existing trace's lines."""
    limits: dict[str, tuple[float | None, str | None]] = {}
    for data in trace_lines(path):
        limits[data["task_id"]] = tighter(limits.get(data["task_id"], (None, None)), line_limit(data))
    return limits


class LocalLedger:
    """Scopes and the total in this process, remembered by the trace."""

    def __init__(self, total: float | None = None, trace=None, earlier: dict | None = None,
                 limits: dict[str, tuple[float | None, str | None]] | None = None, levels: dict | None = None):
        self.total = total
        self.trace = trace  # a runtime.trace.TraceWriter, or None
        self.scopes: dict[str, Scope] = {}
        # Each level's counter, from what the trace holds (level_spend) and this run's calls.
        self.counters = {name: Counter(spent) for name, spent in (levels or {}).items()}
        self._earlier = {scope: ledger.spent for scope, ledger in (earlier or {}).items()}
        self._limits = limits or {}  # from scope_limits: a restart keeps a tightened budget and a closed scope
        self.spent_before = sum(self._earlier.values())
        self.charged = self.spent_before  # every scope's charges, earlier runs' open reservations included
        self.held = 0.0
        self._ids = 0

    @property
    def total_left(self) -> float | None:
        return None if self.total is None else self.total - self.charged - self.held

    async def open(self) -> None:
        """Nothing to join: the trace was read when the ledger was made."""

    def _scope(self, name: str, budget: float) -> Scope:
        scope = self.scopes.get(name)
        if scope is None:
            earlier_budget, overbilled = self._limits.get(name, (None, None))
            scope = self.scopes[name] = Scope(budget, self._earlier.get(name, 0.0))
            if earlier_budget is not None and earlier_budget <= budget:
                scope.budget = earlier_budget
            else:
                self._written(name, budget)
            scope.overbilled = overbilled
        elif budget < scope.budget:
            scope.budget = budget  # a scope's budget may be tightened, never raised
            self._written(name, budget)
        return scope

    def _written(self, name: str, budget: float) -> None:
        """A budget set or tightened goes to the trace now: the request may be refused, and a restart keeps it."""
        if self.trace is not None:
            self.trace.budget({"task_id": name, "budget": budget})

    def _counter(self, name: str) -> Counter:
        counter = self.counters.get(name)
        if counter is None:
            counter = self.counters[name] = Counter()
        return counter

    async def reserve(self, name: str, budget: float, model: str, cost: Cost, levels: tuple[Level, ...] = ()) -> Hold:
        """Hold the largest call that fits in the scope, the total and every level at once, or refuse."""
        levels = distinct(levels)
        scope = self._scope(name, budget)
        if scope.overbilled:
            raise closed(name, scope.overbilled)
        left = scope.budget - scope.charged - scope.held
        total_left = self.total_left
        counters = [self._counter(level.name) for level in levels]
        room, binding = tightest(left if total_left is None else min(left, total_left), levels,
                                 [counter.charged + counter.held for counter in counters])
        fit = afford(room, cost)
        if fit is None:
            if binding is not None:
                raise short_of(levels[binding], counters[binding].charged + counters[binding].held, cost)
            raise refusal(name, scope.budget, scope.charged + scope.held, total_left, cost)
        tokens, amount = fit
        scope.held += amount
        scope.calls += 1
        self.held += amount
        for counter in counters:
            counter.held += amount
        self._ids += 1
        hold_id = str(self._ids)
        names = tuple(level.name for level in levels)
        if self.trace is not None:
            hold_id = self.trace.reserve({"task_id": name, "model": model, "reserved": round(amount, 6),
                                          "budget": scope.budget, "max_tokens": tokens,
                                          **level_fields(levels)})
        return Hold(hold_id, name, model, tokens, amount, names)

    async def close(self, hold: Hold, charged: float, record: dict, overbilled: str | None = None) -> None:
        """End the call: `charged` µ$ (the usage's price, the whole hold when the outcome is unknown, or 0)."""
        scope = self.scopes[hold.scope]
        scope.held -= hold.amount
        scope.charged += charged
        self.held -= hold.amount
        self.charged += charged
        for level in hold.levels:
            counter = self.counters[level]
            counter.held -= hold.amount
            counter.charged += charged
        if overbilled and not scope.overbilled:
            scope.overbilled = overbilled
        if self.trace is not None:
            self.trace.call({"id": hold.id, "task_id": hold.scope, "model": hold.model, "reserved": round(hold.amount, 6),
                             "charged": round(charged, 6), "max_tokens": hold.tokens, **record})

    async def view(self, name: str) -> dict | None:
        scope = self.scopes.get(name)
        if scope is None:
            spent = self._earlier.get(name)
            return None if spent is None else {"scope": name, "charged": round(spent, 6), "held": 0.0,
                                               "calls": 0, "status": "earlier run"}
        return scope.view(name)

    async def level(self, name: str, budget: float) -> dict:
        """What a level has charged, holds and has left of `budget`."""
        counter = self.counters.get(name) or Counter()
        return level_view(name, budget, counter.charged, counter.held)

    async def totals(self) -> dict:
        return {"total": self.total, "charged": round(self.charged, 6), "held": round(self.held, 6),
                "left": None if self.total is None else round(max(0.0, self.total_left), 6),
                "scopes": len(set(self.scopes) | set(self._earlier))}


def stored_scope_view(name: str, data: dict) -> dict | None:
    """A scope as a shared store keeps it (a hash of strings), as every ledger shows one; None: no such scope."""
    if not data:
        return None
    budget, charged, held = (float(data.get(key, 0)) for key in ("budget", "charged", "held"))
    return {"scope": name, "budget": budget, "charged": round(charged, 6), "held": round(held, 6),
            "left": round(max(0.0, budget - charged - held), 6), "calls": int(data.get("calls", 0)),
            "status": "overbilled" if data.get("overbilled") else "open", "overbilled": data.get("overbilled")}


def level_view(name: str, budget: float, charged: float, held: float) -> dict:
    return {"window": name.rsplit(":", 1)[-1], "budget": budget, "charged": round(charged, 6),
            "held": round(held, 6), "left": round(max(0.0, budget - charged - held), 6)}
