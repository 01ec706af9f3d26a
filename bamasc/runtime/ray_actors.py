"""The actors of a Ray run, and the proxies through which a runner's tasks use the shared ones.

Plain classes: `ray_engine` makes them actors (`ray.remote`) when a run
starts, so nothing here imports Ray. One `Ledger` holds the batch's total
budget, one `Limits` the rate limiter; every `Runner` runs tasks with the
same interpreter as a local run (`workers.run_one`), its own providers, and
its own trace shard. Actor methods are awaited by the callers, so a task in
a runner waits on the ledger or the limiter the way it waits on local ones.

When the ledger or the limiter actor dies, no task may start: the total or
the pace could no longer be kept. A task not yet started raises
`SharedActorLost` (the driver stops sending tasks); one already running
ends under its own guard, which holds it within what it reserved, and its
charges are in the trace.
"""

from __future__ import annotations

from bamasc.runtime.batch import BatchBudget
from bamasc.runtime.execute import Recorder, Summary, close_providers, make_providers
from bamasc.runtime.workers import Batch, run_one


class SharedActorLost(RuntimeError):
    """The ledger or the limiter actor died: a task that has not started must not start."""


def _actor_gone(problem: BaseException) -> bool:
    """Whether `problem` says the actor called is dead or unreachable (Ray's RayActorError)."""
    from ray.exceptions import RayActorError

    return isinstance(problem, RayActorError)


class Ledger:
    """The batch's one `BatchBudget`. Each reply carries its figures, numbered, so a proxy keeps the latest.

    It knows what each runner's tasks hold, so that when a runner dies the
    driver can `keep` it: its tasks' outcomes are unknown (their open
    reservations count in full in the trace), so what they hold is counted
    spent in full, and the tasks waiting for room see that no settle will
    give it back.
    """

    def __init__(self, total: float, spent: float) -> None:
        self.budget = BatchBudget(total, spent=spent)
        self.replies = 0  # every reply's number: a proxy ignores figures older than those it holds
        self.settles = 0  # settles so far: `wait(seen)` returns after one later than `seen`
        self.held_by: dict = {}  # runner number -> what its tasks in flight hold
        self.kept: set = set()  # runners found dead: their holdings are spent, and nothing more of theirs counts

    def figures(self) -> tuple:
        self.replies += 1
        budget = self.budget
        return budget.total, budget.spent, budget.earlier, budget.held, self.replies, self.settles

    async def reserve(self, amount: float, runner=None):
        if runner in self.kept:  # a runner declared dead that still runs starts nothing more
            return False, self.figures()
        fits = await self.budget.reserve(amount)
        if fits:
            self.held_by[runner] = self.held_by.get(runner, 0.0) + amount
        return fits, self.figures()

    async def settle(self, reserved: float, charged: float, runner=None) -> tuple:
        if runner not in self.kept:  # a kept runner's holdings were already spent in full
            await self.budget.settle(reserved, charged)
            self.held_by[runner] = self.held_by.get(runner, 0.0) - reserved
            self.settles += 1
        return self.figures()

    async def keep(self, runner) -> tuple:
        """`runner` died: what its tasks hold is spent in full, and every task waiting for room wakes."""
        self.kept.add(runner)
        held = max(0.0, self.held_by.pop(runner, 0.0))
        await self.budget.settle(held, held)
        self.settles += 1
        return self.figures()

    async def wait(self, seen: int) -> tuple:
        # Counted, not just awaited: a settle between the caller's last reply and this call still wakes it.
        while self.settles <= seen:
            await self.budget.wait()
        return self.figures()


class RemoteLedger:
    """A runner's view of the `Ledger` actor, with `BatchBudget`'s interface; its figures are those of the
    latest reply. They are enough for the worker's decision to wait or skip: a reply showing money held
    by tasks in flight promises a settle after it, which `wait` waits for."""

    def __init__(self, actor, figures: tuple, runner=None) -> None:
        self.actor = actor
        self.runner = runner  # this runner's number: the ledger keeps what each runner's tasks hold
        self.reply = -1
        self.lost: str | None = None  # why the actor is gone, once a call found it so
        self._take(figures)

    def _take(self, figures: tuple) -> None:
        if figures[4] > self.reply:  # the reply's number
            self.total, self.spent, self.earlier, self.held, self.reply, self.settles = figures

    @property
    def remaining(self) -> float:
        return self.total - self.spent - self.held

    async def reserve(self, amount: float) -> bool:
        fits, figures = await self._call(self.actor.reserve, amount, self.runner)
        self._take(figures)
        return fits

    async def settle(self, reserved: float, charged: float) -> None:
        # A task that ran has its charges in the trace, whichever way this goes: a dead ledger needs no settle.
        try:
            self._take(await self._call(self.actor.settle, reserved, charged, self.runner))
        except SharedActorLost:
            pass

    async def wait(self) -> None:
        self._take(await self._call(self.actor.wait, self.settles))

    async def _call(self, method, *args):
        if self.lost is not None:
            raise SharedActorLost(self.lost)
        try:
            return await method.remote(*args)
        except Exception as problem:
            if not _actor_gone(problem):
                raise
            self.lost = f"the batch's ledger actor died ({type(problem).__name__})"
            raise SharedActorLost(self.lost) from None


