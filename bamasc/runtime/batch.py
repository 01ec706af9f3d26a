"""One budget for a whole batch: the ledger every task reserves its worst case from, and the running totals.

`BatchBudget` is to a batch what the budget guard is to a task. Before a
task starts, its worst case (what its guard may still charge: its per-task
budget less what earlier runs spent on it) is reserved from what is left of
the total; when it ends, the reservation is settled to what it charged and
the rest returns to the pool. The sum of every task's charges therefore
never passes the total, for every provider that keeps the guard's promise
(bills no more than the prompt and `max_tokens` it was sent); one that bills
more breaks its task's budget and, by as much, the total.

The ledger's methods are coroutines although nothing in them awaits: a
ledger shared by processes is an actor whose methods are awaited, and
workers call this one the same way.

`BatchTotals` keeps what the dataset report needs as running aggregates:
counts, an exact running sum, and the costs and times counted per printed
value (0.1 µ$, 1 ms), whose order statistics are those of the values
themselves because rounding keeps order. Its size depends on the spread of
the costs, not on the number of tasks.

`BudgetLevel` is one per-task budget a batch's tasks may run at, and the
protocols below type what a run's options may plug in (`ExecOptions`): the
selector, the allocator, a shared ledger and a shared rate limiter.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import TYPE_CHECKING, Protocol

from bamasc.records import record

if TYPE_CHECKING:
    from bamasc.plan.schema import SystemPlan


class Selector(Protocol):
    """Picks a template per task: task texts in, one template name per text out (a policy, `policy/select.py`)."""

    def __call__(self, texts: list[str], /) -> list[str]: ...


class Allocator(Protocol):
    """Picks each task's per-task budget under the total (`runtime/allocate.DualAllocator`)."""

    def choose(self, task_id: str) -> float: ...

    def observe(self, budget: float, charged: float) -> None: ...

    def explain(self) -> str: ...


class BatchLedger(Protocol):
    """What is left of a batch's total: `BatchBudget`, or a proxy for one behind an actor
    (`ray_actors.RemoteLedger`)."""

    total: float
    spent: float
    earlier: float
    held: float

    @property
    def remaining(self) -> float: ...

    async def reserve(self, amount: float) -> bool: ...

    async def settle(self, reserved: float, charged: float) -> None: ...

    async def wait(self) -> None: ...


class Limiter(Protocol):
    """The rate limiter every call to a provider key waits on: `limiter.RateLimiter`, or a proxy for one
    behind an actor (`ray_actors.RemoteLimiter`)."""

    async def acquire(self, key: str, tokens: int, within: float | None = None) -> float | None: ...

    def penalise(self, key: str, retry_after_s: float | None = None) -> None: ...

    def observe(self, key: str, headers: Mapping[str, str]) -> None: ...

    def limits(self, key: str) -> tuple[float | None, float | None]: ...


@record
class BudgetLevel:
    """A per-task budget a batch's tasks may run at, the system compiled at it, and who picks its templates."""

    budget: float  # µ$ per task
    system: SystemPlan  # the system's plan at this budget
    selector: Selector | None = None  # a policy that picks a template per task; None: the plan's selection


def budget_levels(system: SystemPlan, selector: Selector | None, others: tuple[BudgetLevel, ...]) -> list[BudgetLevel]:
    """Every per-task budget a task may run at, largest first: the system's own, then `others` at budgets
    it does not have (the first of equal budgets is kept)."""
    levels = {system.budget: BudgetLevel(system.budget, system, selector)}
    for level in others:
        levels.setdefault(float(level.budget), BudgetLevel(float(level.budget), level.system, level.selector))
    return sorted(levels.values(), key=lambda level: -level.budget)


class BatchBudget:
    """What is left of a batch's total budget (µ$), shared by every task of the batch."""

    def __init__(self, total: float, spent: float = 0.0) -> None:
        self.total = total
        self.spent = spent  # settled charges, earlier runs' included
        self.earlier = spent  # what the trace held when the batch started
        self._settled = None  # an asyncio.Event set at the next settle, made when someone waits
        self.held = 0.0  # the worst cases of tasks in flight

    @property
    def remaining(self) -> float:
        return self.total - self.spent - self.held

    async def reserve(self, amount: float) -> bool:
        """Hold `amount` for a task about to start, if it fits in what is left."""
        if amount > self.remaining + 1e-9:
            return False
        self.held += amount
        return True

    async def settle(self, reserved: float, charged: float) -> None:
        """A task ended: its reservation is replaced by what it charged."""
        self.held -= reserved
        self.spent += charged
        if self._settled is not None:
            self._settled.set()
            self._settled = None

    async def wait(self) -> None:
        """Until the next settle: a task that does not fit now may fit once one in flight gives back its rest."""
        import asyncio

        if self._settled is None:
            self._settled = asyncio.Event()
        await self._settled.wait()


