"""A shared ledger never forgets: proxies restarted (`kill -9` at several points), a Redis that loses the ledger
(FLUSHALL, or restarted without persistence), a budget tightened by a refused request, and proxies started
with another total. Each case is a family of seeded schedules, checked against what the upstream itself billed:
per scope no more than its budget (the tightest one asked for), in all no more than the total.

A real `redis-server` is started for these tests (Debian's package `redis-server`);
they skip, saying so, where it or the redis client library is absent.
"""

from __future__ import annotations

import json
import random
import time
from concurrent.futures import ThreadPoolExecutor, as_completed

import httpx
import pytest

pytest.importorskip("starlette", reason="the proxy extra (starlette, uvicorn) is not installed")
pytest.importorskip("redis", reason="the redis client library (the proxy extra) is not installed")

from tests.proxy.fleet import REDIS_MISSING, Launcher, RedisServer, ScopedUpstream, ask, spend_out  # noqa: E402
from tests.proxy.helpers import TOKEN, config_text  # noqa: E402

if REDIS_MISSING:
    pytest.skip(REDIS_MISSING, allow_module_level=True)

SLACK = 1e-6  # µ$: the trace rounds each amount to 6 decimals


@pytest.fixture(scope="module")
def upstream():
    server = ScopedUpstream(output=2000).start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def launcher(tmp_path_factory):
    forks = Launcher(tmp_path_factory.mktemp("proxies"))
    yield forks
    forks.close()


@pytest.fixture(scope="module")
def config(upstream, tmp_path_factory):
    path = tmp_path_factory.mktemp("config") / "proxy.bam"
    path.write_text(config_text(upstream.url), encoding="utf-8")
    return str(path)


@pytest.fixture
def redis_server(tmp_path):
    server = RedisServer(tmp_path)
    yield server
    server.kill()


def _scope_view(proxy, scope: str) -> dict:
    response = httpx.get(f"{proxy.url}/v1/scopes/{scope}", headers={"authorization": f"Bearer {TOKEN}"}, timeout=30)
    return response.json()


def _total_view(proxy) -> dict:
    return httpx.get(f"{proxy.url}/v1/budget", headers={"authorization": f"Bearer {TOKEN}"}, timeout=30).json()


def _billed(upstream, scopes) -> dict[str, float]:
    billed = upstream.billed_per_scope()
    return {scope: billed.get(scope, 0.0) for scope in scopes}


def _load_then_kill(rng: random.Random, proxies, jobs, victim) -> list[int]:
    """`jobs` (proxy index, scope, budget) at once; `victim` is killed -9 once a random number of them answered."""
    answered = rng.randrange(len(jobs))
    statuses = []
    with ThreadPoolExecutor(len(jobs)) as pool:
        futures = [pool.submit(ask, proxies[index].url, scope, budget) for index, scope, budget in jobs]
        if answered == 0:
            victim.kill9()
        for future in as_completed(futures):
            statuses.append(future.result())
            if len(statuses) == answered:
                victim.kill9()
    return statuses


# ------------------------------------------------------------------------------------------ 1. a lost ledger

@pytest.mark.parametrize("seed", range(4))
def test_a_lost_redis_ledger_is_never_forgotten_by_a_restarted_proxy(seed, launcher, upstream, config, redis_server,
                                                                     tmp_path):
    rng = random.Random(seed)
    scopes = {f"lost{seed}-{number}": float(rng.randrange(2000, 7000, 100)) for number in range(rng.randint(2, 3))}
    total = rng.choice([None, 0.8 * sum(scopes.values())])
    totals = () if total is None else ("--total-budget", f"{total:g}")
    traces = [str(tmp_path / f"{name}.jsonl") for name in ("a", "b")[:rng.randint(1, 2)]]

    def start(index: int, *extra: str):
        return launcher.start(config, "--redis", redis_server.url, "--trace", traces[index], *extra)

    proxies = [start(0, "--new-ledger", *totals)] + [start(index) for index in range(1, len(traces))]
    # Before the loss: some scopes spent out, others part-way; a proxy killed -9 with calls in flight, then back.
    for scope, budget in scopes.items():
        for _ in range(rng.randint(1, 3)):
            assert ask(rng.choice(proxies).url, scope, budget, rng.choice([None, 300, 1500])) in (200, 402)
    victim = rng.randrange(len(proxies))
    jobs = [(rng.randrange(len(proxies)), scope, budget) for scope, budget in scopes.items() for _ in range(2)]
    assert set(_load_then_kill(rng, proxies, jobs, proxies[victim])) <= {200, 402, 0}
    proxies[victim] = start(victim)
    assert proxies[victim].alive(), proxies[victim].stderr

    if rng.random() < 0.5:
        redis_server.flushall()
    else:
        redis_server.restart_empty()
    scope, budget = next(iter(scopes.items()))
    assert all(ask(proxy.url, scope, budget) == 503 for proxy in proxies)  # the running proxies spend nothing
    for proxy in proxies:
        proxy.kill9()

    # A restart finds no ledger: it refuses to start, saying what to do, and starts none.
    refused = start(0)
    assert not refused.alive() and refused.code == 1, refused.stderr
    assert "no ledger" in refused.stderr and "--new-ledger" in refused.stderr
    assert redis_server.client().get("bamasc:epoch") is None

    # The operator starts a new ledger on one proxy, folding in every proxy's trace, then the others join;
    # the first may be killed -9 while it opens, and is then started again.
    first = rng.randrange(len(traces))
    others = [arg for index, path in enumerate(traces) if index != first for arg in ("--fold-trace", path)]
    proxies = [None] * len(traces)
    creator = launcher.start(config, "--redis", redis_server.url, "--trace", traces[first], "--new-ledger", *totals,
                             *others, wait=rng.random() < 0.5)
    if rng.random() < 0.5:
        time.sleep(rng.uniform(0, 0.4))  # somewhere in its start: before, while or after it folds the traces
        creator.kill9()
        ledger_exists = redis_server.client().get("bamasc:epoch") is not None
        creator = start(first, *(() if ledger_exists else ("--new-ledger", *totals, *others)))
    proxies[first] = Launcher.wait_ready(creator)
    for index in range(len(traces)):
        if index != first:
            proxies[index] = start(index)
    assert all(proxy.alive() for proxy in proxies), [proxy.stderr for proxy in proxies]

    # After it: every scope spent out, through any proxy.
    for scope, budget in scopes.items():
        assert spend_out(rng.choice(proxies).url, scope, budget)[-1] == 402
        view = _scope_view(proxies[0], scope)
        assert view["charged"] + view["held"] >= upstream.billed_per_scope().get(scope, 0.0) - SLACK, view
    billed = _billed(upstream, scopes)
    for proxy in proxies:
        proxy.kill9()
    assert all(billed[scope] <= budget + SLACK for scope, budget in scopes.items()), (billed, scopes)
    if total is not None:
        assert sum(billed.values()) <= total + SLACK, (billed, total)


