"""Big batches: peak memory and throughput of `bamasc exec --dataset` by number of tasks, and a resume's cost.

    python benchmarks/bench_batch.py [--sizes 1000,10000,100000] [--baseline DIR]

Each size runs `exec examples/gsm8k.bam --fake echo --dataset D --trace T
--concurrency 64` in a process of its own; its peak RSS is the kernel's
(wait4's ru_maxrss) and its throughput tasks per wall second. Then, on the
largest trace: `--resume` with every task finished (the trace is read, nothing
runs), and the same after a torn last line is appended (cut from the end).
With `--baseline DIR` the same runs are made with another source tree,
side by side, each child started in its tree (cwd) and checked to import
bamasc from it. Target: peak RSS at the largest size within 1.5x of the
smallest, and throughput no worse than the baseline's.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def dataset(folder: str, size: int) -> str:
    path = os.path.join(folder, f"tasks-{size}.jsonl")
    with open(path, "w", encoding="utf-8") as handle:
        for i in range(size):
            handle.write(json.dumps({"id": f"t{i}", "question": f"What is {i} plus {i % 97}?"}) + "\n")
    return path


def child(tree: str, args: list[str]) -> tuple[float, float, int]:
    """(wall seconds, peak RSS in MB, exit code) of `python -m bamasc ARGS` run in `tree`."""
    env = dict(os.environ, PYTHONPATH=tree)
    start = time.perf_counter()
    process = subprocess.Popen([sys.executable, "-m", "bamasc", *args], cwd=tree, env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(process.pid, 0)
    process.returncode = os.waitstatus_to_exitcode(status)
    return time.perf_counter() - start, usage.ru_maxrss / 1024, process.returncode


def imported_from(tree: str) -> str:
    env = dict(os.environ, PYTHONPATH=tree)
    # cwd=tree: `-c` puts the working directory first on sys.path, ahead of PYTHONPATH
    done = subprocess.run([sys.executable, "-c", "import bamasc; print(bamasc.__file__)"], cwd=tree, env=env,
                          capture_output=True, text=True, check=True)
    return done.stdout.strip()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,10000,100000")
    parser.add_argument("--baseline", metavar="DIR", help="another bamasc source tree to run beside this one")
    args = parser.parse_args()
    sizes = [int(size) for size in args.sizes.split(",")]
    trees = {"this tree": ROOT}
    if args.baseline:
        trees["baseline"] = os.path.abspath(args.baseline)
    for name, tree in trees.items():
        found = imported_from(tree)
        if not found.startswith(tree):
            raise SystemExit(f"{name}: bamasc imports from {found}, not from {tree}")
    with tempfile.TemporaryDirectory() as folder:
        data = {size: dataset(folder, size) for size in sizes}
        print(f"exec examples/gsm8k.bam --fake echo --concurrency 64, a trace per run; baseline: {args.baseline}")
        print(f"{'tree':<10} {'tasks':>7} {'wall s':>8} {'tasks/s':>8} {'peak MB':>8} {'vs first':>8}")
        traces = {}
        for size in sizes:
            for name, tree in trees.items():  # side by side: the trees alternate at each size
                trace = os.path.join(folder, f"trace-{name.replace(' ', '-')}-{size}.jsonl")
                wall, peak, code = child(tree, ["exec", "examples/gsm8k.bam", "--fake", "echo", "--dataset",
                                                data[size], "--trace", trace, "--concurrency", "64"])
                if code != 0:
                    raise SystemExit(f"{name}: exec of {size} tasks exited {code}")
                first = traces.setdefault((name, "first"), peak)
                traces[name] = trace
                print(f"{name:<10} {size:>7} {wall:>8.2f} {size / wall:>8.0f} {peak:>8.1f} {peak / first:>7.2f}x")
        largest = sizes[-1]
        print(f"\n--resume on the {largest}-task trace, every task finished")
        print(f"{'tree':<10} {'case':<22} {'wall s':>8} {'peak MB':>8}")
        for name, tree in trees.items():
            trace = traces[name]
            common = ["exec", "examples/gsm8k.bam", "--fake", "echo", "--dataset", data[largest], "--trace", trace,
                      "--resume"]
            wall, peak, _ = child(tree, common)
            print(f"{name:<10} {'finished trace':<22} {wall:>8.2f} {peak:>8.1f}")
            with open(trace, "ab") as handle:
                handle.write(b'{"type": "call", "task_id": "t')  # a run killed mid-write
            wall, peak, _ = child(tree, common)
            print(f"{name:<10} {'torn last line':<22} {wall:>8.2f} {peak:>8.1f}")


if __name__ == "__main__":
    main()
