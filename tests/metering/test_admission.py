"""Admission as one protocol: a new limit is one more link, and its refusal stops a task as the budget and
the deadline do; a link that breaks, or a cancellation at any point, never charges an attempt not made and
keeps the reservation of one whose outcome is unknown; the batch's total fits the same protocol."""

from __future__ import annotations

import asyncio

import pytest

from bamasc.plan.compile import compile_file
from bamasc.metering.admission import Admission, Admissions, TaskHold, TotalLink
from bamasc.metering.refusals import BudgetExhausted, DeadlineReached, Refused, ShortOfTotal
from bamasc.runtime.batch import BatchBudget
from bamasc.runtime.deadline import DeadlineGuard
from bamasc.metering.guard import BudgetGuard
from bamasc.runtime.interpreter import TaskRun
from bamasc.runtime.providers.base import Completion
from bamasc.runtime.ray_actors import Ledger, RemoteLedger
from bamasc.runtime.retry import RetryPolicy
from bamasc.runtime.trace import TaskLedger, TraceWriter

RETRY = RetryPolicy(max_attempts=2, base_delay=0.0, max_delay=0.0, jitter=0.0, timeout=5.0)
DEADLINE_S = 10.0
SOURCE = f"""
model m0 {{
  provider = fake
  name     = "m0"
  tier     = 1
  price    {{ input = 0.5  output = 2.0 }}
  latency  {{ first_token = 0.01  per_token = 0.001 }}
}}
role Solver {{
  max_output = 64
  prompt     = "Solve: {{{{task}}}} {{{{previous?}}}}"
}}
topology three {{
  slot solver : Solver [3..3]
  flow {{ answer chain solver(task) }}
}}
system s {{
  models     = [m0]
  topologies = [three]
  budget     = 10000
  deadline   = {DEADLINE_S:g}
  min_agents = 0
}}
"""


# ---------------------------------------------------------------- toy links, in this file only


class TooManyAttempts(Refused):
    limit = "attempts"


class AtMost(Admission):
    """At most `n` attempts made per task: an attempt released (not made) gives its place back."""

    def __init__(self, n: int):
        self.n, self.made, self.kept = n, 0, 0

    async def admit(self, attempt) -> None:
        if self.made >= self.n:
            raise TooManyAttempts(attempt.node.id, f"attempts: {self.n} made, no more for this task")
        self.made += 1

    async def settle(self, attempt, usage) -> None:
        self.kept += usage is None  # an outcome unknown: the attempt counts as made

    async def release(self, attempt) -> None:
        self.made -= 1


class Broken(Admission):
    """A link with a defect: it raises while admitting, or while settling."""

    def __init__(self, when: str):
        self.when = when

    async def admit(self, attempt) -> None:
        if self.when == "admit":
            raise RuntimeError("a defect in a link")

    async def settle(self, attempt, usage) -> None:
        if self.when == "settle":
            raise RuntimeError("a defect in a link")


class Gate(Admission):
    """A link that waits until the test lets it through (never, here); `waiting` is set once it waits."""

    def __init__(self):
        self.waiting = asyncio.Event()

    async def admit(self, attempt) -> None:
        self.waiting.set()
        await asyncio.Event().wait()


class Extended(TaskRun):
    """A run whose attempts also pass `before` (ahead of the task's own links) and `after` (behind them)."""

    before: tuple = ()
    after: tuple = ()

    def admissions(self, model) -> Admissions:
        own = super().admissions(model)
        return Admissions((*self.before, *own.links, *self.after), own.listeners)


class Collect(TraceWriter):
    def __init__(self):
        super().__init__(None)
        self.reserved, self.calls = [], []

    def reserve(self, record: dict) -> str:
        self.reserved.append(record)
        return super().reserve(record)

    def call(self, record: dict) -> None:
        self.calls.append(record)

    def spent(self) -> float:
        """What resuming from this trace would count the task as having spent."""
        ledger = TaskLedger()
        for n, record in enumerate(self.reserved, start=1):
            ledger.add({"type": "reserve", **record, "id": f"{self._run}.{n}"})
        for record in self.calls:
            ledger.add({"type": "call", **record})
        return ledger.spent