class ExactSum:
    """A running float sum without rounding error (Shewchuk's partials, as `math.fsum` keeps them)."""

    __slots__ = ("partials",)

    def __init__(self) -> None:
        self.partials: list[float] = []

    def add(self, x: float) -> None:
        kept = 0
        for y in self.partials:
            if abs(x) < abs(y):
                x, y = y, x
            high = x + y
            low = y - (high - x)
            if low:
                self.partials[kept] = low
                kept += 1
            x = high
        self.partials[kept:] = [x]

    @property
    def value(self) -> float:
        import math

        return math.fsum(self.partials)


class RoundedValues:
    """Values counted by their value rounded to `digits`: the mean, the nearest-rank percentile and the maximum."""

    __slots__ = ("digits", "counts", "total", "count", "largest")

    def __init__(self, digits: int) -> None:
        self.digits = digits
        self.counts: Counter = Counter()
        self.total = ExactSum()
        self.count = 0
        self.largest = float("-inf")

    def add(self, value: float) -> None:
        self.counts[round(value, self.digits)] += 1
        self.total.add(value)
        self.count += 1
        self.largest = max(self.largest, value)

    @property
    def mean(self) -> float:
        return self.total.value / self.count

    def percentile(self, share: float) -> float:
        """The value of rank round(share * count) (at least 1), rounded: as `sorted(values)[rank - 1]` would print."""
        rank = max(1, int(round(share * self.count)))
        seen = 0
        for value in sorted(self.counts):
            seen += self.counts[value]
            if seen >= rank:
                return value
        raise ValueError("no values")


class BatchTotals:
    """The dataset report's figures over the tasks that ran, kept as they finish."""

    def __init__(self) -> None:
        self.tasks = 0
        self.statuses: Counter = Counter()
        self.costs = RoundedValues(1)
        self.times = RoundedValues(3)
        self.overran = 0
        self.deadlined = 0  # tasks with a deadline
        self.stopped_by_deadline = 0
        self.skipped_total = 0  # tasks the total budget had no room for (not run, not counted above)
        self.skipped_budget = 0  # tasks whose own budget earlier runs had spent (not run, not counted above)
        self.interrupted = 0  # tasks whose process died with them in flight (a Ray runner): --resume runs them
        self.allocated: Counter = Counter()  # per-task budget -> tasks run at it
        self.too_long = 0  # tasks no binding fits at their length (not run, not counted above)
        self.classes: Counter = Counter()  # length class (task_tokens) -> tasks run in it
        self.worst_cost = 0.0
        self.worst_bound: float | None = None

    @property
    def skipped(self) -> int:
        """Tasks that did not start: a later --resume with more room runs them."""
        return self.skipped_total + self.skipped_budget + self.too_long

    @property
    def ended(self) -> int:
        """Tasks with an outcome in this run, whatever it was."""
        return self.tasks + self.skipped + self.interrupted

    def add(self, result) -> None:
        # Tasks that did not start, or whose outcome died with their process, are counted, not measured.
        if result.status == "skipped_total":
            self.skipped_total += 1
            return
        if result.status == "skipped_budget":
            self.skipped_budget += 1
            return
        if result.status == "interrupted":
            self.interrupted += 1
            return
        if result.status == "too_long":
            self.too_long += 1
            return
        self.tasks += 1
        self.statuses[result.status] += 1
        self.costs.add(result.cost)
        self.overran += bool(result.overran)
        if getattr(result, "length_class", None) is not None:  # a stand-in result may carry no length
            self.classes[result.length_class] += 1
        self.allocated[result.budget] += 1
        self.worst_cost = max(self.worst_cost, result.cost)
        if result.bound is not None:
            self.worst_bound = result.bound if self.worst_bound is None else max(self.worst_bound, result.bound)
        if result.deadline_s is not None:
            self.deadlined += 1
            self.times.add(result.elapsed_s)
            self.stopped_by_deadline += result.exhausted == "deadline"