class Limits:
    """The run's one `RateLimiter`: every runner's calls to a provider key are paced by it."""

    def __init__(self, limiter) -> None:
        self.limiter = limiter

    async def acquire(self, key: str, tokens: int, within: float | None = None) -> float | None:
        return await self.limiter.acquire(key, tokens, within)

    def penalise(self, key: str, retry_after_s: float | None = None) -> None:
        self.limiter.penalise(key, retry_after_s)

    def observe(self, key: str, headers: dict) -> None:
        self.limiter.observe(key, headers)

    def limits(self, key: str):
        return self.limiter.limits(key)


class RemoteLimiter:
    """A runner's view of the `Limits` actor. `penalise` and `observe` are sent and not waited for (the
    interpreter calls them without awaiting); an actor runs one caller's calls in the order sent, so the
    next `acquire` of the same runner is paced by them."""

    def __init__(self, actor) -> None:
        self.actor = actor
        self.lost: str | None = None  # why the actor is gone, once a call found it so

    async def acquire(self, key: str, tokens: int, within: float | None = None) -> float | None:
        # `within` is measured on the actor's clock from when it receives the call: the message's own
        # time in flight is not counted, which the interpreter's check after the wait covers.
        if self.lost is not None:
            raise SharedActorLost(self.lost)
        try:
            return await self.actor.acquire.remote(key, tokens, within)
        except Exception as problem:
            if not _actor_gone(problem):
                raise
            self.lost = f"the rate limiter actor died ({type(problem).__name__})"
            raise SharedActorLost(self.lost) from None

    def penalise(self, key: str, retry_after_s: float | None = None) -> None:
        self.actor.penalise.remote(key, retry_after_s)

    def observe(self, key: str, headers) -> None:
        self.actor.observe.remote(key, dict(headers))

    def limits(self, key: str):
        import ray

        return ray.get(self.actor.limits.remote(key))


class Runner:
    """Runs tasks as `workers.run_one` does locally, `concurrency` at a time (the actor's max_concurrency)."""

    def __init__(self, plan, program, system_name: str, options, models: set, shard: str | None,
                 ledger, limits, keep_calls: bool, number: int = 0) -> None:
        self.number = number  # which runner of the run: the ledger keeps what each one's tasks hold
        self.plan, self.program, self.system_name = plan, program, system_name
        self.options, self.models, self.shard = options, models, shard
        self.ledger_actor, self.limits_actor = ledger, limits
        self.summary = Summary()
        self.calls: list | None = [] if keep_calls else None
        self.trace = None
        self.batch: Batch | None = None

    async def start(self) -> None:
        """Open the shard and the providers (in the actor's event loop, which their clients belong to)."""
        self.trace = Recorder(self.shard, self.summary, self.calls)
        system = self.plan.system(self.system_name)
        providers = make_providers(self.program, system.name, self.options, self.models)
        ledger = None
        if self.ledger_actor is not None:
            ledger = RemoteLedger(self.ledger_actor, await self.ledger_actor.figures.remote(), self.number)
        limiter = RemoteLimiter(self.limits_actor) if self.limits_actor is not None else None
        self.batch = Batch(self.program, system, self.options, providers, self.trace, {}, ledger, limiter)

    async def run(self, task, chosen: str | None, earlier):
        """One task; `earlier` is its ledger in the trace from earlier runs, or None. SharedActorLost when
        the ledger or the limiter is gone and the task did not start."""
        for shared in (self.batch.ledger, self.batch.limiter):
            if shared is not None and shared.lost is not None:
                raise SharedActorLost(shared.lost)
        if earlier is not None:
            self.batch.ledgers[task.id] = earlier
        return await run_one(self.batch, task, chosen)

    async def close(self) -> tuple:
        """Close the shard and the providers; returns this runner's call totals (and calls, when kept)."""
        if self.trace is not None:
            self.trace.close()
        if self.batch is not None:
            await close_providers(self.batch.providers)
        return self.summary.by_role, self.summary.by_model, self.calls
