"""The rate limiter on a clock of its own: limits hold in every window, 429s hold everyone back, headers adapt it."""

from __future__ import annotations

import asyncio
import datetime
import pickle
import random

import pytest

from bamasc.program import RateLimit
from bamasc.metering.limiter import CUT, RateLimiter, RateLimitWarning, limiter_for, rate_key
from bamasc.runtime.providers.base import ProviderError
from bamasc.runtime.providers.failures import error_for_status
from bamasc.metering.rate_headers import Window, parse_duration, rate_headers, read_rate_headers
from tests.conftest import model_declaration
from tests.runtime.fake_time import FakeTime

KEY = "openai||OPENAI_API_KEY|gpt-4o-mini"


def limiter(time: FakeTime, requests=None, tokens=None, **options) -> RateLimiter:
    return RateLimiter({KEY: RateLimit(requests, tokens)}, clock=time.clock, sleep=time.sleep, **options)


def most_in(grants: list[tuple[float, int]], window: float) -> tuple[int, int]:
    """The most requests and tokens granted in any `window` seconds (a grant at t leaves at t + window)."""
    most_requests = most_tokens = start = tokens = 0
    for end, (when, cost) in enumerate(grants):
        tokens += cost
        while grants[start][0] <= when - window:
            tokens -= grants[start][1]
            start += 1
        most_requests = max(most_requests, end - start + 1)
        most_tokens = max(most_tokens, tokens)
    return most_requests, most_tokens


async def drain(limits: RateLimiter, time: FakeTime, sizes, key: str = KEY) -> list[tuple[float, int]]:
    """Callers that always have a call ready: the limiter alone sets the pace."""
    grants = []
    for size in sizes:
        await limits.acquire(key, size)
        grants.append((time.now, size))
    return grants


@pytest.mark.parametrize("requests, tokens", [(600, None), (None, 300_000), (600, 400_000)])
def test_no_window_of_a_minute_or_half_one_holds_more_than_the_limit(requests, tokens):
    time = FakeTime()
    rng = random.Random(7)
    sizes = [rng.randint(50, 4000) for _ in range(3000)]
    grants = asyncio.run(drain(limiter(time, requests, tokens), time, sizes))
    for window in (60.0, 30.0):
        most_requests, most_tokens = most_in(grants, window)
        if requests:
            assert most_requests <= requests * window / 60
        if tokens:
            assert most_tokens <= tokens * window / 60
    # ... and the limit is used: at least 90% of the binding one, once the first minute has passed.
    settled = [grant for grant in grants if grant[0] >= 60.0]
    elapsed = settled[-1][0] - settled[0][0]
    rates = []
    if requests:
        rates.append((len(settled) - 1) / elapsed / (requests / 60))
    if tokens:
        rates.append(sum(cost for _, cost in settled[1:]) / elapsed / (tokens / 60))
    assert max(rates) >= 0.9


@pytest.mark.parametrize("max_wait_s, expected", [
    # The debt is one window's limit at most (not the 9,900 tokens the call lacked), paid off at 95
    # tokens a second before the next call of 50 goes...
    (1000.0, (6000 + 50) / (6000 * 0.95 / 60)),
    # ... and no wait is longer than one window, whatever it owes.
    (None, 60.0),
])
def test_a_call_larger_than_the_limit_waits_for_a_full_bucket_and_does_not_block_forever(max_wait_s, expected):
    time = FakeTime()
    limits = limiter(time, tokens=6000, max_wait_s=max_wait_s)  # a bucket holds a second's worth: 100 tokens
    waited = asyncio.run(limits.acquire(KEY, 10_000))
    assert waited == 0.0  # the bucket starts full
    waited = asyncio.run(limits.acquire(KEY, 50))
    assert waited == pytest.approx(expected, rel=1e-6)


def test_callers_are_served_in_the_order_they_came():
    time = FakeTime()
    limits = limiter(time, tokens=6000)
    order = []

    async def call(name, size):
        await limits.acquire(KEY, size)
        order.append(name)

    async def main():
        await limits.acquire(KEY, 100)  # empty the bucket
        # A large call first, then small ones that would fit sooner: they must not overtake it.
        await asyncio.gather(call("large", 100), *(call(f"small{i}", 1) for i in range(5)))

    asyncio.run(main())
    assert order == ["large", "small0", "small1", "small2", "small3", "small4"]


def test_a_429_holds_back_every_caller_of_the_key_and_slows_it_down():
    time = FakeTime()
    limits = limiter(time, requests=6000)

    async def main():
        for _ in range(100):
            await limits.acquire(KEY, 1)  # the bucket empty, the pace steady
        before = time.now
        limits.penalise(KEY, 2.5)
        await limits.acquire(KEY, 1)  # another caller than the one refused
        assert time.now - before >= 2.5
        # Right after the pause the rate is cut: a request takes 1/CUT as long as before.
        start = time.now
        await limits.acquire(KEY, 1)
        assert time.now - start == pytest.approx(1 / (100 * 0.95 * CUT), rel=0.01)
        # Over the next minute it grows back to the full rate.
        time.now += 60.0
        await drain(limits, time, [1] * 200)
        start = time.now
        await limits.acquire(KEY, 1)
        assert time.now - start == pytest.approx(1 / (100 * 0.95), rel=0.01)

    asyncio.run(main())


