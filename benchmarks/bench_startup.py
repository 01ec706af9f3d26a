"""CPU time of whole `bamasc` commands that run one task or compile once, beside `python -c pass`, in one run.

    python benchmarks/bench_startup.py [--runs 11] [--baseline DIR]

Each run is a new process (user + system CPU of it and its children, from
getrusage), so what is measured is everything a user waits for before and
around one task: imports, the compile (or a plan's reload, which recompiles
it to check it), and the task itself on the fake provider. Commands alternate
so that drift in the machine's speed hits all of them.

`--baseline DIR` runs the same commands from another source tree of bamasc
(e.g. `git worktree add DIR REV`) as `python -m bamasc`, with that tree first
on the path, beside this tree run the same way.

Every run pins the price catalogue to the tests' fixture (`BAMASC_CATALOG`)
unless `--installed` is given, which prices from the installed genai-prices
as a user's run does.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TASK = "Tom has 3 apples and buys 4 more. How many apples does he have now?"


def cpu_time(command: list[str], env: dict, cwd: str) -> float:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run(command, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    if done.returncode != 0:
        sys.exit(f"{' '.join(command)} failed:\n{done.stderr.decode(errors='replace')}")
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def commands(tree: str, work: str) -> dict[str, list[str]]:
    """The timed commands, run from `tree` (plans written into `work`, compiled once beforehand)."""
    bamasc = [sys.executable, "-m", "bamasc"]
    gsm8k = os.path.join(tree, "examples", "gsm8k.bam")
    plan = os.path.join(work, "gsm8k.plan.json")
    return {
        "compile gsm8k.bam": [*bamasc, "compile", gsm8k, "--system", "gsm8k", "-o", plan],
        "exec gsm8k.bam, one task (fake)": [*bamasc, "exec", gsm8k, "--fake", "echo", "--task", TASK],
        "exec its plan, one task (fake)": [*bamasc, "exec", plan, "--fake", "echo", "--task", TASK],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=11)
    parser.add_argument("--baseline", metavar="DIR", help="another bamasc source tree to time beside this one")
    parser.add_argument("--installed", action="store_true", help="price from the installed genai-prices")
    args = parser.parse_args()
    trees = {"this tree": ROOT}
    if args.baseline:
        trees["baseline"] = os.path.abspath(args.baseline)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONDONTWRITEBYTECODE", "BAMASC_CATALOG")}
    if not args.installed:
        env["BAMASC_CATALOG"] = os.path.join(ROOT, "tests", "fixtures", "catalog", "genai-prices-0.2.3.json")
    envs = {name: {**env, "PYTHONPATH": tree, "BAMASC_CACHE": tempfile.mkdtemp()} for name, tree in trees.items()}
    works = {name: tempfile.mkdtemp() for name in trees}
    runs = {name: commands(tree, works[name]) for name, tree in trees.items()}
    bare = [sys.executable, "-c", "pass"]
    for name, tree in trees.items():  # warm up: bytecode, the catalogue cache, the plan each exec reads
        for command in runs[name].values():
            cpu_time(command, envs[name], tree)
    times: dict[tuple[str, str], list[float]] = {}
    for _ in range(args.runs):
        times.setdefault(("python -c pass", ""), []).append(cpu_time(bare, env, ROOT))
        for name, tree in trees.items():
            for label, command in runs[name].items():
                times.setdefault((label, name), []).append(cpu_time(command, envs[name], tree))
    print(f"runs: {args.runs} each, alternating; catalogue: {'installed' if args.installed else 'pinned fixture'}")
    print("| command | tree | median CPU ms | min ms | max ms |")
    print("|---|---|---:|---:|---:|")
    for (label, name), series in times.items():
        print(f"| {label} | {name} | {statistics.median(series) * 1000:.0f} | {min(series) * 1000:.0f} | "
              f"{max(series) * 1000:.0f} |")


if __name__ == "__main__":
    main()