class Answering:
    """A provider that answers every call; `during(n)` runs while the n-th call is out."""

    name = "m0"

    def __init__(self, during=None):
        self.sent = 0
        self.during = during

    def count_prompt_tokens(self, messages):
        return None

    async def complete(self, messages, max_tokens, *, timeout, decoding=None, expect="text"):
        self.sent += 1
        if self.during is not None:
            await self.during(self.sent)
        return Completion("#### 42", 12, 4)

    async def aclose(self):
        pass


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    path = tmp_path_factory.mktemp("admission") / "three.bam"
    path.write_text(SOURCE)
    result = compile_file(str(path))
    assert result.plan is not None, [d.message for d in result.diagnostics]
    return result.plan, result.program


def a_run(compiled, provider, before=(), after=(), now=None):
    plan, program = compiled
    system = plan.systems[0]
    template = system.template(system.selection["selected"])
    guard, trace = BudgetGuard(system.budget), Collect()
    run = Extended(program, system, template, {"m0": provider}, guard, "t", "x", trace, RETRY)
    run.before, run.after = tuple(before), tuple(after)
    if now is not None:
        run.clock = DeadlineGuard(DEADLINE_S, RETRY.timeout, clock=lambda: now[0])
    return run, guard, trace


# ---------------------------------------------------------------- a new limit refuses as the others do


def _stopped_at_the_third_call(compiled, limit: str):
    """The chain's third call refused by the toy link, or by the deadline (time jumps while the second is out)."""
    now = [0.0]

    async def late(sent: int) -> None:
        if sent == 2:
            now[0] = DEADLINE_S - 0.01  # less than the attempt's worst case is left

    if limit == "attempts":
        run, guard, trace = a_run(compiled, Answering(), after=[AtMost(2)], now=now)
    else:
        run, guard, trace = a_run(compiled, Answering(late), now=now)
    return asyncio.run(run.run()), guard, trace


@pytest.mark.parametrize("limit", ["attempts", "deadline"])
def test_a_new_limits_refusal_stops_the_task_as_the_deadlines_does(compiled, limit):
    result, guard, trace = _stopped_at_the_third_call(compiled, limit)
    assert (result.status, result.exhausted, result.calls) == ("exhausted", limit, 2)
    made, (refused,) = trace.calls[:2], trace.calls[2:]
    assert len(trace.reserved) == 2 and not any(line["skipped"] for line in made)
    # The refused attempt has a line of its own, held nothing and was charged nothing.
    assert refused["skipped"] and refused["id"] is None
    assert (refused["reserved"], refused["charged"], refused["latency_ms"]) == (0.0, 0.0, 0.0)
    assert refused["error"].startswith(limit)
    assert guard.held == 0 and guard.charged > 0
    assert guard.charged == pytest.approx(sum(line["charged"] for line in made))
    assert result.cost == guard.charged == pytest.approx(trace.spent())


def test_the_toy_refusal_and_the_deadline_refusal_write_the_same_line_but_for_why(compiled):
    lines = [_stopped_at_the_third_call(compiled, limit)[2].calls[2] for limit in ("attempts", "deadline")]
    assert lines[0].keys() == lines[1].keys()
    assert {k: v for k, v in lines[0].items() if k != "error"} == {k: v for k, v in lines[1].items() if k != "error"}


def test_money_and_time_are_different_refusals():
    assert not issubclass(DeadlineReached, BudgetExhausted) and not issubclass(BudgetExhausted, DeadlineReached)
    assert {DeadlineReached.limit, BudgetExhausted.limit} == {"deadline", "budget"}
    assert issubclass(DeadlineReached, Refused) and issubclass(BudgetExhausted, Refused)


# ---------------------------------------------------------------- hostile links and cancellations


def test_a_link_that_breaks_while_admitting_sends_nothing_and_holds_nothing(compiled):
    counter = AtMost(5)
    provider = Answering()
    run, guard, trace = a_run(compiled, provider, before=[counter], after=[Broken("admit")])
    with pytest.raises(RuntimeError, match="a defect in a link"):
        asyncio.run(run.run())
    # The guard had reserved for the attempt (it is admitted before the broken link): it gave that back.
    assert provider.sent == 0 and guard.held == 0 and guard.charged == 0
    assert trace.reserved == [] and trace.calls == [] and counter.made == 0