def test_a_caller_that_cannot_be_served_by_its_deadline_leaves_the_queue_at_once():
    time = FakeTime()
    limits = limiter(time, requests=60)  # a bucket of one request
    ended = []

    async def call(name, within=None):
        ended.append((name, await limits.acquire(KEY, 1, within)))

    async def main():
        await limits.acquire(KEY, 1)  # empties the bucket
        head = asyncio.ensure_future(call("head"))
        behind = asyncio.ensure_future(call("behind", within=5.0))
        await asyncio.sleep(0)  # the head sleeps its second, the other waits behind it
        limits.penalise(KEY, 30.0)  # the key's next turn is now past the second caller's deadline
        await asyncio.gather(head, behind)

    asyncio.run(main())
    # It left with nothing as soon as the 429 came, before the head's turn: not at its deadline, not after the pause.
    assert ended[0] == ("behind", None)
    assert ended[1][0] == "head" and ended[1][1] >= 30.0
    # At the head of the queue, a caller whose turn comes too late leaves without sleeping; nothing is taken.
    limits.penalise(KEY, 30.0)
    slept = len(time.sleeps)
    assert asyncio.run(limits.acquire(KEY, 1, within=1.0)) is None and len(time.sleeps) == slept
    assert asyncio.run(limits.acquire(KEY, 1, within=120.0)) >= 30.0


def test_a_429_pauses_a_key_that_has_no_limit_at_all():
    time = FakeTime()
    limits = RateLimiter(clock=time.clock, sleep=time.sleep)
    assert asyncio.run(limits.acquire("k", 10)) == 0.0
    limits.penalise("k", None)  # no Retry-After: a second
    assert asyncio.run(limits.acquire("k", 10)) == pytest.approx(1.0)


@pytest.mark.parametrize("retry_after", [3600.0, float("inf"), float("nan"), -5.0])
def test_a_servers_retry_after_is_believed_up_to_one_window(retry_after):
    time = FakeTime()
    limits = limiter(time, requests=6000)
    limits.penalise(KEY, retry_after)
    waited = asyncio.run(limits.acquire(KEY, 1))
    assert 0 < waited <= 60.0 + 0.1


def test_reported_limits_below_the_declared_ones_set_the_pace():
    time = FakeTime()
    limits = limiter(time, requests=6000, tokens=1_000_000)
    with pytest.warns(RateLimitWarning, match="reports 600 requests a minute, below the declared 6000"):
        limits.observe(KEY, {"x-ratelimit-limit-requests": "600", "x-ratelimit-limit-tokens": "5000000"})
    assert limits.limits(KEY) == (600, 1_000_000)  # the lower of declared and reported, each
    grants = asyncio.run(drain(limits, time, [1] * 100))
    assert most_in(grants, 60.0)[0] <= 600
    assert grants[-1][0] - grants[10][0] == pytest.approx(89 / (600 * 0.95 / 60), rel=1e-6)


def test_a_key_with_no_declared_limit_learns_one_from_the_headers():
    time = FakeTime()
    limits = RateLimiter(clock=time.clock, sleep=time.sleep)
    assert limits.limits("k") == (None, None)
    limits.observe("k", {"anthropic-ratelimit-requests-limit": "120", "anthropic-ratelimit-requests-remaining": "119",
                         "anthropic-ratelimit-requests-reset": "2026-01-01T00:00:01Z"})
    assert limits.limits("k") == (120, None)
    grants = asyncio.run(drain(limits, time, [1] * 50, "k"))
    # A bucket holds two requests, less the one the server says was used: one goes at once.
    assert grants[1][0] > 0
    assert grants[-1][0] == pytest.approx((50 - 1) / (120 * 0.95 / 60), rel=1e-6)


def test_calls_sent_before_the_limit_was_known_are_owed_once_it_is():
    time = FakeTime()
    limits = RateLimiter(clock=time.clock, sleep=time.sleep)
    asyncio.run(drain(limits, time, [1] * 30, "k"))  # no limit yet: all at once
    assert time.now == 0.0
    # The first reply, sent when few had arrived, reports 60 a minute and 59 left.
    limits.observe("k", {"x-ratelimit-limit-requests": "60", "x-ratelimit-remaining-requests": "59"})
    waited = asyncio.run(limits.acquire("k", 1))
    assert waited == pytest.approx(30 / (60 * 0.95 / 60))  # the thirty sent are paid for first


