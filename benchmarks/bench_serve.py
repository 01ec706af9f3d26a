"""`bamasc serve` throughput and overhead: tasks over HTTP (httpx) against the same tasks through the API in-process.

    python benchmarks/bench_serve.py [--requests 2000] [--concurrency 64] [--latency 0.05] [--rss 1000,20000]

A plan with one call per task (a fake model whose every reply takes
--latency seconds) is served by `bamasc serve --fake echo --fake-latency`
in a process of its own, with a trace (the ledger) and a total budget.
(a) Load: --requests tasks at --concurrency through httpx (sync clients, one
    kept-alive connection per thread, in --clients processes):
    requests/s, p50 and p99 latency as the client sees it.
(b) The same tasks in-process: `plan.run` (what a script calls: a run of
    `run_batch` per task, providers made for it; no trace, which one run
    holds locked) and
    `session.run` (what the server calls per request, trace and total
    included) at the same concurrency, so the server's overhead per request
    is the difference of the p50s. At concurrency 1 the same comparison measures overhead with no
    queueing on the CPU.
(c) Memory: the server's peak RSS (VmHWM) after 1,000 and after 20,000
    requests (sent by the minimal client, which is faster), a fresh server each.
The client and the server share the machine's cores: at concurrency 64 both
are CPU-bound on a small machine, which the figures show as queueing.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

SOURCE = """\
model quick {
  provider = fake
  name     = "quick"
  price    { input = 1.0  output = 4.0 }
  tier     = 1
}

role Answerer {
  max_output = 32
  prompt     = "Answer: {{task}}"
}

topology single {
  slot answerer : Answerer [1..1]
  flow {
    answer chain answerer(task)
  }
}

