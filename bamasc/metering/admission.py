"""Admission: the limits an attempt at a call passes before it is sent, each one link with one protocol.

A link `admit`s an attempt (it may wait, and it may refuse by raising a
`Refused`: `BudgetExhausted`, `DeadlineReached`, or a new limit's own), and
after the attempt ends, the same link either `settle`s it with the usage the
provider reported (None: the outcome is unknown, a timeout, a dropped
connection or a cancellation, so everything held for it is kept) or
`release`s it (it surely was not processed: never sent, or refused by the
server). When a link refuses or fails while admitting, every link admitted
before it releases, last first, so an attempt that is not made charges
nothing.

`Admissions` is a chain of links, composed in one place (the interpreter's
`TaskRun.admissions`): the task's deadline, its budget guard, the provider
key's rate pace. A new limit is one more link. The chain tells its listeners
(the trace is one, `trace.AttemptLines`) each event of an attempt's life:
`refused` (a link would not admit it; nothing was sent, and `refused_by`
names the limit), `started` (every link admitted it and it is about to be
sent), `settled` (answered and charged), `failed` (ended without an answer,
its hold kept) and `released` (ended without an answer that was surely
never billed, its hold given back). What a listener reads is on the
`Attempt`.

The batch's total fits the same protocol one level up: `TotalLink` admits a
task's whole worst case from what is left of the total (runtime/batch.py,
or the Ray ledger actor behind its proxy) and settles it to the task's
charge.
"""

from __future__ import annotations

import time

from bamasc.prices import Usage
from bamasc.records import record
from bamasc.metering.limiter import rate_key
from bamasc.metering.refusals import BudgetExhausted, DeadlineReached, Refused, ShortOfTotal


class Attempt:
    """One try at one call, as its links and listeners see it. Links lower `max_tokens` and `timeout`,
    and note what they hold or learned; the interpreter notes the provider's `reply`."""

    __slots__ = ("request", "node", "model", "number", "prompt_tokens", "cap", "max_tokens", "timeout",
                 "policy_timeout", "deadline", "reservation", "waited", "reply", "usage", "rates", "charged", "error",
                 "held_back", "sent_at", "round", "choices", "refused_by", "fallback")

    def __init__(self, request, node, model, number: int, prompt_tokens: int, cap: int, timeout: float,
                 round: int | None = None, choices: int = 1):
        self.request = request  # the walker's CallRequest (None: a call the proxy forwards)
        self.node = node  # the plan's node of the call (its id and role; None: a call the proxy forwards)
        self.model = model
        self.number = number  # 1 for the first attempt at the call, 2 for its first retry, ...
        self.prompt_tokens = prompt_tokens  # exactly counted, or safely bounded
        self.cap = cap  # the output cap the call wants
        self.max_tokens = cap  # the cap it is sent with: the budget guard lowers it to what the budget leaves
        self.policy_timeout = timeout  # the retry policy's timeout for one attempt
        self.timeout = timeout  # the one it is sent with: the deadline shortens it to the time left
        self.deadline: DeadlineLink | None = None  # the link whose clock bounds every wait, once it admitted
        self.reservation = None  # the budget guard's hold (metering/guard.py)
        self.waited: float | None = None  # seconds waited for the key's turn; None: no rate limiter paces it
        self.reply = None  # what the provider sent back: a Completion or a ProviderError; None: nothing came
        self.usage: Usage | None = None  # what a settled attempt was charged for, and at which rates
        self.rates = None
        self.charged = 0.0  # µ$ the budget guard charged for it
        self.error: str | None = None  # why it was refused or failed, or how its bill broke the promise
        self.held_back = False  # a 429 paused its key: the retry waits in the limiter's queue, not a backoff
        self.sent_at: float | None = None  # when it was sent (time.perf_counter)
        self.round = round  # a tool loop's round, 0 to R (runtime/tool_loop.py); None for a call without tools
        self.choices = choices  # completions it asks for, each billed its output (the proxy's OpenAI `n`)
        self.refused_by: str | None = None  # the `limit` of the refusal that stopped it (metering/refusals.py)
        # On a fallback model (runtime/fallbacks.py): {"fallback_from": the seat's model, "fallback_reason": its
        # last error, "fallback_skipped": fallbacks passed over as dearer than the call's reservation}; else None.
        self.fallback: dict | None = None

    def again(self) -> Attempt:
        """The next attempt at the same call."""
        attempt = Attempt(self.request, self.node, self.model, self.number + 1, self.prompt_tokens, self.cap,
                          self.policy_timeout, self.round, self.choices)
        attempt.fallback = self.fallback
        return attempt

    @property
    def latency(self) -> float:
        """Seconds since it was sent."""
        return time.perf_counter() - self.sent_at

    @property
    def clamped(self) -> bool:
        return self.max_tokens < self.cap


