"""Cold `bamasc lint` wall time beside bare interpreter start-up, measured in one run.

    python benchmarks/bench_lint.py [--runs 31]

Each run starts a new process, so every import and the grammar tables load
from scratch; the two commands alternate so drift in machine speed hits both.
Run it where bamasc is installed (`pip install .` compiles bytecode, as for
any user); `PYTHONDONTWRITEBYTECODE` is cleared so a source checkout gets
bytecode too.
Target (issue: front end): lint of every example and stdlib file within 4x of
`python -c pass`.
"""

from __future__ import annotations

import argparse
import glob
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def wall_time(command: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False, env=ENV)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=31)
    args = parser.parse_args()
    files = sorted(glob.glob(os.path.join("examples", "*.bam"))) + sorted(glob.glob(os.path.join("stdlib_topologies", "*.bam")))
    bare = [sys.executable, "-c", "pass"]
    # The installed console script, as users run it; `python -m bamasc` adds runpy's imports.
    script = os.path.join(os.path.dirname(sys.executable), "bamasc")
    entry = [script] if os.path.exists(script) else [sys.executable, "-m", "bamasc"]
    lint = [*entry, "lint", *files]
    check = subprocess.run(lint, cwd=ROOT, capture_output=True, text=True, env=ENV)
    if check.returncode != 0:
        sys.exit(f"lint failed:\n{check.stdout}{check.stderr}")
    for command in (bare, lint):  # warm the file cache and .pyc files
        wall_time(command)
    bare_times, lint_times = [], []
    for _ in range(args.runs):
        bare_times.append(wall_time(bare))
        lint_times.append(wall_time(lint))
    ratios = [l / b for l, b in zip(lint_times, bare_times)]
    bare_ms = statistics.median(bare_times) * 1000
    lint_ms = statistics.median(lint_times) * 1000
    print(f"files linted: {len(files)}; runs: {args.runs} each, alternating; lint command: {' '.join(entry)}")
    print("| command | median wall ms | min ms | max ms |")
    print("|---|---:|---:|---:|")
    print(f"| python -c pass | {bare_ms:.1f} | {min(bare_times) * 1000:.1f} | {max(bare_times) * 1000:.1f} |")
    print(f"| bamasc lint (7 files) | {lint_ms:.1f} | {min(lint_times) * 1000:.1f} | {max(lint_times) * 1000:.1f} |")
    print(f"ratio of medians: {lint_ms / bare_ms:.2f}x; median of per-pair ratios: {statistics.median(ratios):.2f}x (target <= 4x)")


if __name__ == "__main__":
    main()
