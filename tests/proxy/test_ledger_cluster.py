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
    third = launcher.start(config, *common, "--trace", str(tmp_path / "c.jsonl"))
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
