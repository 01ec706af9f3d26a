"""Code sandbox throughput and per-candidate overhead against plain `python file.py`.

    python benchmarks/bench_sandbox.py [--candidates 200] [--concurrency 2]

(a) Overhead: the same MBPP-style candidates (a function and three asserts),
    one at a time, run as `python file.py` in a fresh temporary directory (the
    least any harness does) and through the sandbox at each isolation level
    this machine offers. The overhead is the difference of the medians.
    Target: under 50 ms per candidate.
(b) Throughput: candidates scored per second by `run_many` at the given
    concurrency, namespaces where available.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from bamasc.evaluate.sandbox import Job, Limits, SandboxError, check_isolation, run_many, run_tests  # noqa: E402


def candidate(index: int) -> Job:
    """An MBPP-style item: a candidate function and its three asserts."""
    code = (
        f"def add_{index}(numbers):\n"
        "    total = 0\n"
        "    for number in numbers:\n"
        "        total += number\n"
        "    return total\n"
    )
    n = index % 50 + 1
    return Job(code, [f"assert add_{index}([1, 2, 3]) == 6", f"assert add_{index}([]) == 0",
                      f"assert add_{index}(range({n})) == {sum(range(n))}"])


def plain(job: Job) -> float:
    """`python file.py` in a fresh temporary directory: the baseline a sandbox is compared with."""
    started = time.perf_counter()
    folder = tempfile.mkdtemp()
    try:
        path = os.path.join(folder, "main.py")
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(job.candidate + "\n" + "\n".join(job.tests) + "\n")
        subprocess.run([sys.executable, path], cwd=folder, check=True, stdout=subprocess.DEVNULL)
    finally:
        shutil.rmtree(folder)
    return time.perf_counter() - started


def sandboxed(job: Job, level: str) -> float:
    started = time.perf_counter()
    outcome = run_tests(job.candidate, job.tests, limits=Limits(wall_time=10), isolation=level)
    assert outcome.passed, outcome
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--candidates", type=int, default=200)
    parser.add_argument("--concurrency", type=int, default=2)
    args = parser.parse_args()
    sources = [candidate(i) for i in range(args.candidates)]
    try:
        check_isolation("namespaces")
        levels = ["namespaces", "hooks"]
    except SandboxError:
        levels = ["hooks"]
    runners = {"python file.py": plain, **{f"sandbox ({level})": (lambda s, lv=level: sandboxed(s, lv)) for level in levels}}
    for runner in runners.values():  # warm the page cache and the imports
        runner(sources[0])
    times: dict[str, list[float]] = {name: [] for name in runners}
    for source in sources:  # interleaved, so drift in machine load hits every side alike
        for name, runner in runners.items():
            times[name].append(runner(source))
    base = statistics.median(times["python file.py"])
    print(f"{args.candidates} candidates each, one at a time, interleaved; python {sys.version.split()[0]}, {os.cpu_count()} CPUs")
    print("| runner | median ms | p95 ms | overhead ms (median) |")
    print("|---|---:|---:|---:|")
    for name, values in times.items():
        ordered = sorted(values)
        p95 = ordered[max(0, int(0.95 * len(ordered)) - 1)]
        overhead = statistics.median(values) - base
        print(f"| {name} | {statistics.median(values) * 1000:.1f} | {p95 * 1000:.1f} | {overhead * 1000:+.1f} |")
    print()
    print("| isolation | concurrency | candidates | wall s | candidates/s |")
    print("|---|---:|---:|---:|---:|")
    for level in levels:
        started = time.perf_counter()
        outcomes = run_many(sources, Limits(wall_time=10), concurrency=args.concurrency, isolation=level)
        elapsed = time.perf_counter() - started
        assert all(outcome.passed for outcome in outcomes)
        print(f"| {level} | {args.concurrency} | {len(sources)} | {elapsed:.2f} | {len(sources) / elapsed:.1f} |")


if __name__ == "__main__":
    main()
