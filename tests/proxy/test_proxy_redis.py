"""Two `bamasc proxy` processes on one Redis ledger: a kill -9 of one under load, and a Redis that restarts.

A real `redis-server` is started for these tests (Debian's package `redis-server`);
they skip, saying so, where it or the redis client library is absent.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import time

import pytest

pytest.importorskip("starlette", reason="the proxy extra (starlette, uvicorn) is not installed")
pytest.importorskip("redis", reason="the redis client library (the proxy extra) is not installed")

import openai  # noqa: E402

from tests.proxy.fleet import REDIS_MISSING, RedisServer  # noqa: E402
from tests.proxy.helpers import PRICES, TOKEN, charged_per_scope, config_text, free_port, process_proxy, traceback_free  # noqa: E402
from tests.proxy.upstream import Upstream  # noqa: E402

if REDIS_MISSING:
    pytest.skip(REDIS_MISSING, allow_module_level=True)

TOTAL = 6000.0
SCOPE_BUDGET = 556.0


@pytest.fixture
def redis_server(tmp_path):
    server = RedisServer(tmp_path)
    yield server
    server.kill()


@pytest.fixture(scope="module")
def upstream():
    server = Upstream(output=2000).start()
    yield server
    server.stop()


@pytest.fixture
def config(upstream, tmp_path):
    path = tmp_path / "proxy.bam"
    path.write_text(config_text(upstream.url), encoding="utf-8")
    return str(path)


async def _load(urls: list[str], scopes: int, calls: int) -> list[str]:
    """`calls` chat calls for each of `scopes` scopes, spread over the proxies; the outcomes seen."""

    async def one(url: str, scope: int, call: int) -> str:
        client = openai.AsyncOpenAI(base_url=f"{url}/v1", api_key=TOKEN, max_retries=0, timeout=30,
                                    default_headers={"X-Bamasc-Task": f"s{scope}", "X-Bamasc-Budget": f"{SCOPE_BUDGET:g}"})
        try:
            await client.chat.completions.create(model="gpt-4.1-mini", messages=[{"role": "user", "content": f"{call}"}])
            return "ok"
        except openai.APIStatusError as problem:
            return str(problem.status_code)
        except openai.APIConnectionError:
            return "gone"  # the proxy it went to was killed
        finally:
            await client.close()

    jobs = [one(urls[(scope + call) % len(urls)], scope, call) for scope in range(scopes) for call in range(calls)]
    return await asyncio.gather(*jobs)


def test_a_proxy_killed_under_load_leaves_the_shared_total_unbroken(config, upstream, redis_server, tmp_path):
    env = {"UPSTREAM_KEY": "upstream-key"}
    common = ["--redis", redis_server.url, "--total-budget", f"{TOTAL:g}"]
    first, first_url = process_proxy(config, *common, "--new-ledger", "--trace", str(tmp_path / "a.jsonl"), env=env)
    second, second_url = process_proxy(config, *common, "--trace", str(tmp_path / "b.jsonl"), env=env)
    before = upstream.billed(_prices())

    async def load_and_kill():
        load = asyncio.ensure_future(_load([first_url, second_url], scopes=30, calls=3))
        await asyncio.sleep(0.3)
        first.send_signal(signal.SIGKILL)
        return await load

    try:
        outcomes = asyncio.run(load_and_kill())
        assert "ok" in outcomes and "402" in outcomes  # some calls were served, and the total ended others
        # The survivor keeps serving, and the total still holds for it.
        more = asyncio.run(_load([second_url], scopes=5, calls=2))
        assert set(more) <= {"ok", "402"}
    finally:
        for process in (first, second):
            if process.poll() is None:
                process.terminate()
        _, errors = second.communicate(timeout=30)
        first.communicate(timeout=30)
    billed = upstream.billed(_prices()) - before
    assert 0 < billed <= TOTAL
    per_scope = charged_per_scope([str(tmp_path / "a.jsonl"), str(tmp_path / "b.jsonl")])
    assert all(value <= SCOPE_BUDGET + 1e-6 for value in per_scope.values())
    assert traceback_free(errors)


def test_a_redis_that_restarts_empty_makes_every_proxy_refuse_rather_than_spend_unledgered(config, upstream,
                                                                                           redis_server):
    proxy, url = process_proxy(config, "--redis", redis_server.url, "--new-ledger", env={"UPSTREAM_KEY": "upstream-key"})
    client = openai.OpenAI(base_url=f"{url}/v1", api_key=TOKEN, max_retries=0, timeout=30,
                           default_headers={"X-Bamasc-Task": "r", "X-Bamasc-Budget": "5000"})
    try:
        client.chat.completions.create(model="gpt-4.1-mini", messages=[{"role": "user", "content": "one"}],
                                       max_tokens=20)
        redis_server.kill()
        calls = len(upstream.calls)
        with pytest.raises(openai.APIStatusError) as down:
            client.chat.completions.create(model="gpt-4.1-mini", messages=[{"role": "user", "content": "two"}])
        assert down.value.status_code == 503 and "cannot be reached" in down.value.message
        redis_server.start()  # back, with nothing in it
        with pytest.raises(openai.APIStatusError) as lost:
            client.chat.completions.create(model="gpt-4.1-mini", messages=[{"role": "user", "content": "three"}])
        assert lost.value.status_code == 503 and "was lost" in lost.value.message
        assert len(upstream.calls) == calls  # nothing was forwarded unledgered
    finally:
        proxy.terminate()
        _, errors = proxy.communicate(timeout=30)
    assert traceback_free(errors)


def _prices() -> dict:
    return {model + suffix: rates for model, rates in PRICES.items()
            for suffix in ("", "-overbill", "-drop", "-busy", "-broken", "-hang")}


def test_the_lua_arithmetic_is_the_local_one(redis_server):
    """The Redis script and `afford` decide the same, the total's budget read from the ledger: checked on a grid of
    amounts through a real server."""
    from bamasc.metering.afford import Cost
    from bamasc.metering.ledger import LocalLedger
    from bamasc.metering.redis_ledger import RedisLedger
    from bamasc.metering.refusals import Refused

    async def both(budget, cost, total=None):
        prefix = f"t{budget}-{cost.input_cost}-{cost.requested}-{total}"
        local = LocalLedger(total)
        shared = RedisLedger(redis_server.url, total, prefix=prefix, create=True)
        await shared.open()
        results = []
        for ledger in (local, shared):
            try:
                hold = await ledger.reserve("s", budget, "m", cost)
                results.append((hold.tokens, round(hold.amount, 6)))
            except Refused as refused:
                results.append(refused.limit)
        await shared.client.aclose()
        return results

    for budget in (1.0, 50.0, 556.0, 10_000.0):
        for input_cost in (0.0, 0.5, 40.0, 600.0):
            for requested in (1, 16, 300, 5000):
                for total in (None, 45.0, 700.0):
                    local, shared = asyncio.run(both(budget, Cost(input_cost, 1.6, 2, requested), total))
                    assert local == shared, (budget, input_cost, requested, total)
    # Free output and a client's huge cap: Lua would write 1e+15 (a number Python cannot read back as tokens).
    for requested in (10**15, 2**52 + 1):
        local, shared = asyncio.run(both(1e12, Cost(5.0, 0.0, 1, requested)))
        assert local == shared == (requested, 5.0)


def test_an_unreachable_ledger_is_a_clean_failure_at_start_and_a_503_while_serving(config, upstream, tmp_path):
    import sys

    import httpx

    from tests.conftest import ROOT

    closed = free_port()  # nothing listens there
    command = [sys.executable, "-m", "bamasc", "proxy", "--config", config, "--port", str(free_port()),
               "--token-env", "PROXY_TOKEN", "--redis", f"redis://127.0.0.1:{closed}/0"]
    started = subprocess.run(command, capture_output=True, text=True, timeout=120,
                             env={**os.environ, "PROXY_TOKEN": TOKEN, "UPSTREAM_KEY": "k", "PYTHONPATH": ROOT})
    assert started.returncode == 1 and "cannot be reached" in started.stderr
    assert traceback_free(started.stderr), started.stderr[-3000:]

    server = RedisServer(tmp_path)
    proxy, url = process_proxy(config, "--redis", server.url, "--new-ledger", env={"UPSTREAM_KEY": "upstream-key"})
    try:
        server.kill()
        headers = {"authorization": f"Bearer {TOKEN}"}
        for path in ("/v1/scopes/anything", "/v1/budget"):
            response = httpx.get(f"{url}{path}", headers=headers, timeout=30)
            assert response.status_code == 503 and "cannot be reached" in response.json()["error"]["message"]
        assert httpx.get(f"{url}/healthz", timeout=30).status_code == 200
    finally:
        server.kill()
        proxy.terminate()
        _, errors = proxy.communicate(timeout=30)
    assert traceback_free(errors), errors[-3000:]


def test_a_client_that_hangs_up_mid_stream_leaves_no_hold_in_the_shared_ledger(config, upstream, redis_server):
    import httpx

    proxy, url = process_proxy(config, "--redis", redis_server.url, "--new-ledger", env={"UPSTREAM_KEY": "upstream-key"})
    headers = {"authorization": f"Bearer {TOKEN}", "x-bamasc-task": "hung-up", "x-bamasc-budget": "5000"}
    body = {"model": "gpt-4.1-mini", "messages": [{"role": "user", "content": "long"}], "stream": True, "max_tokens": 300}
    try:
        with httpx.stream("POST", f"{url}/v1/chat/completions", json=body, headers=headers, timeout=30) as response:
            next(response.iter_raw(64))  # one piece, then hang up
        for _ in range(1500):  # the stream's end is handled after the client has gone
            view = httpx.get(f"{url}/v1/scopes/hung-up", headers=headers, timeout=30).json()
            if view["held"] == 0:
                break
            time.sleep(0.04)
        assert view["held"] == 0 and 0 < view["charged"] <= 5000, view
    finally:
        proxy.terminate()
        _, errors = proxy.communicate(timeout=30)
    assert traceback_free(errors), errors[-3000:]
