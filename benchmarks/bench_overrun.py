"""Overruns: the default budget guard against the BAMAS paper's after-the-fact check.

    python benchmarks/bench_overrun.py [--tasks 1000]

The same tasks at the paper's five GSM8K budgets, on the offline `fake`
provider in `verbose` mode (every answer as long as its cap allows, critics
reject, planners emit every step), with the conditions under which the
paper's runs overran: a fifth of the tasks are three times longer than the
compile-time `task_tokens` assumption, and transient failures (server errors,
rate limits, dropped connections, timeouts) force retries. Each budget's
selected template runs every task under both guards. Target: zero overruns
for the default guard.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from bamasc.plan.compile import compile_file  # noqa: E402
from bamasc.metering.guard import BudgetGuard, PosthocGuard  # noqa: E402
from bamasc.runtime.interpreter import TaskRun  # noqa: E402
from bamasc.runtime.providers.fake import FakeProvider  # noqa: E402
from bamasc.runtime.retry import RetryPolicy  # noqa: E402

BUDGETS = (500, 875, 1250, 1625, 2000)
FAILURES = ("server", "rate_limited", "connection", "timeout")
NO_WAIT = RetryPolicy(max_attempts=4, base_delay=0.0, max_delay=0.0, jitter=0.0, timeout=30.0)


def tasks(count: int, task_tokens: int) -> list[tuple[str, str]]:
    out = []
    for i in range(count):
        # The fake counts one token per byte: a long task is 3x the assumption.
        size = 3 * task_tokens if i % 5 == 0 else task_tokens // 2
        text = (f"Task {i}: a shop sells {i % 17 + 2} boxes of {i % 9 + 3} pens each. How many pens? " * 200)[:size]
        out.append((f"t{i}", text))
    return out


async def run_all(plan, program, guard_class, items, fail_rate, seed):
    system = plan.systems[0]
    template = system.template(system.selection["selected"])
    providers = {
        name: FakeProvider(name, mode="verbose", seed=seed, fail_rate=fail_rate, fail_kinds=FAILURES)
        for name in program.systems[system.name].models
    }
    limit = asyncio.Semaphore(64)

    async def one(task_id, text):
        async with limit:
            guard = guard_class(system.budget)
            run = TaskRun(program, system, template, providers, guard, task_id, text, None, NO_WAIT, seed)
            return await run.run()

    return template, await asyncio.gather(*(one(t, x) for t, x in items))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=1000)
    parser.add_argument("--fail-rate", type=float, default=0.1)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    source = os.path.join(ROOT, "examples", "gsm8k.bam")
    print(
        f"{args.tasks} tasks per budget (every 5th 3x longer than task_tokens), fake verbose, "
        f"{args.fail_rate:.0%} of attempts fail transiently ({', '.join(FAILURES)}), up to 4 attempts per call"
    )
    print("| budget µ$ | template | guard | overruns | mean cost µ$ | max cost µ$ | max / budget | exhausted or failed |")
    print("|---:|---|---|---:|---:|---:|---:|---:|")
    totals = {"reserve": 0, "posthoc": 0}
    started = time.perf_counter()
    for budget in BUDGETS:
        compiled = compile_file(source, budget=budget)
        plan, program = compiled.plan, compiled.program
        items = tasks(args.tasks, plan.systems[0].task_tokens)
        for name, guard_class in (("posthoc", PosthocGuard), ("reserve", BudgetGuard)):
            template, results = asyncio.run(run_all(plan, program, guard_class, items, args.fail_rate, args.seed))
            overruns = sum(r.cost > budget * (1 + 1e-9) for r in results)
            totals[name] += overruns
            costs = [r.cost for r in results]
            stopped = sum(r.status != "ok" for r in results)
            print(
                f"| {budget} | {template.name} | {name} | {overruns} | {statistics.fmean(costs):.1f} | "
                f"{max(costs):.1f} | {max(costs) / budget:.3f} | {stopped} |"
            )
    print(
        f"total overruns: default guard {totals['reserve']}, after-the-fact check {totals['posthoc']} "
        f"(of {len(BUDGETS) * args.tasks} tasks each); {time.perf_counter() - started:.0f} s"
    )


if __name__ == "__main__":
    main()
