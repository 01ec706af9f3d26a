"""The sharded ledger on a real Redis Cluster (three primaries, three replicas): two proxies, a kill -9 of one holding
a slice of the total, a kill -9 of a primary (its replica takes over), and a key paced by two proxies together.

The test starts `redis-server` processes in cluster mode on loopback and joins them with `redis-cli --cluster
create`; it skips, saying so, where they or the redis client library are absent.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

pytest.importorskip("starlette", reason="the proxy extra (starlette, uvicorn) is not installed")
pytest.importorskip("redis", reason="the redis client library (the proxy extra) is not installed")

from tests.proxy.cluster import CLUSTER_MISSING, RedisCluster  # noqa: E402
from tests.proxy.fleet import Launcher, ScopedUpstream, ask, spend_out  # noqa: E402
from tests.proxy.helpers import TOKEN, config_text  # noqa: E402

if CLUSTER_MISSING:
    pytest.skip(CLUSTER_MISSING, allow_module_level=True)

SLACK = 1e-6  # µ$: the trace rounds each amount to 6 decimals
PACE = 60  # requests a minute of the paced model: a bucket of one request, refilled at 0.95 a second


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    nodes = RedisCluster(tmp_path_factory.mktemp("cluster"), primaries=3, replicas=1)
    yield nodes
    nodes.close()


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
    paced = (f"model paced {{\n  provider = openai\n  name = \"gpt-4.1-mini-paced\"\n  base_url = \"{upstream.url}/v1\"\n"
             f"  api_key = env(\"UPSTREAM_KEY\")\n  tier = 1\n  price {{ input = 0.4  output = 1.6 }}\n"
             f"  rate_limit {{ requests_per_minute = {PACE} }}\n}}\n")
    path.write_text(config_text(upstream.url) + paced, encoding="utf-8")
    return str(path)


def _total_view(proxy) -> dict:
    return httpx.get(f"{proxy.url}/v1/budget", headers={"authorization": f"Bearer {TOKEN}"}, timeout=30).json()


def _slices(cluster, prefix: str) -> dict[str, float]:
    """Each proxy run's slice of the total, as the total's lease hash holds it."""
    from redis.cluster import RedisCluster as Client

    from bamasc.metering.shards import shard_tags

    client = Client(host="127.0.0.1", port=cluster.primaries()[0], decode_responses=True)
    try:
        return {run: float(amount) for run, amount in client.hgetall(f"{shard_tags(prefix)[0]}:total:leases").items()}
    finally:
        client.close()


def test_two_proxies_on_a_cluster_never_pass_the_total_or_a_scope_through_a_killed_proxy_and_a_killed_primary(
        cluster, launcher, upstream, config, tmp_path):
    total = 24000.0
    common = ("--redis", cluster.url, "--redis-prefix", "kills")
    first = launcher.start(config, *common, "--new-ledger", "--total-budget", f"{total:g}",
                           "--trace", str(tmp_path / "a.jsonl"))
    assert first.alive(), first.stderr
    second = launcher.start(config, *common, "--trace", str(tmp_path / "b.jsonl"))
    assert second.alive(), second.stderr
    assert _total_view(second)["total"] == total
    scopes = [f"kills-{number}" for number in range(16)]
    with ThreadPoolExecutor(8) as pool:
        first_round = list(pool.map(lambda job: ask(job[0].url, job[1], 3000.0),
                                    [((first, second)[number % 2], scope) for number, scope in enumerate(scopes)]))
    assert set(first_round) <= {200, 402} and 200 in first_round
    held_by_first = _slices(cluster, "kills")
    assert held_by_first, "no proxy holds a slice of the total"
    first.kill9()  # it dies holding its slice: counted as spent, never spent again
    victim = max(cluster.primaries())
    cluster.kill_primary(victim)  # its replica takes over its shards
    third = launcher.start(config, "--redis", cluster.url, *common[2:], "--trace", str(tmp_path / "c.jsonl"))
    assert third.alive(), third.stderr
    for number, scope in enumerate(scopes):
        statuses = spend_out((second, third)[number % 2].url, scope, 3000.0)
        assert set(statuses) <= {200, 402, 503}, statuses
    billed = upstream.billed_per_scope()
    assert all(billed.get(scope, 0.0) <= 3000.0 + SLACK for scope in scopes), billed
    assert sum(billed.get(scope, 0.0) for scope in scopes) <= total + SLACK
    ledger = _total_view(third)
    slices = _slices(cluster, "kills")
    assert set(held_by_first) & set(slices), "the killed proxy's slice was given back by no one, yet it is gone"
    assert ledger["charged"] + ledger["held"] <= total + SLACK
    assert ledger["held"] >= sum(slices.values()) - SLACK  # every slice, the dead proxy's too, is held
    for proxy in (second, third):
        proxy.kill9()
    cluster.rejoin(victim)  # back as its successor's replica: every primary has one again


def test_two_proxies_of_one_ledger_pace_a_key_together(cluster, launcher, upstream, config, tmp_path):
    common = ("--redis", cluster.url, "--redis-prefix", "pace")
    first = launcher.start(config, *common, "--new-ledger")
    second = launcher.start(config, *common)
    assert first.alive() and second.alive(), first.stderr + second.stderr
    calls = 6
    with ThreadPoolExecutor(calls) as pool:
        statuses = list(pool.map(lambda number: ask((first, second)[number % 2].url, f"pace-{number}", 5000.0,
                                                    model="paced", timeout=60), range(calls)))
    assert statuses == [200] * calls
    with upstream.lock:
        arrived = sorted(call["at"] for call in upstream.calls if call["model"] == "gpt-4.1-mini-paced")
    # One bucket of one request, refilled at 0.95 a second, for both proxies: the sixth call cannot reach the
    # upstream before five refills after the first. Alone, each proxy would send its three in two refills.
    assert len(arrived) == calls
    assert arrived[-1] - arrived[0] >= (calls - 1.5) / (PACE * 0.95 / 60), arrived
    for proxy in (first, second):
        proxy.kill9()


# ---------------------------------------------------------------- holds reach a replica before a call is admitted

def _ledger(url: str, prefix: str, **given):
    from bamasc.metering.sharded_ledger import ShardedLedger

    return ShardedLedger(url, prefix=prefix, **given)


def _cost():
    from bamasc.metering.afford import Cost

    return Cost(input_cost=100.0, output_rate=1.0, choices=1, requested=200, min_tokens=10)


def test_a_reservation_is_on_a_replica_before_its_call_is_admitted(cluster):
    import asyncio

    async def run():
        ledger = _ledger(cluster.url + "?wait_ms=3000", "onreplica", create=True)
        await ledger.open()
        try:
            key = ledger._scope_key("held-1")
            primary = ledger.client.get_node_from_key(key).port
            replica = cluster.replica_of(primary)
            cluster.stop(replica)  # it takes nothing from its primary until resumed
            try:
                reserving = asyncio.ensure_future(ledger.reserve("held-1", 5000.0, "m", _cost()))
                while not cluster.read(primary, key).get("held"):
                    await asyncio.sleep(0.01)  # the hold is on the primary, not yet on its replica
                await asyncio.sleep(0.05)
                assert not reserving.done(), "the call was admitted while its hold was on the primary alone"
            finally:
                cluster.resume(replica)
            hold = await reserving
            on_replica = cluster.read(replica, key)  # read the moment it is admitted
            assert float(on_replica["held"]) == pytest.approx(hold.amount) and hold.amount > 0
        finally:
            await ledger.shutdown()
            await ledger.client.aclose()

    asyncio.run(run())


def test_calls_are_refused_not_admitted_while_no_replica_takes_their_holds(cluster):
    import asyncio

    from bamasc.metering.refusals import LedgerLost

    async def run():
        ledger = _ledger(cluster.url + "?wait_ms=100", "unreplicated", total=100000.0, create=True)
        await ledger.open()
        replicas = [cluster.replica_of(port) for port in cluster.primaries()]
        try:
            for replica in replicas:
                cluster.stop(replica)
            try:
                for number in range(3):  # the first grows the total's slice, the others find it in doubt
                    with pytest.raises(LedgerLost) as refused:
                        await ledger.reserve(f"cut-{number}", 5000.0, "m", _cost())
                    assert "no replica" in refused.value.error
            finally:
                for replica in replicas:
                    cluster.resume(replica)
            for number in range(3):  # nothing the refused calls held stays held in their scopes
                view = await ledger.view(f"cut-{number}")
                assert view is None or view["held"] == 0.0, view
            hold = await ledger.reserve("cut-0", 5000.0, "m", _cost())  # replicas back: admitted again
            assert hold.amount > 0
            assert not ledger.slices["total"].doubt
        finally:
            await ledger.shutdown()
            await ledger.client.aclose()

    asyncio.run(run())


def test_a_cluster_without_replicas_needs_replicas_0(tmp_path):
    import asyncio

    from bamasc.metering.redis_ledger import LedgerMismatch

    lone = RedisCluster(tmp_path / "lone", primaries=1, replicas=0)

    async def run():
        refused = _ledger(lone.url.split(",")[0], "lone", create=True)
        with pytest.raises(LedgerMismatch, match=r"\?replicas=0"):
            await refused.open()
        await refused.client.aclose()
        ledger = _ledger(lone.url.split(",")[0] + "?replicas=0", "lone", create=True)
        await ledger.open()
        try:
            assert (await ledger.reserve("alone", 5000.0, "m", _cost())).amount > 0
        finally:
            await ledger.shutdown()
            await ledger.client.aclose()

    try:
        asyncio.run(run())
    finally:
        lone.close()


@pytest.mark.parametrize("query", ["?replicas=x", "?wait_ms=0", "?wait_ms=9000", "?replica=1"])
def test_a_bad_cluster_url_option_is_named(query):
    from bamasc.metering.replicas import replication

    with pytest.raises(ValueError, match=query[1:].split("=")[0]):
        replication("redis+cluster://127.0.0.1:7000" + query)
