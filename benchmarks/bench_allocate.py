"""Allocation under a total budget: the dual-price allocator against the uniform split, on an offline table.

    python benchmarks/bench_allocate.py [--tasks 3000] [--seed 0]

The table (rows as `bamasc collect` writes them) has three kinds of task at
the budgets 500, 875, 1250, 1625 and 2000 µ$: easy ones that succeed at any
budget, middling ones that need 1250, and hard ones that succeed only at
2000, each with some noise; costs grow with the budget. The best budget
depends on the task, which the uniform split cannot see. For totals of 600
to 1800 µ$ a task, both are scored on the table (expected successes, the
mean of the rows' `success`) and both spend within the total; "at equal
spend" also gives the allocator exactly what the uniform split spent.
"""

from __future__ import annotations

import argparse
import os
import random
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from bamasc.runtime.allocate import DualAllocator, Estimates, uniform_budget  # noqa: E402

BUDGETS = (500.0, 875.0, 1250.0, 1625.0, 2000.0)
NEEDS = {"easy": 500.0, "middling": 1250.0, "hard": 2000.0}


def table(tasks: int, seed: int):
    rng = random.Random(seed)
    rows = []
    for i in range(tasks):
        kind = rng.choice(list(NEEDS))
        for budget in BUDGETS:
            chance = 0.9 if budget >= NEEDS[kind] else 0.1
            rows.append((f"t{i}", budget, "linear", rng.random() < chance, budget * rng.uniform(0.7, 0.9)))
    return rows


def score(choose, estimates: Estimates, tasks: list[str]) -> tuple[float, float]:
    reward = spend = 0.0
    for task_id in tasks:
        success, cost = estimates.at(task_id, choose(task_id))
        reward += success
        spend += cost
    return reward, spend


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=3000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rows = table(args.tasks, args.seed)
    estimates = Estimates(rows, dict.fromkeys(BUDGETS, "linear"))
    tasks = [f"t{i}" for i in range(args.tasks)]
    print(f"{args.tasks} tasks, budgets {', '.join(f'{b:g}' for b in BUDGETS)} µ$; expected successes and spend")
    print(f"{'µ$ a task':>9} {'uniform at':>10} {'uniform':>16} {'allocator':>16} {'at equal spend':>16}")
    for share in (600, 900, 1200, 1500, 1800):
        total = share * args.tasks
        budget = uniform_budget(BUDGETS, total, args.tasks)
        uniform = score(lambda _: budget, estimates, tasks)
        allocated = score(DualAllocator(estimates, total, args.tasks).choose, estimates, tasks)
        equal = score(DualAllocator(estimates, uniform[1], args.tasks).choose, estimates, tasks)
        cells = [f"{reward:>6.0f} / {spend / args.tasks:>6.0f}" for reward, spend in (uniform, allocated, equal)]
        print(f"{share:>9} {budget:>10g} {cells[0]:>16} {cells[1]:>16} {cells[2]:>16}")
    print("cells: expected successes / mean µ$ spent a task")


if __name__ == "__main__":
    main()