def model_names(model) -> dict:
    """How a trace line names an attempt's model besides its name in the config: its `provider` and the vendor's
    `model_id` the request carries (what tools that price calls look up)."""
    return {"provider": model.provider, "model_id": model.model_id}


def reply_names(reply) -> dict:
    """What a provider's reply said of itself, each only where it gave it: `response_id`, `response_model`,
    `finish_reason` (a Completion's; an HTTP answer the proxy passed on has none)."""
    found = {field: getattr(reply, field, None) for field in ("response_id", "response_model", "finish_reason")}
    return {field: value for field, value in found.items() if isinstance(value, str) and value}


class Admission:
    """One link. Each method may be left out: the default admits, settles and releases nothing."""

    async def admit(self, attempt: Attempt) -> None:
        """Take what the attempt needs, waiting if need be; raise a `Refused` to stop it."""

    async def settle(self, attempt: Attempt, usage) -> None:
        """The attempt was made: charge `usage`; None when its outcome is unknown, which keeps what was held."""

    async def release(self, attempt: Attempt) -> None:
        """The attempt surely was not processed: give back what `admit` took."""


class Admissions:
    """The links one attempt passes, in order, and the listeners of its events (each `listener(event, attempt)`).

    The links a run composes end without waiting on anything (a guard, a
    clock, a limiter's local state or a message sent and not awaited), so a
    cancellation cannot cut an ending in half; a new link's should not wait either.
    """

    def __init__(self, links, listeners=()):
        self.links = tuple(links)
        self.listeners = tuple(listeners)

    async def admit(self, attempt: Attempt) -> None:
        admitted: list[Admission] = []
        try:
            for link in self.links:
                await link.admit(attempt)
                admitted.append(link)
        except Refused as refusal:
            await _end(admitted, "release", attempt)
            raise self.refused(attempt, refusal) from None
        except BaseException:
            # A link that breaks (or a cancellation while one waits) sends nothing: what was held goes back.
            await _end(admitted, "release", attempt)
            raise
        self._tell("started", attempt)
        attempt.sent_at = time.perf_counter()

    def refused(self, attempt: Attempt, refusal: Refused) -> Refused:
        """Tell the listeners that `attempt` will not be made; returns the refusal, to raise."""
        attempt.error = refusal.error
        attempt.refused_by = refusal.limit
        self._tell("refused", attempt)
        return refusal

    async def settle(self, attempt: Attempt, usage: Usage) -> None:
        """The provider answered with `usage`."""
        await self._ended("settled", attempt, "settle", usage)

    async def keep(self, attempt: Attempt, error: str) -> None:
        """The attempt failed and may have been billed: every link keeps what it held."""
        attempt.error = error
        await self._ended("failed", attempt, "settle", None)

    async def release(self, attempt: Attempt, error: str) -> None:
        """The attempt failed and surely was not processed: every link gives back what it held."""
        attempt.error = error
        await self._ended("released", attempt, "release")

    async def _ended(self, event: str, attempt: Attempt, ending: str, *args) -> None:
        try:
            await _end(self.links, ending, attempt, *args)
        finally:
            self._tell(event, attempt)  # what was charged is written even when a link broke while ending

    def _tell(self, event: str, attempt: Attempt) -> None:
        for listener in self.listeners:
            listener(event, attempt)


async def _end(links, ending: str, attempt: Attempt, *args) -> None:
    """End `attempt` at every link, last first; a link that breaks does not stop the others (the first error is raised)."""
    problem = None
    for link in reversed(links):
        try:
            await getattr(link, ending)(attempt, *args)
        except Exception as error:
            problem = problem or error
    if problem is not None:
        raise problem


class DeadlineLink(Admission):
    """The task's deadline (runtime/deadline.py): an attempt whose worst case might pass it is refused, one
    that is made gets the time left as its timeout, and every wait after it ends when time runs out."""

    def __init__(self, clock) -> None:
        self.clock = clock  # the task's DeadlineGuard

    async def admit(self, attempt: Attempt) -> None:
        self.recheck(attempt)
        attempt.deadline = self

    def recheck(self, attempt: Attempt) -> None:
        """Admit again after a wait: refuse if the time left no longer holds the attempt's worst case."""
        timeout = self.clock.timeout_for(attempt.model.latency, attempt.cap)
        if timeout is None:
            raise self.refusal(attempt)
        attempt.timeout = timeout

    def fits_after(self, attempt: Attempt, wait: float) -> bool:
        """Whether an attempt like `attempt` would still be admitted after waiting `wait` seconds (a backoff)."""
        return self.clock.timeout_for(attempt.model.latency, attempt.cap, wait) is not None

    def wait_left(self, attempt: Attempt) -> float | None:
        """The longest the attempt may still wait and finish in time; None without a deadline."""
        return self.clock.wait_left(attempt.model.latency, attempt.cap)

    def refusal(self, attempt: Attempt) -> DeadlineReached:
        return DeadlineReached(attempt.node.id, self.clock.refusal(attempt.model.latency, attempt.cap))