def test_a_link_that_breaks_while_settling_leaves_the_others_settled_and_the_charge_written(compiled):
    run, guard, trace = a_run(compiled, Answering(), before=[Broken("settle")])
    with pytest.raises(RuntimeError, match="a defect in a link"):
        asyncio.run(run.run())
    (line,) = trace.calls
    assert guard.held == 0 and guard.charged > 0 and guard.charged == pytest.approx(line["charged"])
    assert guard.charged == pytest.approx(trace.spent())


def test_a_cancellation_while_the_request_is_out_keeps_its_reservation(compiled):
    counter = AtMost(5)
    out = asyncio.Event()

    async def hang(sent: int) -> None:
        out.set()
        await asyncio.Event().wait()

    run, guard, trace = a_run(compiled, Answering(hang), after=[counter])

    async def main():
        running = asyncio.ensure_future(run.run())
        await out.wait()
        running.cancel()
        with pytest.raises(asyncio.CancelledError):
            await running

    asyncio.run(main())
    (reserved,), (line,) = trace.reserved, trace.calls
    # The provider may have billed it: the whole reservation is charged, in the guard and in the trace.
    assert line["error"] == "cancelled: outcome unknown, reservation kept"
    assert guard.held == 0 and guard.charged == pytest.approx(reserved["reserved"]) == pytest.approx(line["charged"])
    assert guard.charged > 0 and trace.spent() == pytest.approx(guard.charged)
    assert counter.made == 1 and counter.kept == 1  # every link settled it as an outcome unknown


def test_a_cancellation_while_an_attempt_waits_for_admission_releases_it(compiled):
    counter, gate = AtMost(5), Gate()
    run, guard, trace = a_run(compiled, Answering(), before=[counter], after=[gate])

    async def main():
        running = asyncio.ensure_future(run.run())
        await gate.waiting.wait()
        assert guard.held > 0  # the guard had reserved for it
        running.cancel()
        with pytest.raises(asyncio.CancelledError):
            await running

    asyncio.run(main())
    assert guard.held == 0 and guard.charged == 0 and counter.made == 0
    assert trace.reserved == [] and trace.calls == []


# ---------------------------------------------------------------- the batch's total, one level up


class _Actor:
    """A `Ledger` behind the interface of a Ray actor handle (`handle.method.remote(...)`), without Ray."""

    def __init__(self, ledger: Ledger):
        self.ledger = ledger

    def __getattr__(self, name: str):
        method = getattr(self.ledger, name)

        class Remote:
            @staticmethod
            async def remote(*args):
                return await method(*args)

        return Remote


def _totals():
    local = BatchBudget(100.0)
    shared = Ledger(100.0, 0.0)
    remote = RemoteLedger(_Actor(shared), shared.figures(), runner=1)
    return [(local, local), (remote, shared.budget)]


@pytest.mark.parametrize("where", ["local", "ray ledger"])
def test_the_total_admits_settles_keeps_and_releases_a_tasks_hold(where):
    ledger, budget = _totals()[["local", "ray ledger"].index(where)]
    total = TotalLink(ledger)

    async def main():
        first = TaskHold("a", 60.0)
        await total.admit(first)
        assert budget.held == 60.0
        with pytest.raises(ShortOfTotal) as refused:
            await total.admit(TaskHold("b", 50.0))
        assert refused.value.limit == "total" and "40.0 µ$ left" in refused.value.error
        assert budget.held == 60.0  # a refused hold takes nothing
        await total.settle(first, 25.0)
        assert (budget.held, budget.spent) == (0.0, 25.0)
        second = TaskHold("b", 50.0)
        await total.admit(second)
        await total.release(second)  # the task never ran
        assert (budget.held, budget.spent) == (0.0, 25.0)
        third = TaskHold("c", 30.0)
        await total.admit(third)
        await total.settle(third, None)  # its outcome is unknown: counted in full
        assert (budget.held, budget.spent) == (0.0, 55.0)

    asyncio.run(main())