def test_what_the_server_says_is_left_caps_the_buckets():
    time = FakeTime()
    limits = limiter(time, requests=60_000)  # a bucket of 1,000 requests
    limits.observe(KEY, {"x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": "10s"})
    # Another client used the key up: the next request waits for a request's refill, not a burst.
    assert asyncio.run(limits.acquire(KEY, 1)) == pytest.approx(1 / (1000 * 0.95))


def test_an_unknown_limit_used_up_waits_for_the_servers_reset():
    time = FakeTime()
    limits = RateLimiter(clock=time.clock, sleep=time.sleep)
    limits.observe("k", {"x-ratelimit-remaining-tokens": "0", "x-ratelimit-reset-tokens": "1.5s"})
    assert asyncio.run(limits.acquire("k", 100)) == pytest.approx(1.5)


def test_one_limiter_serves_one_event_loop_after_another():
    limits = RateLimiter({KEY: RateLimit(60_000, None)})
    for _ in range(3):  # a lock made on one loop would fail on the next
        async def burst():
            await asyncio.gather(*(limits.acquire(KEY, 1) for _ in range(20)))

        asyncio.run(burst())


# --- keys and declarations


def test_models_on_one_account_and_model_share_a_key_and_the_lowest_limits():
    one = model_declaration(name="a", rate_limit=RateLimit(500, 200_000), api_key_env="K")
    other = model_declaration(name="b", rate_limit=RateLimit(800, 100_000), api_key_env="K")
    elsewhere = model_declaration(name="c", rate_limit=RateLimit(5, 5), api_key_env="OTHER")
    assert rate_key(one) == rate_key(other) != rate_key(elsewhere)
    limits = limiter_for([one, other, elsewhere])
    assert limits.limits(rate_key(one)) == (500, 100_000)
    assert limits.limits(rate_key(elsewhere)) == (5, 5)


def test_a_model_is_paced_only_with_a_limit_or_a_provider_that_reports_one():
    assert rate_key(model_declaration(provider="fake")) is None
    assert rate_key(model_declaration(provider="fake", rate_limit=RateLimit(10, None))) is not None
    assert rate_key(model_declaration(provider="anthropic")) is not None


# --- headers


@pytest.mark.parametrize(
    "text, seconds",
    [("6m0s", 360.0), ("1s", 1.0), ("20ms", 0.02), ("1h2m3.5s", 3723.5), ("0.5", 0.5), ("59m59.999s", 3599.999),
     ("", None), ("soon", None), ("-1s", None), ("1x", None), (None, None)],
)
def test_openai_reset_durations(text, seconds):
    assert parse_duration(text) == (pytest.approx(seconds) if seconds is not None else None)


def test_openai_headers():
    report = read_rate_headers({
        "X-RateLimit-Limit-Requests": "500", "x-ratelimit-remaining-requests": "499",
        "x-ratelimit-reset-requests": "120ms", "x-ratelimit-limit-tokens": "200000",
        "x-ratelimit-remaining-tokens": "oops", "x-ratelimit-reset-tokens": "6m0s",
    })
    assert report.requests == Window(500, 499, pytest.approx(0.12))
    assert report.tokens == Window(200_000, None, 360.0)  # an unreadable value is as good as absent


def test_anthropic_headers_and_their_input_and_output_limits():
    now = datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone.utc).timestamp()
    headers = {
        "anthropic-ratelimit-requests-limit": "50", "anthropic-ratelimit-requests-remaining": "0",
        "anthropic-ratelimit-requests-reset": "2026-01-01T00:00:03Z",
        "anthropic-ratelimit-input-tokens-limit": "40000", "anthropic-ratelimit-input-tokens-remaining": "39000",
        "anthropic-ratelimit-output-tokens-limit": "8000", "anthropic-ratelimit-output-tokens-remaining": "100",
        "anthropic-ratelimit-output-tokens-reset": "2025-12-31T23:59:00+00:00",
    }
    report = read_rate_headers(headers, now=now)
    assert report.requests == Window(50, 0, 3.0)
    assert report.tokens == Window(8000, 100, 0.0)  # the tighter of input and output; a reset in the past is now
    headers["anthropic-ratelimit-tokens-limit"] = "48000"
    assert read_rate_headers(headers, now=now).tokens == Window(48000, None, None)  # the combined limit wins


def test_only_rate_limit_headers_are_kept_and_they_survive_a_pickled_error():
    kept = rate_headers({"X-RateLimit-Limit-Requests": "5", "Retry-After": "2", "Set-Cookie": "secret",
                         "authorization": "Bearer sk-x"})
    assert kept == {"x-ratelimit-limit-requests": "5", "retry-after": "2"}
    error = error_for_status(429, provider="openai", model="m", headers={"x-ratelimit-remaining-requests": "0",
                                                                          "retry-after-ms": "250"})
    assert error.retry_after == 0.25
    copy = pickle.loads(pickle.dumps(error))
    assert isinstance(copy, ProviderError) and copy.rate_headers == error.rate_headers
    assert copy.rate_headers == {"x-ratelimit-remaining-requests": "0", "retry-after-ms": "250"}
