"""Compile time of a dynamic plan of 6 steps over 4 slots beside a static template of the same size.

    python benchmarks/bench_dynamic.py [--runs 11] [--steps 6] [--slots 4] [--most 2]

Both templates have a [1..1] planner and `--slots` seat slots of [1..`--most`]
instances (roles with different output caps), on a pool of three models. The
dynamic plan lets each of its `--steps` steps run on any seat slot, reading
any earlier steps (the binder prices a step at its costliest slot, each read
at the largest output that step may have); the static template runs a static
`plan` of as many steps on the first slot, then a `chain` of every other slot
reading the steps: the same slots, seats and planner, and each step once.
Times the in-process binding of the template (warm: the first compile of
each is dropped), median of `--runs`, at a budget of half what the binding
of an unlimited budget costs, so the budget binds.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bamasc.optimize.bind import bind_template  # noqa: E402
from bamasc.plan.compile import check_file  # noqa: E402

MODELS = """
model strong { provider = fake  name = "s"  price { input = 3  output = 15 }  tier = 1 }
model middle { provider = fake  name = "m"  price { input = 0.8  output = 4 }  tier = 2 }
model small  { provider = fake  name = "n"  price { input = 0.1  output = 0.4 }  tier = 3 }
role Planner { max_output = 300  reads = plan  prompt = "Plan {{task}} for {{seats?}}" }
"""


def sources(steps: int, slots: int, most: int = 2) -> tuple[str, str]:
    roles = "".join(
        f'role R{k} {{ max_output = {60 + 40 * k}  prompt = "Do {{{{step?}}}} of {{{{plan?}}}}: {{{{task}}}} {{{{previous?}}}}{{{{steps?}}}}" }}\n'
        for k in range(slots)
    )
    head = "topology t {\n  slot planner : Planner [1..1]\n" + "".join(f"  slot s{k} : R{k} [1..{most}]\n" for k in range(slots))
    seats = ", ".join(f"s{k}" for k in range(slots))
    dynamic = head + f"  flow {{\n    answer plan planner(task) using {seats} max_steps {steps} dynamic\n  }}\n}}\n"
    chains = "".join(f"    v{k} = chain s{k}(task, steps)\n" for k in range(1, slots - 1))
    static = head + (
        f"  flow {{\n    steps = plan planner(task) using s0 max_steps {steps}\n{chains}"
        f"    answer chain s{slots - 1}(task, steps)\n  }}\n}}\n"
    )
    system = "system s { models = [strong, middle, small]  topologies = [t]  budget = %s  task_tokens = 200 }\n"
    return MODELS + roles + dynamic + system, MODELS + roles + static + system


def timed(source: str, runs: int) -> tuple[float, float, int]:
    """Median ms, the worst case bound, and the calls in the bound, at half the unlimited binding's cost."""
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "t.bam")
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(source % "1e12")
        program, diagnostics, _ = check_file(path, budgets=False)
        assert program is not None, [d.message for d in diagnostics]
        system = program.systems["s"]
        budget = bind_template(program, system, "t", math.inf).worst_case_cost / 2
        times = []
        for _ in range(runs + 1):
            start = time.perf_counter()
            binding = bind_template(program, system, "t", budget)
            times.append(time.perf_counter() - start)
        assert binding.feasible
        return statistics.median(times[1:]) * 1000, binding.worst_case_cost, len(binding.unrolled.calls)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=11)
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--slots", type=int, default=4)
    parser.add_argument("--most", type=int, default=2, help="instances a seat slot may have (1: seats never rotate)")
    args = parser.parse_args()
    print("| steps | slots | template | calls in the bound | median ms | worst case µ$ |")
    print("|---:|---:|---|---:|---:|---:|")
    for name, source in zip(("dynamic", "static"), sources(args.steps, args.slots, args.most)):
        ms, bound, calls = timed(source, args.runs)
        print(f"| {args.steps} | {args.slots} | {name} | {calls} | {ms:.1f} | {bound:.1f} |", flush=True)


if __name__ == "__main__":
    main()
