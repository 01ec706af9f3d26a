"""Rate limits end to end: tasks through the official SDKs against a local server that enforces them.

The server (tests/runtime/rate_server.py) counts requests and tokens over a
sliding window and answers 429 beyond them. A minute is scaled down to a few
seconds: the limiter's `window_s` and the server's window are the same length.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time

import pytest

from bamasc.runtime.execute import ExecOptions, Task
from bamasc.runtime.workers import run_tasks
from bamasc.runtime.deadline import DeadlineGuard
from bamasc.metering.guard import BudgetGuard
from bamasc.runtime.interpreter import TaskRun
from bamasc.metering.limiter import RateLimiter, limiter_for, rate_key
from bamasc.runtime.providers.failures import error_for_status
from bamasc.runtime.trace import TraceWriter
from tests.helpers.runtime import RETRY, WINDOW, compiled
from tests.runtime.fake_time import FakeTime
from tests.runtime.rate_server import limited_server
from tests.runtime.servers import Action, ScriptedServer, status

KEY = "sk-test-never-printed-0123456789"


def run(plan, program, tasks: int, limiter, concurrency: int = 8, trace_path=None):
    calls: list[dict] = []
    options = ExecOptions(concurrency=concurrency, retry=RETRY, limiter=limiter, trace_path=trace_path)
    batch = [Task(str(i), f"task number {i}") for i in range(tasks)]
    results, _, _ = asyncio.run(run_tasks(plan, program, None, batch, options, calls=calls))
    return results, calls


@pytest.fixture(autouse=True)
def api_key(monkeypatch):
    monkeypatch.setenv("BAMASC_TEST_KEY", KEY)


@pytest.mark.parametrize(
    "flavor, limits, declared",
    [
        ("openai", {"requests": 30}, "rate_limit { requests_per_minute = 30 }"),
        ("anthropic", {"tokens": 3000}, "rate_limit { tokens_per_minute = 3000 }"),
    ],
)
def test_declared_limits_hold_against_a_server_that_enforces_them(tmp_path, flavor, limits, declared):
    server, window = limited_server(flavor, window_s=WINDOW, headers=False, **limits)
    try:
        plan, program = compiled(tmp_path, flavor, server.base_url, declared)
        limiter = limiter_for(program.models.values(), window_s=WINDOW)
        results, calls = run(plan, program, 36, limiter)
    finally:
        server.close()
    assert [r.status for r in results] == ["ok"] * 36
    # The limiter, not the server's 429s, set the pace: every call waited its turn, and few were refused
    # (the scaled-down window leaves the client a tenth of a second of scheduling jitter).
    assert len(window.refused) <= 1, window.refused
    assert all("rate_wait_s" in call for call in calls)
    assert sum(call["rate_wait_s"] for call in calls) > WINDOW


def test_without_a_limiter_the_same_server_refuses_calls(tmp_path):
    # The check above could pass by luck if the server were lenient: here nothing paces the calls.
    server, window = limited_server("openai", window_s=WINDOW, headers=False, requests=30)
    try:
        plan, program = compiled(tmp_path, "openai", server.base_url)
        run(plan, program, 36, RateLimiter(window_s=WINDOW), concurrency=36)
    finally:
        server.close()
    assert len(window.refused) >= 5


@pytest.mark.parametrize("flavor", ["openai", "anthropic"])
def test_an_undeclared_limit_is_learned_from_the_headers(tmp_path, flavor):
    server, window = limited_server(flavor, window_s=WINDOW, requests=30, tokens=100_000)
    try:
        plan, program = compiled(tmp_path, flavor, server.base_url)
        limiter = limiter_for(program.models.values(), window_s=WINDOW)
        results, calls = run(plan, program, 40, limiter, concurrency=4)
    finally:
        server.close()
    assert limiter.limits(rate_key(program.models["remote"])) == (30, 100_000)
    assert [r.status for r in results] == ["ok"] * 40
    assert len(window.refused) <= 1, window.refused
    assert sum(call["rate_wait_s"] for call in calls) > 0


class FirstRefused:
    """The first request gets a 429 at once; every other one a reply after `delay` seconds. Arrivals are kept."""

    def __init__(self, retry_after: float, delay: float):
        self.retry_after = retry_after
        self.delay = delay
        self.lock = threading.Lock()
        self.arrivals: list[float] = []

    def __call__(self, body) -> Action:
        with self.lock:
            self.arrivals.append(time.monotonic())
            first = len(self.arrivals) == 1
        if first:
            return status(429, headers={"retry-after": str(self.retry_after)})
        return Action("slow", delay=self.delay)


def test_a_429_holds_back_every_task_on_the_key_not_only_the_one_refused(tmp_path):
    responder = FirstRefused(retry_after=0.8, delay=0.1)
    server = ScriptedServer("openai", responder=responder).start()
    try:
        plan, program = compiled(tmp_path, "openai", server.base_url)
        results, calls = run(plan, program, 12, limiter_for(program.models.values()), concurrency=4)
    finally:
        server.close()
    assert [r.status for r in results] == ["ok"] * 12
    refused_at = responder.arrivals[0]
    # The three sent alongside the refused one were already out; every later request, from any task,
    # waited out the Retry-After.
    later = responder.arrivals[4:]
    assert later and min(later) >= refused_at + 0.8 - 0.05
    # The SDK did not retry on its own: each attempt in the trace is one request at the server.
    assert len(calls) == len(responder.arrivals) == 13
    assert [call["attempt"] for call in calls if call["error"]] == [1]


def test_a_fake_model_with_a_limit_is_paced_and_the_wait_is_in_the_trace_and_its_export(tmp_path, capsys):
    pytest.importorskip("opentelemetry.sdk")
    from bamasc.cli import main

    plan, program = compiled(tmp_path, "fake", "http://unused", "rate_limit { requests_per_minute = 12 }")
    trace = tmp_path / "trace.jsonl"
    # 12 a "minute" of 0.5 s: the first call at once, then one every 0.5 / (12 * 0.95) s, all six queued together.
    results, calls = run(plan, program, 6, limiter_for(program.models.values(), window_s=0.5), trace_path=str(trace))
    assert [r.status for r in results] == ["ok"] * 6
    waits = sorted(call["rate_wait_s"] for call in calls)
    assert waits[0] < 0.01 and waits[-1] >= 5 * 0.5 / (12 * 0.95) - 0.01
    out = tmp_path / "spans.json"
    assert main(["trace", "export", str(trace), "-o", str(out)]) == 0
    data = json.loads(out.read_text())
    exported = [
        {pair["key"]: next(iter(pair["value"].values())) for pair in span.get("attributes", [])}
        for resource in data["resourceSpans"] for scope in resource["scopeSpans"] for span in scope["spans"]
    ]
    chat = [span for span in exported if span.get("gen_ai.operation.name") == "chat"]
    assert sorted(span["bamasc.rate_wait_s"] for span in chat) == pytest.approx(waits)


def test_offline_runs_are_not_paced(tmp_path):
    plan, program = compiled(tmp_path, "openai", "http://127.0.0.1:9", "rate_limit { requests_per_minute = 1 }")
    options = ExecOptions(fake_mode="echo", retry=RETRY)
    calls: list[dict] = []
    results, _, _ = asyncio.run(run_tasks(plan, program, None, [Task(str(i), "x") for i in range(5)], options, calls=calls))
    assert [r.status for r in results] == ["ok"] * 5  # one a minute would take four minutes
    assert not any("rate_wait_s" in call for call in calls)


class Collect(TraceWriter):
    def __init__(self):
        super().__init__(None)
        self.reserved, self.calls = [], []

    def reserve(self, record: dict) -> str:
        self.reserved.append(record)
        return super().reserve(record)

    def call(self, record: dict) -> None:
        self.calls.append(record)


def one_task(plan, program, limiter, trace, task_id="t"):
    system = plan.systems[0]
    template = system.template(system.selection["selected"])
    providers = {"remote": _Instant()}
    guard = BudgetGuard(system.budget)
    return guard, TaskRun(program, system, template, providers, guard, task_id, "x", trace, RETRY, 0, limiter)


class _Instant:
    name = "remote"

    def count_prompt_tokens(self, messages):
        return None

    async def complete(self, messages, max_tokens, *, timeout, decoding=None, expect="text"):
        from bamasc.runtime.providers.base import Completion

        return Completion("42", 5, 1)

    async def aclose(self):
        pass


def test_a_task_stopped_while_it_waits_has_sent_nothing_and_spent_nothing(tmp_path):
    plan, program = compiled(tmp_path, "fake", "http://unused", "rate_limit { requests_per_minute = 60 }")
    limiter = limiter_for(program.models.values())
    limiter.penalise(rate_key(program.models["remote"]), 30.0)
    trace = Collect()
    guard, task = one_task(plan, program, limiter, trace)

    async def main():
        running = asyncio.ensure_future(task.run())
        await asyncio.sleep(0.1)
        running.cancel()
        with pytest.raises(asyncio.CancelledError):
            await running

    asyncio.run(main())
    assert guard.charged == 0 and guard.held == 0
    assert trace.reserved == [] and trace.calls == []


def test_a_wait_that_would_pass_the_deadline_stops_the_task_as_the_deadline_does(tmp_path):
    plan, program = compiled(
        tmp_path, "fake", "http://unused", "rate_limit { requests_per_minute = 60 }",
        "latency { first_token = 0.01  per_token = 0.001 }", "deadline = 0.5",
    )
    time = FakeTime()
    limiter = fake_limiter(program, time)
    limiter.penalise(rate_key(program.models["remote"]), 1.0)
    trace = Collect()
    guard, task = one_task(plan, program, limiter, trace)
    task.clock = DeadlineGuard(0.5, RETRY.timeout, clock=time.clock)
    result = asyncio.run(task.run())
    assert result.status in ("failed", "exhausted") and result.exhausted == "deadline"
    assert guard.charged == 0 and guard.held == 0
    (skipped,) = trace.calls
    assert skipped["skipped"] and skipped["error"].startswith("deadline")
    # The pause ends after the deadline: the task stopped at once instead of waiting it out.
    assert time.now == 0.0 and result.elapsed_s <= 0.5


# --- deadlines while rate limited


def fake_limiter(program, time: FakeTime, **options) -> RateLimiter:
    """The limiter `limiter_for` makes, on a clock that moves only when it sleeps."""
    limits = {rate_key(model): model.rate_limit for model in program.models.values() if model.rate_limit}
    return RateLimiter(limits, clock=time.clock, sleep=time.sleep, **options)


class RefusedOnce:
    """A provider whose first call is refused with a 429 and a Retry-After of 31 years; later ones answer."""

    name = "remote"

    def __init__(self):
        self.sent = 0

    def count_prompt_tokens(self, messages):
        return None

    async def complete(self, messages, max_tokens, *, timeout, decoding=None, expect="text"):
        from bamasc.runtime.providers.base import Completion

        self.sent += 1
        await asyncio.sleep(0)  # the request is out: the other tasks queue for the key meanwhile
        if self.sent == 1:
            raise error_for_status(429, provider="openai", model="local-model", headers={"retry-after": "999999999"})
        return Completion("42", 5, 1)

    async def aclose(self):
        pass


def test_a_429_with_a_huge_retry_after_ends_every_waiting_task_by_its_deadline(tmp_path):
    # Five tasks with a 12 s deadline on one key: one is refused while the others queue behind the key's
    # first waiter. The key pauses for a minute (the Retry-After's cap), past every deadline.
    plan, program = compiled(
        tmp_path, "fake", "http://unused", "rate_limit { requests_per_minute = 60 }",
        "latency { first_token = 0.01  per_token = 0.001 }", "deadline = 12",
    )
    time = FakeTime()
    limiter = fake_limiter(program, time)
    provider, trace = RefusedOnce(), Collect()
    system = plan.systems[0]
    template = system.template(system.selection["selected"])
    runs = []
    for index in range(5):
        run = TaskRun(program, system, template, {"remote": provider}, BudgetGuard(system.budget), str(index), "x",
                      trace, RETRY, 0, limiter)
        run.clock = DeadlineGuard(system.deadline_s, RETRY.timeout, clock=time.clock)
        runs.append(run)

    async def main():
        return await asyncio.gather(*(run.run() for run in runs))

    results = asyncio.run(main())
    assert [result.exhausted for result in results] == ["deadline"] * 5
    assert all(result.elapsed_s <= result.deadline_s for result in results), [r.elapsed_s for r in results]
    assert provider.sent == 1  # the refused task's retry was not sent either
    assert max(time.sleeps) < 12  # no one slept into the pause
    skipped = [call for call in trace.calls if call["skipped"]]
    assert len(skipped) == 5 and all(call["error"].startswith("deadline") for call in skipped)
    assert all(run.guard.held == 0 for run in runs)


# --- hostile rate-limit headers, through both official SDKs

HOSTILE_VALUES = {
    "one": "1", "zero": "0", "negative": "-5", "huge": "1e30", "overflow": "1e400", "garbage": "lots", "nan": "NaN",
}


def hostile_headers(flavor: str, value: str) -> dict[str, str]:
    """Every limit and what is left of it said to be `value`, each reset 31 years away."""
    if flavor == "openai":
        headers = {f"x-ratelimit-{field}-{dimension}": value
                   for field in ("limit", "remaining") for dimension in ("requests", "tokens")}
        headers.update({f"x-ratelimit-reset-{dimension}": "999999999s" for dimension in ("requests", "tokens")})
        return headers
    headers = {f"anthropic-ratelimit-{dimension}-{field}": value
               for dimension in ("requests", "tokens", "input-tokens", "output-tokens") for field in ("limit", "remaining")}
    headers.update({f"anthropic-ratelimit-{dimension}-reset": "2057-01-01T00:00:00Z" for dimension in ("requests", "tokens")})
    return headers


class Hostile:
    """A 429 with a Retry-After of 31 years first, then replies; every answer carries the hostile headers."""

    def __init__(self, headers: dict[str, str]):
        self.headers = tuple(headers.items())
        self.answered = 0
        self.lock = threading.Lock()

    def __call__(self, body) -> Action:
        with self.lock:
            self.answered += 1
            first = self.answered == 1
        if first:
            return status(429, headers={**dict(self.headers), "retry-after": "999999999"})
        return Action("reply", headers=self.headers)


@pytest.mark.parametrize("declared", ["", "rate_limit { requests_per_minute = 600  tokens_per_minute = 100000 }"],
                         ids=["undeclared", "declared"])
@pytest.mark.parametrize("value", sorted(HOSTILE_VALUES))
@pytest.mark.parametrize("flavor", ["openai", "anthropic"])
def test_hostile_rate_limit_headers_are_warned_about_and_stall_nothing(tmp_path, capsys, flavor, value, declared):
    from bamasc.metering.limiter import CUT, HEADROOM, REPORTED_FLOOR, RateLimitWarning

    server = ScriptedServer(flavor, responder=Hostile(hostile_headers(flavor, HOSTILE_VALUES[value]))).start()
    try:
        plan, program = compiled(tmp_path, flavor, server.base_url, declared)
        time = FakeTime()
        limiter = fake_limiter(program, time)
        with pytest.warns(RateLimitWarning) as caught:
            results, calls = run(plan, program, 4, limiter, concurrency=1)
    finally:
        server.close()
    assert [result.status for result in results] == ["ok"] * 4
    # The Retry-After paused the key for its cap; no other wait comes near it, let alone hours.
    waits = [call["rate_wait_s"] for call in calls]
    assert max(time.sleeps) <= limiter.max_wait_s and max(waits) <= limiter.max_wait_s
    # After it, the key is paced at the floor or above, cut by the 429: two requests' time at most, not a minute.
    floor_pace = 2 * limiter.window_s / (REPORTED_FLOOR["requests"] * (1 - HEADROOM) * CUT)
    assert all(wait <= floor_pace + 1e-6 for wait in sorted(waits)[:-1]), waits
    messages = [str(warning.message) for warning in caught if warning.category is RateLimitWarning]
    assert messages and len(messages) == len(set(messages))  # once per key and header, not once per reply
    assert all(rate_key(program.models["remote"]) in message for message in messages)
    assert "Traceback" not in capsys.readouterr().err
