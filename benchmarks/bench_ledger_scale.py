"""The shared ledger's reservations per second: the one-server ledger against the sharded one, 1 to 4 proxies.

    python benchmarks/bench_ledger_scale.py [--seconds 5] [--proxies 1,2,4] [--concurrency 32] [--replicated]

Each "proxy" is a process running the ledger's `reserve` and `close` in a
loop (`--concurrency` at once, each call in its own scope of 64, every call in
the total), with no HTTP in front: what is measured is the ledger and Redis.
Rows: `RedisLedger` on one redis-server (`redis://`, the ledger before), and
`ShardedLedger` (`redis+cluster://`) on a cluster of one primary holding every
slot and on one of three primaries, both without replicas (`?replicas=0`: no
WAIT); `--replicated` runs instead three primaries with a replica each, with
WAIT (a hold waits for its replica) and without (`?replicas=0`). Per row: reservations (reserve + close)
per second over all processes, CPU per call per process (the processes' CPU
seconds over their calls), Redis CPU per call (the primaries' `used_cpu_user`
+ `used_cpu_sys` over the calls) and Redis commands per call (INFO
commandstats over the primaries, scripts' inner commands included).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from tests.proxy.cluster import RedisCluster  # noqa: E402
from tests.proxy.fleet import RedisServer  # noqa: E402


def drive(url: str, prefix: str, seconds: float, concurrency: int, out: str) -> None:
    """One proxy's loop: reserve and close until `seconds` pass; writes `calls cpu_seconds` to `out`."""
    from bamasc.metering.afford import Cost
    from bamasc.metering.sharded_ledger import shared_ledger

    async def main() -> None:
        ledger = shared_ledger(url, None, prefix)
        await ledger.open()
        cost = Cost(10.0, 0.01, 1, 100)
        done = 0
        stop = time.monotonic() + seconds

        async def worker(number: int) -> None:
            nonlocal done
            while time.monotonic() < stop:
                hold = await ledger.reserve(f"s{(number * 7 + done) % 64}", 1e15, "m", cost)
                await ledger.close(hold, hold.amount / 2, {})
                done += 1

        started = time.process_time()
        await asyncio.gather(*(worker(number) for number in range(concurrency)))
        with open(out, "w", encoding="utf-8") as handle:
            handle.write(f"{done} {time.process_time() - started}")
        if hasattr(ledger, "shutdown"):
            await ledger.shutdown()
        await ledger.client.aclose()

    asyncio.run(main())


def _info(port: int, section: str) -> str:
    return subprocess.run(["redis-cli", "-p", str(port), "info", section], capture_output=True, text=True).stdout


def redis_load(ports: list[int]) -> tuple[float, int]:
    """CPU seconds and commands so far over `ports` (scripts' inner commands counted, EVALSHA not)."""
    cpu, commands = 0.0, 0
    for port in ports:
        for line in _info(port, "cpu").splitlines():
            if line.startswith(("used_cpu_user:", "used_cpu_sys:")):
                cpu += float(line.split(":")[1])
        for line in _info(port, "commandstats").splitlines():
            if line.startswith("cmdstat_") and not line.startswith(("cmdstat_evalsha", "cmdstat_info")):
                commands += int(line.split("calls=")[1].split(",")[0])
    return cpu, commands


def run_row(url: str, ports: list[int], proxies: int, seconds: float, concurrency: int, new: bool) -> dict:
    prefix = f"bench{os.getpid()}x{time.monotonic_ns()}"
    if new:
        from bamasc.metering.sharded_ledger import shared_ledger

        async def start() -> None:
            ledger = shared_ledger(url, 1e15, prefix, create=True)
            await ledger.open()
            if hasattr(ledger, "shutdown"):
                await ledger.shutdown()
            await ledger.client.aclose()

        asyncio.run(start())
    folder = tempfile.mkdtemp()
    outs = [os.path.join(folder, f"{number}.out") for number in range(proxies)]
    before = redis_load(ports)
    processes = [subprocess.Popen([sys.executable, __file__, "--drive", url, prefix, str(seconds), str(concurrency),
                                   out], cwd=ROOT, env={**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")]))}) for out in outs]
    for process in processes:
        process.wait()
    after = redis_load(ports)
    results = [tuple(map(float, open(out, encoding="utf-8").read().split())) for out in outs]
    calls = sum(result[0] for result in results)
    return {"calls/s": calls / seconds, "cpu_ms": 1000 * sum(result[1] for result in results) / calls,
            "redis_us": 1e6 * (after[0] - before[0]) / calls, "commands": (after[1] - before[1]) / calls}


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--drive":
        drive(sys.argv[2], sys.argv[3], float(sys.argv[4]), int(sys.argv[5]), sys.argv[6])
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--proxies", default="1,2,4")
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--replicated", action="store_true", help="3 primaries + 3 replicas, with WAIT and without")
    args = parser.parse_args()
    counts = [int(count) for count in args.proxies.split(",")]
    folder = tempfile.mkdtemp()
    print("| ledger | Redis nodes | proxies | reservations/s | CPU per call per process | Redis CPU per call "
          "| Redis commands per call |")
    print("|---|---|---|---|---|---|---|")
    if args.replicated:
        cluster = RedisCluster(tempfile.mkdtemp(), primaries=3, replicas=1)
        try:
            for query, name in (("?replicas=0", "no WAIT"), ("", "WAIT 1")):
                for count in counts:
                    row = run_row(cluster.url + query, cluster.primaries(), count, args.seconds, args.concurrency, True)
                    _print(f"ShardedLedger (redis+cluster://, {name})", "3 + 3 replicas", count, row)
        finally:
            cluster.close()
        return
    single = RedisServer(folder)
    try:
        for count in counts:
            row = run_row(single.url, [single.port], count, args.seconds, args.concurrency, True)
            _print("RedisLedger (redis://)", 1, count, row)
    finally:
        single.kill()
    for primaries in (1, 3):
        cluster = RedisCluster(tempfile.mkdtemp(), primaries=primaries, replicas=0)
        try:
            for count in counts:
                row = run_row(cluster.url + "?replicas=0", cluster.primaries(), count, args.seconds, args.concurrency, True)
                _print("ShardedLedger (redis+cluster://)", primaries, count, row)
        finally:
            cluster.close()


def _print(name: str, nodes, proxies: int, row: dict) -> None:
    print(f"| {name} | {nodes} | {proxies} | {row['calls/s']:,.0f} | {row['cpu_ms']:.3f} ms | "
          f"{row['redis_us']:.1f} µs | {row['commands']:.1f} |", flush=True)


if __name__ == "__main__":
    main()
