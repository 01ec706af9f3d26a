"""Provider rate limits: one shared limiter paces every call to a provider key and model.

Each key (provider, endpoint, key variable, model id) has two buckets, one of
requests and one of tokens, refilled continuously at the limit per minute
less a headroom. A bucket holds at most a sixtieth of its limit, so calls are
spread over the minute rather than sent in a burst: a server that counts a
sliding minute, or one that enforces its limit over shorter periods, sees no
more than the limit. A call waits, first come first served, until both
buckets hold what it needs (one request, and its prompt plus max_tokens); a
call larger than a whole bucket waits for a full one and leaves it in debt.

A 429 pauses the key for everyone until the server's Retry-After (capped at
a minute) and empties its buckets, and cuts its rate by a quarter, which grows
back over the following minute (a quarter of the limit a minute). A provider's rate-limit headers adapt it: the
limit it reports (or the declared one, if lower) sets the rate, and what it
says is left caps what the buckets hold, which catches other clients of the
same key. A key that learns its limit from the headers first owes what it
sent before it knew.

Nothing a server says stalls a run: a reported limit is believed down to a
floor (`REPORTED_FLOOR`, and a tenth of the declared limit; one below a
request, or past `REPORTED_CEILING`, is ignored), a debt is at most one
window's limit, and no call waits more than one window at the head of its
key's queue (`max_wait_s`). A reset more than a window away is ignored. A
header that is unreadable, out of those bounds or below the declared limit
is warned about once per key and header (`RateLimitWarning`); what is left
of a limit not believed is not believed either.

A caller with a deadline says how long it may wait (`within`): it leaves the
queue, taking nothing, as soon as its turn cannot come in time, whether it
is at the head or behind others, so it never waits past its deadline.

All state lives in one `RateLimiter`; `acquire`, `penalise` and `observe` are
the whole interface, so an actor can hold it and serve several processes.
"""

from __future__ import annotations

import asyncio
import math
import time
import warnings
from collections import deque
from collections.abc import Mapping

from bamasc.program import RateLimit
from bamasc.provider_registry import lookup
from bamasc.metering.rate_headers import Window, read_rate_headers

WINDOW_S = 60.0  # what the declared limits are per
HEADROOM = 0.05  # share of each limit left unused: room for the time requests take to reach a sliding-window server
BURST = 1 / 60  # share of a limit a bucket holds: a second's worth of a per-minute limit
CUT = 0.75  # a 429 multiplies the key's rate by this
FLOOR = 0.1  # ... down to this share of its limit at least
EPSILON_S = 1e-6
# The least a reported limit is believed to be, per window: below any provider's published limits, so a
# header of 1 (or one that lost its digits on the way) cannot slow a key to a call a minute. A lower
# limit that is real can be declared in the model's `rate_limit`, which is always honoured.
REPORTED_FLOOR = {"requests": 10.0, "tokens": 10_000.0}
# Past this a reported limit is no provider's (the largest published are tens of thousands of requests
# and hundreds of millions of tokens a minute): it is ignored, as an unreadable one is.
REPORTED_CEILING = {"requests": 1e7, "tokens": 1e11}


class RateLimitWarning(UserWarning):
    """A provider's rate-limit header that was not believed as it was sent."""


def rate_key(model) -> str | None:
    """The key `model`'s calls are paced under: calls of models that share the provider's account and model
    share it. None when there is nothing to pace: no limit declared, and a provider that sends no headers."""
    if model.rate_limit is None and getattr(lookup(model.provider), "rate_headers", None) is None:
        return None
    return "|".join((model.provider, model.base_url or "", model.api_key_env or "", model.model_id))


