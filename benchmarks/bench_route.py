"""Compile time of a `route` of 5 branches beside a static template of the same calls.

    python benchmarks/bench_route.py [--runs 21] [--branches 5] [--refine-branches 2 3]

Both templates have one router slot and one slot per branch, each branch a
`chain` over two instances (or, with `--refine`, a `refine` whose critic
count rotates seats, at the branch counts `--refine-branches`), on a pool of
three models. The route runs one branch
(the binder prices it with one epigraph column and a row per branch); the
static template runs the router and then every branch's chain in sequence,
the same calls summed. Times the in-process binding of the template (warm:
the first compile of each is dropped), median of `--runs`, and the ratio.
"""

from __future__ import annotations

import argparse
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
role Router { max_output = 8  prompt = "Route {{task}}" }
role Agent { max_output = 200  prompt = "Answer {{task}} {{previous?}}{{solution?}}{{feedback?}}" }
role Critic { max_output = 64  reads = verdict  prompt = "Check {{solution}} for {{task}}." }
"""


def sources(branches: int, refine: bool) -> tuple[str, str]:
    slots = ["  slot router : Router [1..1]"]
    exprs = []
    for b in range(branches):
        slots.append(f"  slot s{b} : Agent [1..2]")
        if refine:
            slots.append(f"  slot c{b} : Critic [0..2]")
            exprs.append(f"refine s{b}(task) with c{b} until approved")
        else:
            exprs.append(f"chain s{b}(task)")
    head = "topology t {\n" + "\n".join(slots) + "\n  flow {\n"
    route = head + "    answer route router(task) {\n" + "".join(
        f"      b{b}: {e}\n" for b, e in enumerate(exprs[:-1])) + f"      otherwise: {exprs[-1]}\n    }}\n  }}\n}}\n"
    static = head + "    r = router(task)\n" + "".join(f"    v{b} = {e}\n" for b, e in enumerate(exprs[:-1])) + (
        f"    answer {exprs[-1]}\n  }}\n}}\n")
    system = "system s { models = [strong, middle, small]  topologies = [t]  budget = %d  task_tokens = 200 }\n"
    # Budgets at which each binds some but not all seats on the strongest model.
    return MODELS + route + system % 6000, MODELS + static + system % (6000 * branches)


def timed(source: str, runs: int) -> tuple[float, float]:
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "t.bam")
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(source)
        program, diagnostics, _ = check_file(path, budgets=False)
        assert program is not None, [d.message for d in diagnostics]
        system = program.systems["s"]
        times = []
        for _ in range(runs + 1):
            start = time.perf_counter()
            binding = bind_template(program, system, "t", system.budget)
            times.append(time.perf_counter() - start)
        assert binding.feasible
        return statistics.median(times[1:]) * 1000, binding.worst_case_cost


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=21)
    parser.add_argument("--branches", type=int, default=5)
    parser.add_argument("--refine-branches", type=int, nargs="*", default=[2, 3])
    args = parser.parse_args()
    print("| branches | template | route ms | static ms | route / static |")
    print("|---|---|---|---|---|")
    for branches, refine in [(args.branches, False), *((n, True) for n in args.refine_branches)]:
        route, static = sources(branches, refine)
        route_ms, _ = timed(route, args.runs)
        static_ms, _ = timed(static, args.runs)
        kind = "refine, critic [0..2]" if refine else "chain of two"
        print(f"| {branches} | {kind} | {route_ms:.1f} | {static_ms:.1f} | {route_ms / static_ms:.2f} |", flush=True)


if __name__ == "__main__":
    main()
