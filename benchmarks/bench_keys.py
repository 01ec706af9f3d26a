"""What a key's budgets cost per call: a 3-level hierarchy (scope, key window, team window, with the total) against a
single scope, in CPU time, side by side in one run.

    python benchmarks/bench_keys.py [--ops 20000] [--calls 1000] [--repeats 5]

(a) The ledger alone: `reserve` then `close` of one call, in this process
    (LocalLedger), and against a local redis-server (RedisLedger: this
    process's CPU and the server's, from its INFO), `--ops` times each way.
(b) The proxy: chat completions through `bamasc proxy` (its own process,
    with a trace) to the honest upstream of the tests, sent with the shared
    token (one scope level) and with a key in a team (a 1d key window and a
    1mo team window); the proxy process's CPU per call (/proc).
The sides alternate run by run; every figure is the median of --repeats.
Target: the hierarchy within 1.3x of a single scope.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [ROOT, os.path.join(ROOT, "benchmarks")]

from bamasc.metering.afford import Cost  # noqa: E402
from bamasc.metering.ledger import Level, LocalLedger  # noqa: E402

COST = Cost(20.0, 1.6, 1, 256)
LEVELS = (Level("key:bot:1d@2026-12-07T00:00:00Z", 1e12, "key 'bot'"),
          Level("team:cx:1mo@2026-12-01T00:00:00Z", 1e12, "team 'cx'"))


async def _ops(ledger, ops: int, levels) -> float:
    began = time.process_time()
    for number in range(ops):
        hold = await ledger.reserve(f"s{number % 64}", 1e12, "m", COST, levels)
        await ledger.close(hold, hold.amount / 2, {})
    return (time.process_time() - began) / ops * 1e6


def ledger_cpu(ops: int, repeats: int) -> dict[str, list[float]]:
    figures = {"local, one scope": [], "local, hierarchy": []}
    for _ in range(repeats):
        figures["local, one scope"].append(asyncio.run(_ops(LocalLedger(1e15), ops, ())))
        figures["local, hierarchy"].append(asyncio.run(_ops(LocalLedger(1e15), ops, LEVELS)))
    if shutil.which("redis-server"):
        figures.update(_redis(ops, repeats))
    return figures


def _redis(ops: int, repeats: int) -> dict[str, list[float]]:
    import redis

    from bamasc.metering.redis_ledger import RedisLedger
    from tests.proxy.helpers import free_port

    port = free_port()
    server = subprocess.Popen(["redis-server", "--port", str(port), "--save", "", "--appendonly", "no"],
                              stdout=subprocess.DEVNULL)
    client = redis.Redis(port=port)
    for _ in range(500):
        try:
            client.ping()
            break
        except redis.exceptions.ConnectionError:
            time.sleep(0.02)
    figures = {"redis, one scope (client + server)": [], "redis, hierarchy (client + server)": []}
    try:
        for round_number in range(repeats):
            for label, levels in (("redis, one scope (client + server)", ()),
                                  ("redis, hierarchy (client + server)", LEVELS)):
                async def run():
                    ledger = RedisLedger(f"redis://127.0.0.1:{port}/0", 1e15, prefix=f"b{round_number}{len(levels)}",
                                         create=True)
                    await ledger.open()
                    before = _server_cpu(client)
                    mine = await _ops(ledger, ops, levels)
                    await ledger.client.aclose()
                    return mine + (_server_cpu(client) - before) / ops * 1e6

                figures[label].append(asyncio.run(run()))
    finally:
        server.terminate()
        server.wait()
    return figures


def _server_cpu(client) -> float:
    info = client.info("cpu")
    return info["used_cpu_sys"] + info["used_cpu_user"]


def proxy_cpu(calls: int, repeats: int) -> dict[str, list[float]]:
    import httpx
    import openai

    from bench_proxy import cpu_per_call, start
    from tests.proxy.helpers import TOKEN, config_text, free_port

    folder = tempfile.mkdtemp()
    up_port, port = free_port(), free_port()
    upstream, proxy = f"http://127.0.0.1:{up_port}", f"http://127.0.0.1:{port}"
    config = os.path.join(folder, "proxy.bam")
    with open(config, "w", encoding="utf-8") as handle:
        handle.write(config_text(upstream))
    env = {"UPSTREAM_KEY": "k", "PROXY_TOKEN": TOKEN, "ADMIN_TOKEN": "admin-token"}
    servers = [start([sys.executable, "-m", "tests.proxy.upstream", str(up_port), "2000"], f"{upstream}/bill", env)]
    servers.append(start([sys.executable, "-m", "bamasc", "proxy", "--config", config, "--port", str(port),
                          "--token-env", "PROXY_TOKEN", "--admin-token-env", "ADMIN_TOKEN",
                          "--trace", os.path.join(folder, "trace.jsonl")], f"{proxy}/healthz", env))
    try:
        admin = {"authorization": "Bearer admin-token"}
        httpx.post(f"{proxy}/v1/admin/teams", headers=admin, json={"name": "cx", "budgets": [
            {"amount": 1e12, "per": "1mo"}]}).raise_for_status()
        made = httpx.post(f"{proxy}/v1/admin/keys", headers=admin, json={
            "name": "bot", "team": "cx", "budgets": [{"amount": 1e12, "per": "1d"}]})
        made.raise_for_status()
        sides = {"proxy, shared token (one scope)": TOKEN, "proxy, key in a team (hierarchy)": made.json()["key"]}
        clients = {label: openai.OpenAI(base_url=f"{proxy}/v1", api_key=key, max_retries=0,
                                        default_headers={"X-Bamasc-Task": "bench", "X-Bamasc-Budget": "1e9"})
                   for label, key in sides.items()}
        return cpu_per_call({label: (servers[1], client) for label, client in clients.items()}, calls, repeats)
    finally:
        for server in servers:
            server.terminate()
            server.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--ops", type=int, default=20000)
    parser.add_argument("--calls", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    ledgers = ledger_cpu(args.ops, args.repeats)
    proxies = proxy_cpu(args.calls, args.repeats)
    print(f"median of {args.repeats} runs (min..max)")
    print("| path | CPU per call | hierarchy / one scope |")
    print("|---|---:|---:|")
    for figures, unit in ((ledgers, "µs"), (proxies, "ms")):
        labels = list(figures)
        for index, label in enumerate(labels):
            median = statistics.median(figures[label])
            ratio = "" if index % 2 == 0 else f"{median / statistics.median(figures[labels[index - 1]]):.2f}x"
            print(f"| {label} | {median:.2f} {unit} ({min(figures[label]):.2f}..{max(figures[label]):.2f}) | {ratio} |")


if __name__ == "__main__":
    main()
