"""Compile time of a conversation beside a static template of the same number of calls.

    python benchmarks/bench_converse.py [--runs 5]

For r rounds of two speakers with [1..2] instances each (up to 4r turns, turn k
reading turns 1..k-1), three templates are compiled warm, in process:

- `converse`: the conversation, its slot counts free ([1..2] each);
- `converse fixed`: the same at fixed counts ([2..2] each);
- `chain`: a static `chain` of 4r calls on one slot at a fixed count, each call
  reading only the one before it.

Each cell is the median of `--runs` compiles after an untimed first one.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

HEAD = """
model strong { provider = fake  name = "s"  price { input = 2  output = 8 }  tier = 1 }
model mid    { provider = fake  name = "m"  price { input = 0.8  output = 3 }  tier = 2  max_output = 96 }
model weak   { provider = fake  name = "w"  price { input = 0.2  output = 0.8 }  tier = 3  max_output = 64 }
role Coder    { max_output = 128  prompt = "Code {{task}} {{transcript?}}{{previous?}}" }
role Reviewer { max_output = 64   reads = verdict  prompt = "Review {{task}} {{transcript?}}" }
"""

FLOWS = {
    "converse": ("slot coder : Coder [1..2]  slot reviewer : Reviewer [1..2]",
                 "answer converse coder(task), reviewer(task) until reviewer approves max_rounds {r}"),
    "converse fixed": ("slot coder : Coder [2..2]  slot reviewer : Reviewer [2..2]",
                       "answer converse coder(task), reviewer(task) until reviewer approves max_rounds {r}"),
    "chain": ("slot coder : Coder [{n}..{n}]", "answer chain coder(task)"),
}


def source(kind: str, rounds: int, budget: float) -> str:
    slots, flow = FLOWS[kind]
    n = 4 * rounds
    return HEAD + (
        f"topology t {{ {slots.format(n=n)}  flow {{ {flow.format(r=rounds)} }} }}\n"
        f"system s {{ models = [strong, mid, weak]  topologies = [t]  budget = {budget}  task_tokens = 200 }}\n"
    )


def timed(path: str, runs: int) -> tuple[float, float, int]:
    from bamasc.plan.compile import compile_file

    result = compile_file(path)
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        compile_file(path)
        times.append(time.perf_counter() - start)
    template = result.plan.systems[0].templates[0]
    return (statistics.median(times) * 1000 if times else 0.0), template.worst_case_cost, len(template.nodes)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    print(f"warm in-process compile, median of {args.runs}")
    print("| rounds | calls in the bound | template | median ms | worst case µ$ |")
    print("|---:|---:|---|---:|---:|")
    with tempfile.TemporaryDirectory() as folder:
        for rounds in (2, 4, 8, 16):
            for kind in FLOWS:
                # A budget that binds: half the worst case of the binding an unlimited budget gets.
                path = os.path.join(folder, "t.bam")
                with open(path, "w", encoding="utf-8") as handle:
                    handle.write(source(kind, rounds, 1e9))
                _, top, _ = timed(path, 0)
                with open(path, "w", encoding="utf-8") as handle:
                    handle.write(source(kind, rounds, top / 2))
                ms, bound, calls = timed(path, args.runs)
                print(f"| {rounds} | {calls} | {kind} | {ms:.1f} | {bound:.1f} |")


if __name__ == "__main__":
    main()