def test_a_new_ledger_is_an_operators_act_and_a_damaged_trace_starts_nothing(launcher, config, redis_server, tmp_path):
    trace = tmp_path / "a.jsonl"
    joined = launcher.start(config, "--redis", redis_server.url, "--trace", str(trace))
    assert joined.code == 1 and "no ledger" in joined.stderr and "--new-ledger" in joined.stderr
    first = launcher.start(config, "--redis", redis_server.url, "--trace", str(trace), "--new-ledger")
    assert first.alive(), first.stderr
    assert ask(first.url, "operator", 5000) == 200
    first.kill9()
    again = launcher.start(config, "--redis", redis_server.url, "--new-ledger")
    assert again.code == 1 and "exists already" in again.stderr and "drop --new-ledger" in again.stderr
    for flag in ("--new-ledger", "--fold-trace"):
        local = launcher.start(config, flag, *((str(trace),) if flag == "--fold-trace" else ()))
        assert local.code == 2 and "need --redis" in local.stderr

    # A trace damaged before its last line: nothing is started, joined or folded into.
    damaged = tmp_path / "damaged.jsonl"
    damaged.write_text(trace.read_text(encoding="utf-8") + "{not json\n" + trace.read_text(encoding="utf-8"),
                       encoding="utf-8")
    redis_server.flushall()
    for extra in (("--trace", str(damaged)), ("--trace", str(trace), "--fold-trace", str(damaged))):
        refused = launcher.start(config, "--redis", redis_server.url, "--new-ledger", *extra)
        assert refused.code == 1 and "damaged.jsonl:" in refused.stderr, refused.stderr
        assert redis_server.client().keys("*") == []


def test_a_trace_is_folded_into_a_ledger_once_whoever_folds_it(redis_server, tmp_path):
    import asyncio

    from bamasc.metering.redis_ledger import RedisLedger
    from bamasc.runtime.trace import TraceWriter

    path = tmp_path / "trace.jsonl"
    records = [{"type": "budget", "run": "r", "task_id": "s", "budget": 400.0, "epoch": "lost"},
               {"type": "reserve", "id": "r.1", "task_id": "s", "reserved": 120.0, "budget": 400.0, "epoch": "lost"},
               {"type": "call", "id": "r.1", "task_id": "s", "reserved": 120.0, "charged": 100.0, "epoch": "lost"},
               {"type": "reserve", "id": "r.2", "task_id": "s", "reserved": 50.0, "budget": 400.0, "epoch": "lost"}]
    path.write_text("".join(json.dumps(record) + "\n" for record in records), encoding="utf-8")

    async def opened(**options) -> tuple[int, dict, dict]:
        ledger = RedisLedger(redis_server.url, **options)
        await ledger.open()
        seen = ledger.folded, await ledger.view("s"), await ledger.totals()
        if ledger.trace is not None:
            ledger.trace.close()
        await ledger.client.aclose()
        return seen

    for _ in range(2):  # a ledger started anew, as after a loss, counts the trace once more
        folded, scope, total = asyncio.run(opened(total=1000.0, trace=TraceWriter(str(path)), create=True))
        assert folded == 1 and (scope["charged"], scope["budget"]) == (150.0, 400.0) and total["charged"] == 150.0
        for options in ({"trace": TraceWriter(str(path))}, {"fold": (str(path),)}, {"total": 1000.0}):
            folded, scope, total = asyncio.run(opened(**options))
            assert folded == 0 and scope["charged"] == 150.0 and total == {**total, "total": 1000.0, "charged": 150.0}
        redis_server.flushall()