class BudgetLink(Admission):
    """The task's budget guard (metering/guard.py): the attempt's worst case is reserved, its output cap
    lowered to what the budget leaves; settled to the usage reported, kept in full when unknown."""

    def __init__(self, guard, options=None) -> None:
        self.guard = guard
        self.options = options  # attempt -> the guard's `reserve` keywords (a reference planner's unchecked calls)

    async def admit(self, attempt: Attempt) -> None:
        options = {} if self.options is None else self.options(attempt)
        reservation = self.guard.reserve(attempt.model, attempt.prompt_tokens, attempt.cap, **options)
        if reservation is None:
            raise BudgetExhausted(attempt.node.id)
        attempt.reservation = reservation
        attempt.max_tokens = reservation.max_tokens

    async def settle(self, attempt: Attempt, usage) -> None:
        if usage is None:
            attempt.charged = self.guard.keep(attempt.reservation)
            return
        attempt.usage = usage
        attempt.charged, attempt.rates = self.guard.settle_usage(attempt.reservation, usage)
        if self.guard.overbilled:
            attempt.error = f"overbilled: {self.guard.overbilled}"

    async def release(self, attempt: Attempt) -> None:
        attempt.charged = self.guard.release(attempt.reservation)


class PaceLink(Admission):
    """The provider key's rate pace (metering/limiter.py): the attempt waits its key's turn for one request
    of its prompt plus output cap; the reply's rate-limit headers, and a 429, tell the limiter."""

    def __init__(self, limiter, model) -> None:
        self.limiter = limiter
        self.key = rate_key(model) if limiter is not None else None  # None: nothing paces the model

    async def admit(self, attempt: Attempt) -> None:
        if self.key is None:
            return
        tokens = attempt.prompt_tokens + attempt.max_tokens * attempt.choices
        within = None if attempt.deadline is None else attempt.deadline.wait_left(attempt)
        if within is None:  # a limiter of an older interface still serves runs without deadlines
            attempt.waited = await self.limiter.acquire(self.key, tokens)
            return
        started = time.perf_counter()
        waited = await self.limiter.acquire(self.key, tokens, within)
        if waited is None:  # the key's turn comes after the deadline: the wait ends now, taking nothing
            attempt.waited = time.perf_counter() - started
            raise attempt.deadline.refusal(attempt)
        attempt.waited = waited
        if waited:
            attempt.deadline.recheck(attempt)  # the wait used up time the attempt may have needed

    async def settle(self, attempt: Attempt, usage) -> None:
        self._heard(attempt)

    async def release(self, attempt: Attempt) -> None:
        self._heard(attempt)

    def _heard(self, attempt: Attempt) -> None:
        reply = attempt.reply
        if self.key is None or reply is None:
            return
        if reply.rate_headers:
            self.limiter.observe(self.key, dict(reply.rate_headers))
        if getattr(reply, "kind", None) == "rate_limited":  # a provider's error (or the proxy's upstream) said 429
            self.limiter.penalise(self.key, reply.retry_after)  # every caller of the key is held back
            attempt.held_back = True


@record
class TaskHold:
    """A task's claim on the batch's total: its whole worst case, in µ$."""

    task_id: str
    amount: float


class TotalLink(Admission):
    """The batch's total (`BatchBudget`, or a Ray run's `RemoteLedger`) as a link: a `TaskHold` is admitted
    from what is left of the total, and settled to what the task charged (µ$; None keeps it in full)."""

    def __init__(self, ledger) -> None:
        self.ledger = ledger

    async def admit(self, hold: TaskHold) -> None:
        if not await self.ledger.reserve(hold.amount):
            raise ShortOfTotal(hold.task_id, f"the total budget has {max(0.0, self.ledger.remaining):.1f} µ$ left; "
                                             f"the task's worst case is {hold.amount:.1f} µ$")

    async def settle(self, hold: TaskHold, charged: float | None) -> None:
        await self.ledger.settle(hold.amount, hold.amount if charged is None else charged)

    async def release(self, hold: TaskHold) -> None:
        await self.ledger.settle(hold.amount, 0.0)