system bench {
  models     = [quick]
  topologies = [single]
  budget     = 1000
}
"""
TOTAL = "1e9"  # µ$: a total that every run stays under, so each task reserves from it as in production


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(share * len(ordered)) - 1))]


def plan_file(folder: str) -> str:
    import bamasc

    source = os.path.join(folder, "bench.bam")
    with open(source, "w", encoding="utf-8") as handle:
        handle.write(SOURCE)
    path = os.path.join(folder, "plan.json")
    bamasc.load(source).compile().save(path)
    return path


class Served:
    """`bamasc serve` in its own process."""

    def __init__(self, plan: str, folder: str, latency: float, concurrency: int, *options: str) -> None:
        trace = os.path.join(folder, f"serve-{time.monotonic_ns()}.jsonl")
        command = [sys.executable, "-m", "bamasc", "serve", plan, "--port", "0", "--no-auth", "--fake", "echo",
                   "--fake-latency", str(latency), "--concurrency", str(concurrency), "--max-pending", "100000",
                   "--total-budget", TOTAL, "--trace", trace, *options]
        env = {**os.environ, "PYTHONPATH": ROOT}
        self.process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        self.url = None
        ready = threading.Event()

        def read() -> None:
            for line in self.process.stderr:
                if "serving system" in line:
                    self.url = line.rsplit(" on ", 1)[1].strip()
                    ready.set()
            ready.set()

        threading.Thread(target=read, daemon=True).start()
        ready.wait(300)
        if self.url is None:
            raise SystemExit("bamasc serve did not start")

    def peak_rss_mib(self) -> float:
        with open(f"/proc/{self.process.pid}/status", encoding="ascii") as handle:
            for line in handle:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
        return float("nan")

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=120)


def _client_share(url: str, count: int, threads: int, first: int) -> tuple[float, float, list[float], float]:
    """One client process: `threads` threads, each with its own httpx.Client (one kept-alive connection),
    sending `count` tasks. Returns (start, end, latencies, CPU seconds)."""
    import httpx

    latencies: list[float] = []
    numbers = iter(range(first, first + count))
    lock = threading.Lock()

    def worker() -> None:
        with httpx.Client(base_url=url, timeout=600) as client:
            while True:
                with lock:
                    n = next(numbers, None)
                if n is None:
                    return
                began = time.perf_counter()
                response = client.post("/v1/tasks", json={"task": f"What is {n} + 1?"})
                latencies.append(time.perf_counter() - began)
                if response.status_code != 200:
                    raise SystemExit(f"request {n}: {response.status_code} {response.text}")

    cpu = time.process_time()
    start = time.time()
    pool = [threading.Thread(target=worker) for _ in range(threads)]
    for thread in pool:
        thread.start()
    for thread in pool:
        thread.join()
    return start, time.time(), latencies, time.process_time() - cpu


def over_http(url: str, count: int, concurrency: int, processes: int) -> tuple[float, list[float], float]:
    """`count` tasks at `concurrency` through httpx from `processes` client processes (one Python process cannot
    keep 64 requests in flight through httpx on a small machine); (seconds, latencies, client CPU s per request)."""
    from concurrent.futures import ProcessPoolExecutor

    processes = max(1, min(processes, concurrency))
    shares = [count // processes + (i < count % processes) for i in range(processes)]
    threads = [concurrency // processes + (i < concurrency % processes) for i in range(processes)]
    firsts = [sum(shares[:i]) for i in range(processes)]
    with ProcessPoolExecutor(processes) as pool:
        done = list(pool.map(_client_share, [url] * processes, shares, threads, firsts))
    latencies = [latency for _, _, found, _ in done for latency in found]
    elapsed = max(end for _, end, _, _ in done) - min(start for start, _, _, _ in done)
    return elapsed, latencies, sum(cpu for *_, cpu in done) / count


async def over_raw(url: str, count: int, concurrency: int, same: bool = False) -> tuple[float, list[float]]:
    """The same requests from a minimal HTTP/1.1 client on asyncio streams (one kept-alive connection per worker):
    what the server sustains when the client costs next to nothing. `same`: every task the same text."""
    from urllib.parse import urlsplit

    host, port = urlsplit(url).hostname, urlsplit(url).port
    latencies: list[float] = []
    numbers = iter(range(count))

    async def worker() -> None:
        reader, writer = await asyncio.open_connection(host, port)
        for n in numbers:
            body = b'{"task": "What is %d + 1?"}' % (0 if same else n)
            began = time.perf_counter()
            writer.write(b"POST /v1/tasks HTTP/1.1\r\nHost: bench\r\nContent-Type: application/json\r\n"
                         b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
            head = await reader.readuntil(b"\r\n\r\n")
            length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length"))
            await reader.readexactly(length)
            latencies.append(time.perf_counter() - began)
            if not head.startswith(b"HTTP/1.1 200"):
                raise SystemExit(f"request {n}: {head[:40]!r}")
        writer.close()

    began = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return time.perf_counter() - began, latencies


async def in_process(plan, count: int, concurrency: int, latency: float, folder: str, how: str) -> tuple[float, list[float]]:
    import bamasc

    fake = bamasc.providers.fake("echo", latency_s=latency)
    latencies: list[float] = []
    tasks = iter(range(count))
    trace = os.path.join(folder, f"{how}-{time.monotonic_ns()}.jsonl")

    async def drive(run) -> float:
        async def worker() -> None:
            for n in tasks:
                begun = time.perf_counter()
                result = await run(f"What is {n} + 1?", n)
                latencies.append(time.perf_counter() - begun)
                assert result.status == "ok", result

        began = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        return time.perf_counter() - began

    if how == "session":
        async with plan.session(trace=trace, total_budget=float(TOTAL), concurrency=concurrency, provider=fake) as session:
            elapsed = await drive(lambda text, n: session.run(text))
    else:
        # plan.run locks its trace for its one task, so concurrent runs cannot share one: they run without.
        elapsed = await drive(lambda text, n: plan.run(text, provider=fake, task_id=str(n)))
    return elapsed, latencies


def row(name: str, count: int, elapsed: float, latencies: list[float]) -> str:
    p50, p99 = percentile(latencies, 0.5) * 1000, percentile(latencies, 0.99) * 1000
    return f"| {name} | {count:,} | {count / elapsed:,.0f} | {p50:.1f} | {p99:.1f} |"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--latency", type=float, default=0.05)
    parser.add_argument("--sequential", type=int, default=200, help="requests at concurrency 1")
    parser.add_argument("--rss", default="1000,20000", help="request counts for the peak-RSS runs")
    parser.add_argument("--clients", type=int, default=4, help="client processes sharing the concurrency")
    parser.add_argument("--keep", type=int, help="the server's --keep (default: its own)")
    parser.add_argument("--rss-only", action="store_true", help="only the peak-RSS runs")
    parser.add_argument("--same-task", action="store_true",
                        help="in the peak-RSS runs, every task the same text (the fake model then remembers one prompt)")
    args = parser.parse_args()
    keep = () if args.keep is None else ("--keep", str(args.keep))
    import bamasc

    with tempfile.TemporaryDirectory(prefix="bench-serve-") as folder:
        path = plan_file(folder)
        plan = bamasc.Plan.load(path)
        lines = ["| path | requests | requests/s | p50 ms | p99 ms | |", "|---|---|---|---|---|---|"]
        p50 = {}
        for concurrency, count in () if args.rss_only else ((args.concurrency, args.requests), (1, args.sequential)):
            served = Served(path, folder, args.latency, concurrency, *keep)
            try:
                over_http(served.url, min(count, 200), concurrency, args.clients)  # warm
                elapsed, latencies, client_cpu = over_http(served.url, count, concurrency, args.clients)
                raw_elapsed, raw_latencies = asyncio.run(over_raw(served.url, count, concurrency))
            finally:
                served.stop()
            lines.append(row(f"HTTP through httpx, bamasc serve (concurrency {concurrency})", count, elapsed, latencies)
                         + f" httpx client CPU {client_cpu * 1000:.2f} ms/request |")
            lines.append(row(f"HTTP, minimal asyncio client, bamasc serve (concurrency {concurrency})", count,
                             raw_elapsed, raw_latencies) + " |")
            p50[("raw", concurrency)] = percentile(raw_latencies, 0.5)
            p50[("http", concurrency)] = percentile(latencies, 0.5)
            for how in ("plan.run", "session"):
                elapsed, latencies = asyncio.run(in_process(plan, count, concurrency, args.latency, folder, how))
                name = "plan.run in-process" if how == "plan.run" else "session.run in-process (the server's call)"
                lines.append(row(f"{name} (concurrency {concurrency})", count, elapsed, latencies) + " |")
                p50[(how, concurrency)] = percentile(latencies, 0.5)
        print("\n".join(lines))
        print()
        for concurrency in () if args.rss_only else (args.concurrency, 1):
            for client in ("http", "raw"):
                over_run = (p50[(client, concurrency)] - p50[("plan.run", concurrency)]) * 1000
                over_session = (p50[(client, concurrency)] - p50[("session", concurrency)]) * 1000
                print(f"p50 added by the server, concurrency {concurrency}, {'httpx' if client == 'http' else 'minimal'} "
                      f"client: {over_run:+.2f} ms against plan.run, {over_session:+.2f} ms against session.run")
        print()
        print("| requests served | peak RSS of the server (VmHWM) |")
        print("|---|---|")
        for count in (int(part) for part in args.rss.split(",")):
            served = Served(path, folder, args.latency, args.concurrency, *keep)
            try:
                asyncio.run(over_raw(served.url, count, args.concurrency, args.same_task))
                print(f"| {count:,} | {served.peak_rss_mib():.1f} MiB |")
            finally:
                served.stop()


if __name__ == "__main__":
    main()