# ------------------------------------------------------------------------------------------ 2. a tightened budget

@pytest.mark.parametrize("seed", range(2))
@pytest.mark.parametrize("ledger", ["local", "redis", "redis-lost"])
def test_a_tightened_budget_survives_a_restart_even_when_its_request_was_refused(ledger, seed, launcher, upstream,
                                                                                 config, redis_server, tmp_path):
    rng = random.Random(f"{ledger}{seed}")
    trace = str(tmp_path / "trace.jsonl")
    shared = ("--redis", redis_server.url) if ledger != "local" else ()

    def start(new: bool = False):
        proxy = launcher.start(config, "--trace", trace, *shared, *(("--new-ledger",) if new and shared else ()))
        assert proxy.alive(), proxy.stderr
        return proxy

    scope = f"tight-{ledger}{seed}"
    loose = float(rng.randrange(6000, 9000, 100))
    # (budget, output cap, restart after it): spend part of a loose budget, tighten it below what was spent
    # (refused: 402), restart, ask with the loose budget again; around that, more budgets, looser and tighter,
    # each maybe followed by a restart.
    steps = [(loose, None, False)] * rng.randint(1, 2)
    steps += [(float(rng.randrange(100, 1500, 50)), None, True), (loose, None, False)]
    steps += [(rng.choice([loose, loose * 2, float(rng.randrange(500, 9000, 100))]), rng.choice([None, 400]),
               rng.random() < 0.3) for _ in range(rng.randint(2, 4))]
    proxy = start(new=True)
    tightest = float("inf")
    for budget, cap, restart in [*steps, (loose, None, False)]:
        tightest = min(tightest, budget)
        status = ask(proxy.url, scope, budget, cap)
        assert status in (200, 402), status
        billed = _billed(upstream, [scope])[scope]
        # A call forwarded now fits the tightest budget asked so far, refused requests' included.
        assert status != 200 or billed <= tightest + SLACK, (steps, budget, billed, tightest)
        if restart:
            proxy.kill9()
            if ledger == "redis-lost":
                redis_server.restart_empty() if rng.random() < 0.5 else redis_server.flushall()
            proxy = start(new=ledger == "redis-lost")
    proxy.kill9()
    lines = [json.loads(line) for line in open(trace, encoding="utf-8")]
    assert min(line["budget"] for line in lines if line["type"] == "budget" and line["task_id"] == scope) == tightest


# ------------------------------------------------------------------------------------------ 3. one total

@pytest.mark.parametrize("seed", range(3))
def test_every_proxy_on_one_redis_holds_the_ledgers_total(seed, launcher, upstream, config, redis_server, tmp_path):
    rng = random.Random(seed)
    total = float(rng.randrange(8000, 16000, 100))
    first = launcher.start(config, "--redis", redis_server.url, "--new-ledger", "--total-budget", f"{total:g}",
                           "--trace", str(tmp_path / "first.jsonl"))
    assert first.alive(), first.stderr
    proxies = [first]
    for number, given in enumerate(rng.sample([None, total, total * 3, total / 2, None], 4)):
        extra = () if given is None else ("--total-budget", f"{given:g}")
        proxy = launcher.start(config, "--redis", redis_server.url, "--trace", str(tmp_path / f"{number}.jsonl"),
                               *extra)
        if given in (None, total):
            assert proxy.alive(), proxy.stderr
            assert _total_view(proxy)["total"] == total
            proxies.append(proxy)
        else:  # another total: refused at start, naming both
            assert proxy.code == 1 and f"{total:.15g} µ$" in proxy.stderr and f"{given:.15g} µ$" in proxy.stderr, \
                proxy.stderr
    scopes = [f"total{seed}-{number}" for number in range(12)]
    jobs = [(rng.randrange(len(proxies)), scope, 5000.0) for scope in scopes for _ in range(2)]
    victim = rng.randrange(len(proxies))
    assert set(_load_then_kill(rng, proxies, jobs, proxies[victim])) <= {200, 402, 0}
    proxies[victim] = launcher.start(config, "--redis", redis_server.url, "--trace",
                                     str(tmp_path / f"again{victim}.jsonl"))
    for scope in scopes:
        assert spend_out(rng.choice(proxies).url, scope, 5000.0)[-1] == 402
    billed = sum(_billed(upstream, scopes).values())
    ledger = _total_view(proxies[0])
    for proxy in proxies:
        proxy.kill9()
    assert billed <= total + SLACK, (billed, total)
    assert ledger["total"] == total and ledger["charged"] + ledger["held"] >= billed - SLACK, (ledger, billed)
