"""Cold `bamasc compile examples/gsm8k.bam` wall time, beside `python -c pass` and `bamasc lint`.

    python benchmarks/bench_compile.py [--runs 15] [--baseline DIR]

`--baseline DIR` instead times the warm in-process compile (the second and
later compiles in one process) of this source tree beside another one, e.g. an
older checkout made with `git worktree add DIR REV`: each round starts one
process per tree, alternating, and takes the median of 20 compiles in it.

Each run is a new process: imports (highspy, networkx), parsing, checking and
every ILP solve of the four templates. Also prints how many ILP solves and
cuts one compile needs, measured in-process.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def wall_time(command: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True, env=ENV)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--baseline", metavar="DIR", help="another bamasc source tree to time beside this one")
    args = parser.parse_args()
    if args.baseline:
        compare(args)
        return
    script = os.path.join(os.path.dirname(sys.executable), "bamasc")
    entry = [script] if os.path.exists(script) else [sys.executable, "-m", "bamasc"]
    commands = {
        "python -c pass": [sys.executable, "-c", "pass"],
        "bamasc lint examples/gsm8k.bam": [*entry, "lint", "examples/gsm8k.bam"],
        "bamasc compile examples/gsm8k.bam": [*entry, "compile", "examples/gsm8k.bam"],
    }
    for command in commands.values():
        wall_time(command)
    times = {name: [] for name in commands}
    for _ in range(args.runs):
        for name, command in commands.items():
            times[name].append(wall_time(command))
    print(f"runs: {args.runs} each, interleaved; command: {' '.join(entry)}")
    print("| command | median wall ms | min ms | max ms |")
    print("|---|---:|---:|---:|")
    for name, values in times.items():
        print(f"| {name} | {statistics.median(values) * 1000:.0f} | {min(values) * 1000:.0f} | {max(values) * 1000:.0f} |")

    sys.path.insert(0, ROOT)
    from bamasc.plan.compile import compile_file

    path = os.path.join(ROOT, "examples", "gsm8k.bam")
    start = time.perf_counter()
    compile_file(path)  # loads highspy, networkx and numpy on the way
    first = time.perf_counter() - start
    start = time.perf_counter()
    result = compile_file(path)
    again = time.perf_counter() - start
    found = result.bindings["gsm8k"]
    print(
        f"in-process compile: first {first * 1000:.0f} ms (imports included), again {again * 1000:.0f} ms; "
        f"system gsm8k: ILP solves {sum(b.solves for b in found)}, cuts {sum(b.cuts for b in found)}, "
        f"templates {len(found)}"
    )


# Run in a fresh process with one tree first on the path: the median warm compile, in ms.
WARM = """
import statistics, sys, time
import bamasc
print(bamasc.__file__)
try:
    from bamasc.plan.compile import compile_file
except ImportError:  # the layout before the compile driver moved into plan/
    from bamasc.compiler import compile_file
path = sys.argv[1]
found = compile_file(path)
if found.plan is None:
    sys.exit(f"{path} does not compile in this tree")
times = []
for _ in range(20):
    start = time.perf_counter()
    compile_file(path)
    times.append(time.perf_counter() - start)
print(statistics.median(times) * 1000)
"""


def compare(args) -> None:
    trees = {"this tree": ROOT, "baseline": os.path.abspath(args.baseline)}
    warm = {name: [] for name in trees}
    for _ in range(args.runs):
        for name, tree in trees.items():
            # cwd=tree: `-c` puts the working directory first on sys.path, ahead of PYTHONPATH
            # and of an editable install, so this is the tree that gets imported (checked below).
            env = {**ENV, "PYTHONPATH": tree}
            # Each tree compiles its own copy of the example: the language may have changed between them.
            path = os.path.join(tree, "examples", "gsm8k.bam")
            done = subprocess.run([sys.executable, "-c", WARM, path], cwd=tree, env=env, capture_output=True, text=True, check=True)
            imported, median = done.stdout.split()
            if not imported.startswith(os.path.join(tree, "")):
                sys.exit(f"the {name} run imported bamasc from {imported}, not from {tree}")
            warm[name].append(float(median))
    print(f"warm in-process compile of examples/gsm8k.bam; {args.runs} processes per tree, alternating; baseline: {args.baseline}")
    print("| tree | median of per-process medians, ms | min | max |")
    print("|---|---:|---:|---:|")
    for name, values in warm.items():
        print(f"| {name} | {statistics.median(values):.1f} | {min(values):.1f} | {max(values):.1f} |")
    ratios = [b / a for a, b in zip(warm["this tree"], warm["baseline"])]
    print(f"baseline / this tree, median of per-round ratios: {statistics.median(ratios):.2f}x")


if __name__ == "__main__":
    main()