class _Bucket:
    """One limit of one key: units available now, refilled at the limit's pace."""

    def __init__(self, name: str, declared: float | None, window_s: float, now: float):
        self.name = name  # requests | tokens
        self.declared = declared
        self.reported: float | None = None
        self.window_s = window_s
        self.level = self.capacity
        self.stamp = now

    @property
    def limit(self) -> float | None:
        known = [limit for limit in (self.declared, self.reported) if limit is not None]
        return min(known) if known else None

    @property
    def capacity(self) -> float:
        return 1.0 if self.limit is None else max(1.0, self.limit * BURST)

    def rate(self, factor: float) -> float:
        """Units per second."""
        return 0.0 if self.limit is None else self.limit * (1 - HEADROOM) * factor / self.window_s

    def refill(self, now: float, factor: float, since: float) -> None:
        """Bring the level up to `now`, refilled from `since` on (a pause refills nothing)."""
        if self.limit is not None:
            self.level = min(self.capacity, self.level + max(0.0, now - max(since, self.stamp)) * self.rate(factor))
        self.stamp = now

    def wait(self, amount: float, factor: float) -> float:
        """Seconds until `amount` may be taken (a whole bucket, for more than one holds)."""
        if self.limit is None:
            return 0.0
        needed = min(amount, self.capacity)
        return 0.0 if self.level >= needed else (needed - self.level) / self.rate(factor)

    def take(self, amount: float) -> None:
        """Take `amount`, owing what the bucket lacks: one window's limit at most, so one huge call
        (or a limit that shrank under it) slows the key for a window, not for hours."""
        self.level -= amount
        if self.limit is not None:
            self.level = max(self.level, -self.limit)


class _Turn:
    """One caller in a key's queue: when it gives up (None: never), and the future its turn comes on."""

    __slots__ = ("give_up_at", "future")

    def __init__(self, give_up_at: float | None, future: asyncio.Future):
        self.give_up_at = give_up_at
        self.future = future  # True: its turn; False: it cannot come in time


class _Key:
    def __init__(self, requests: float | None, tokens: float | None, window_s: float, now: float):
        self.requests = _Bucket("requests", requests, window_s, now)
        self.tokens = _Bucket("tokens", tokens, window_s, now)
        self.paused_until = now
        self.cut = 1.0  # the rate's factor right after the last 429
        self.cut_at = now
        self.window_s = window_s
        self.queue: deque[_Turn] = deque()  # callers in the order they came; the first one's turn is next

    def drop_late(self, earliest: float) -> None:
        """Send away every caller behind the first whose turn cannot come before `earliest`, when it must
        have given up: first come, first served, no one is served before the first."""
        for turn in list(self.queue)[1:]:
            if turn.give_up_at is not None and turn.give_up_at < earliest:
                self.queue.remove(turn)
                if not turn.future.done():
                    turn.future.set_result(False)

    def factor(self, now: float) -> float:
        """The share of its limits the key may use now: cut by 429s, growing back by one cut's worth a window."""
        return min(1.0, self.cut + (1 - CUT) * max(0.0, now - self.cut_at) / self.window_s)

    def refill(self, now: float) -> float:
        factor = self.factor(now)
        self.requests.refill(now, factor, self.paused_until)
        self.tokens.refill(now, factor, self.paused_until)
        return factor


