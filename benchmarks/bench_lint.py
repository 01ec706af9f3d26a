"""Cold `bamasc lint` CPU time (user + system of the process) beside bare interpreter start-up, in one run.

    python benchmarks/bench_lint.py [--runs 31] [--baseline DIR]

`--baseline DIR` adds a third command to the alternation: the same lint run
from another source tree of bamasc (an older checkout, e.g. made with
`git worktree add DIR REV`), as `python -m bamasc` with that tree first on the
path, beside this tree run the same way, so a change is measured against
its parent in one run.

Each run starts a new process, so every import and the grammar tables load
from scratch; the two commands alternate so drift in machine speed hits both.
Run it where bamasc is installed (`pip install .` compiles bytecode, as for
any user); `PYTHONDONTWRITEBYTECODE` is cleared so a source checkout gets
bytecode too.
Target (issue: front end): lint of every example and stdlib file within 4x of
`python -c pass`, in CPU time: on a shared machine the wall time of a 50 ms
process is mostly other processes' scheduling, its CPU time is not.
"""

from __future__ import annotations

import argparse
import glob
import os
import resource
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def cpu_time(command: list[str], env: dict = ENV, cwd: str = ROOT) -> float:
    """The CPU seconds (user + system) the command's process and its children spent."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(command, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False, env=env)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def from_tree(tree: str) -> dict:
    """The environment that runs `python -m bamasc` from the source tree `tree` (run it with cwd=tree:
    `-m` puts the working directory first on sys.path, ahead of PYTHONPATH and of an editable install)."""
    tree = os.path.abspath(tree)
    env = {**ENV, "PYTHONPATH": tree}
    found = subprocess.run(
        [sys.executable, "-c", "import bamasc; print(bamasc.__file__)"], cwd=tree, env=env, capture_output=True, text=True
    ).stdout.strip()
    if not found.startswith(tree + os.sep):
        sys.exit(f"python imports bamasc from {found}, not from {tree}")
    return env


def table_row(name: str, times: list[float]) -> str:
    return f"| {name} | {statistics.median(times) * 1000:.1f} | {min(times) * 1000:.1f} | {max(times) * 1000:.1f} |"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=31)
    parser.add_argument("--baseline", metavar="DIR", help="another bamasc source tree to time beside this one")
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
        cpu_time(command)
    bare_times, lint_times = [], []
    for _ in range(args.runs):
        bare_times.append(cpu_time(bare))
        lint_times.append(cpu_time(lint))
    if args.baseline:
        compare(args, files, bare)
        return
    ratios = [l / b for l, b in zip(lint_times, bare_times)]
    bare_ms = statistics.median(bare_times) * 1000
    lint_ms = statistics.median(lint_times) * 1000
    print(f"files linted: {len(files)}; runs: {args.runs} each, alternating; lint command: {' '.join(entry)}")
    print("| command | median CPU ms | min ms | max ms |")
    print("|---|---:|---:|---:|")
    print(f"| python -c pass | {bare_ms:.1f} | {min(bare_times) * 1000:.1f} | {max(bare_times) * 1000:.1f} |")
    print(f"| bamasc lint ({len(files)} files) | {lint_ms:.1f} | {min(lint_times) * 1000:.1f} | {max(lint_times) * 1000:.1f} |")
    print(f"ratio of medians: {lint_ms / bare_ms:.2f}x; median of per-pair ratios: {statistics.median(ratios):.2f}x (target <= 4x)")


def compare(args, files: list[str], bare: list[str]) -> None:
    """This tree and the baseline tree, both as `python -m bamasc lint`, alternating with `python -c pass`.

    Each tree lints its own copy of the files (the language may have changed between them).
    """
    trees = {"this tree": ROOT, "baseline": os.path.abspath(args.baseline)}
    lints = {name: [sys.executable, "-m", "bamasc", "lint", *(os.path.join(tree, f) for f in files)] for name, tree in trees.items()}
    envs = {name: from_tree(tree) for name, tree in trees.items()}
    for name, env in envs.items():
        lint = lints[name]
        check = subprocess.run(lint, cwd=trees[name], capture_output=True, text=True, env=env)
        if check.returncode != 0:
            sys.exit(f"lint from {name} failed:\n{check.stdout}{check.stderr}")
        cpu_time(lint, env, trees[name])
    times = {"python -c pass": [], **{name: [] for name in envs}}
    for _ in range(args.runs):
        times["python -c pass"].append(cpu_time(bare))
        for name, env in envs.items():
            times[name].append(cpu_time(lints[name], env, trees[name]))
    bare_ms = statistics.median(times["python -c pass"]) * 1000
    print(f"files linted: {len(files)}; runs: {args.runs} each, alternating; baseline tree: {args.baseline}")
    print("| command | median CPU ms | min ms | max ms | ratio to python -c pass |")
    print("|---|---:|---:|---:|---:|")
    for name, series in times.items():
        print(f"{table_row(name, series)} {statistics.median(series) * 1000 / bare_ms:.2f}x |")
    pairs = [a / b for a, b in zip(times["this tree"], times["baseline"])]
    print(f"this tree / baseline, median of per-run ratios: {statistics.median(pairs):.3f}")


if __name__ == "__main__":
    main()