class RateLimiter:
    """Requests and tokens per minute for each key; `limits` maps keys to their declared `RateLimit`s.

    `window_s` is the length of the declared limits' minute (a shorter one runs
    a test or benchmark faster); `max_wait_s` the longest a call waits at the
    head of its key's queue (one window unless given); `clock` and `sleep` are
    for tests.
    """

    def __init__(self, limits: Mapping[str, object] | None = None, *, window_s: float = WINDOW_S,
                 max_wait_s: float | None = None, clock=time.monotonic, sleep=asyncio.sleep):
        if not window_s > 0:
            raise ValueError("window_s must be positive")
        if max_wait_s is not None and not 0 < max_wait_s < math.inf:
            raise ValueError("max_wait_s must be positive and finite")
        self.window_s = window_s
        self.max_wait_s = window_s if max_wait_s is None else max_wait_s
        self._clock = clock
        self._sleep = sleep
        self._declared = dict(limits or {})
        self._keys: dict[str, _Key] = {}
        self._loop = None
        self._warned: set[tuple[str, str]] = set()

    def _key(self, key: str) -> _Key:
        state = self._keys.get(key)
        if state is None:
            declared = self._declared.get(key)
            state = self._keys[key] = _Key(
                getattr(declared, "requests_per_minute", None), getattr(declared, "tokens_per_minute", None),
                self.window_s, self._clock(),
            )
        return state

    async def acquire(self, key: str, tokens: int, within: float | None = None) -> float | None:
        """Wait until `key` may send one request of `tokens` tokens, and take them; returns the seconds waited.

        With `within`, the caller waits at most that many seconds: None, with
        nothing taken, as soon as its turn cannot come by then.
        """
        started = self._clock()
        state = self._key(key)
        loop = asyncio.get_running_loop()
        if self._loop is not loop:  # a queue's futures belong to the loop they were made on
            self._loop = loop
            for each in self._keys.values():
                each.queue.clear()
        give_up_at = None if within is None else started + max(0.0, within)
        turn = _Turn(give_up_at, loop.create_future())
        state.queue.append(turn)
        try:
            # First come, first served: only the head of the queue sleeps, and sends away those
            # behind it whose turn would come too late.
            if state.queue[0] is not turn and not await turn.future:
                return None
            head_since = self._clock()
            while True:
                now = self._clock()
                factor = state.refill(now)
                wait = max(state.paused_until - now, state.requests.wait(1, factor), state.tokens.wait(tokens, factor))
                # No single wait is longer than max_wait_s, whatever the server said.
                wait = min(wait, head_since + self.max_wait_s - now)
                if wait <= EPSILON_S:  # closer than the clock's resolution: a sleep would not move it
                    break
                if give_up_at is not None and now + wait > give_up_at:
                    return None
                state.drop_late(now + wait)
                await self._sleep(wait)
            state.requests.take(1)
            state.tokens.take(tokens)
        finally:
            self._leave(state, turn)
        return max(0.0, self._clock() - started)

    @staticmethod
    def _leave(state: _Key, turn: _Turn) -> None:
        """`turn` is served, gave up or was cancelled: out of the queue, and the next one's turn if it led."""
        if turn in state.queue:
            led = state.queue[0] is turn
            state.queue.remove(turn)
            if led and state.queue and not state.queue[0].future.done():
                state.queue[0].future.set_result(True)

    def penalise(self, key: str, retry_after_s: float | None = None) -> None:
        """A call on `key` was refused with a 429: hold every caller of the key back, and slow it down."""
        state = self._key(key)
        now = self._clock()
        factor = state.refill(now)
        pause = self.window_s / 60 if retry_after_s is None else retry_after_s
        if not math.isfinite(pause) or pause < 0:
            pause = self.window_s / 60
        # A server's Retry-After is believed up to one window: past that it would stall the run.
        state.paused_until = max(state.paused_until, now + min(pause, self.window_s))
        state.cut, state.cut_at = max(FLOOR, factor * CUT), state.paused_until  # it grows back once the pause ends
        for bucket in (state.requests, state.tokens):
            bucket.level = min(bucket.level, 0.0)
        state.drop_late(state.paused_until)

    def observe(self, key: str, headers: Mapping[str, str]) -> None:
        """Adapt `key` to the rate-limit headers of a reply from its provider (a 429's included)."""
        if not headers:
            return
        report = read_rate_headers(headers)
        if report.empty:
            return
        for name, value in report.unreadable:
            self._warn(key, name, f"{key}: ignored the rate-limit header {name}: {value!r}, which is no count", 3)
        state = self._key(key)
        now = self._clock()
        state.refill(now)
        for bucket, window in ((state.requests, report.requests), (state.tokens, report.tokens)):
            self._adapt(state, bucket, self._believed(key, bucket, window), now)

    def _believed(self, key: str, bucket: _Bucket, window: Window) -> Window:
        """`window` with its limit raised to the floor, warning when the server contradicts the floor or the declaration."""
        if window.reset_s is not None and window.reset_s > self.window_s:
            # A per-minute limit is whole again within a minute: a later reset is not believed.
            self._warn(key, f"{bucket.name} reset", f"{key}: ignored a {bucket.name} reset {window.reset_s:g} s away")
            window = Window(window.limit, window.remaining, None)
        reported = window.limit
        if reported is None:
            return window
        if not 1 <= reported <= REPORTED_CEILING[bucket.name]:  # some servers send 0 for none
            self._warn(key, bucket.name, f"{key}: ignored a reported limit of {reported:g} {bucket.name} a minute")
            return Window()  # what it says is left, and when, count against that limit: not believed either
        floor = max(REPORTED_FLOOR[bucket.name], 0.0 if bucket.declared is None else FLOOR * bucket.declared)
        if reported < floor:
            self._warn(key, bucket.name, f"{key}: the server reports {reported:g} {bucket.name} a minute, "
                                         f"below the floor of {floor:g}; paced at {floor:g}")
            # What it says is left is counted against the limit not believed: it is not believed either.
            return Window(floor, None, window.reset_s)
        if bucket.declared is not None and reported < bucket.declared:
            self._warn(key, bucket.name, f"{key}: the server reports {reported:g} {bucket.name} a minute, "
                                         f"below the declared {bucket.declared:g}; paced at {reported:g}")
        return window

    def _warn(self, key: str, what: str, message: str, stacklevel: int = 4) -> None:
        """Warn once per key and header (a run makes thousands of calls), where `observe` was called from."""
        if (key, what) not in self._warned:
            self._warned.add((key, what))
            warnings.warn(message, RateLimitWarning, stacklevel=stacklevel)

    def _adapt(self, state: _Key, bucket: _Bucket, window: Window, now: float) -> None:
        if window.limit is not None:
            unknown = bucket.limit is None
            bucket.reported = window.limit
            if unknown:
                # The calls sent while the limit was unknown (each took from the level, which nothing
                # refilled), or what the server says is used if more, are owed first: up to one limit.
                used = 0.0 if window.remaining is None else max(0.0, window.limit - window.remaining)
                owed = min(bucket.level, bucket.capacity - used)
                bucket.level = max(owed, bucket.capacity - bucket.limit)
        if window.remaining is None:
            return
        bucket.level = min(bucket.level, window.remaining)
        if bucket.limit is None and window.remaining < 1 and window.reset_s is not None:
            # No rate to refill at: wait for the server's reset instead (a believed one is within a window).
            state.paused_until = max(state.paused_until, now + window.reset_s)
            state.drop_late(state.paused_until)

    def limits(self, key: str) -> tuple[float | None, float | None]:
        """The requests and tokens per window `key` is paced at now (declared or reported, the lower)."""
        state = self._key(key)
        return state.requests.limit, state.tokens.limit


def limiter_for(models, *, window_s: float = WINDOW_S) -> RateLimiter:
    """A limiter for `models` (checked `Model`s), with the limits they declare.

    Models that share a key and declare different limits share the lowest.
    """
    limits: dict[str, object] = {}
    for model in models:
        key = rate_key(model)
        if key is None or model.rate_limit is None:
            continue
        known = limits.get(key)
        limits[key] = model.rate_limit if known is None else _lower(known, model.rate_limit)
    return RateLimiter(limits, window_s=window_s)


def _lower(one, other):
    def low(a, b):
        return b if a is None else a if b is None else min(a, b)

    return RateLimit(low(one.requests_per_minute, other.requests_per_minute),
                     low(one.tokens_per_minute, other.tokens_per_minute))
