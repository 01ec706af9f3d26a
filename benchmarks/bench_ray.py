"""`--engine ray` against the local engine: the same per-task answers and costs, and the wall time of each.

    python benchmarks/bench_ray.py [--tasks 2000] [--actors 4] [--concurrency 16] [--total B]

Both engines run the same GSM8K-style tasks on examples/gsm8k.bam with the
deterministic fake provider (`random`: seeded choices, replies of seeded
lengths), each writing a trace. The check: every task's answer, cost, status,
template and number of calls are equal, and so are every task's call lines
(node, model, attempt, tokens, reserved, charged). With --total, which
tasks fit depends on the order tasks end in (on either engine), so the
comparison is over the tasks run at the same per-task budget on both, and
both runs must stay within the total. Exits 1 on any difference. A local Ray instance is started on
127.0.0.1 (its start-up is timed apart).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def calls_by_task(trace: str) -> tuple[dict, float]:
    kept: dict = {}
    spent = 0.0
    for record in map(json.loads, open(trace, encoding="utf-8")):
        if record["type"] == "call":
            spent += record["charged"]
            kept.setdefault(record["task_id"], []).append(
                (record["node"], record["model"], record["attempt"], record["prompt_tokens"],
                 record["completion_tokens"], record["reserved"], record["charged"]))
    return kept, spent


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tasks", type=int, default=2000)
    parser.add_argument("--actors", type=int, default=4)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--total", type=float, default=None, help="a total budget in µ$ for each run")
    args = parser.parse_args()

    from bamasc.plan.compile import compile_file
    from bamasc.runtime.execute import ExecOptions, Task
    from bamasc.runtime.ray_engine import run_on_ray, start_ray
    from bamasc.runtime.workers import run_tasks

    path = os.path.join(ROOT, "examples", "gsm8k.bam")
    compiled = compile_file(path)
    lower = tuple((b, compile_file(path, "gsm8k", b).plan.system("gsm8k"), None) for b in (500, 875, 1250))
    # Distinct texts: the fake provider's draw for a prompt it has sent before is the next one (it stands for
    # a retry), so identical tasks would get their replies in the order the runners happen to send them.
    tasks = [Task(f"q{i}", f"Tom has {i} apples and buys {i * 7 % 13} more. How many now?")
             for i in range(args.tasks)]
    rows = {}
    with tempfile.TemporaryDirectory() as folder:
        def options(name: str) -> ExecOptions:
            return ExecOptions(fake_mode="random", concurrency=args.concurrency,
                               trace_path=os.path.join(folder, f"{name}.jsonl"), total_budget=args.total,
                               budget_plans=lower if args.total is not None else ())

        started = time.perf_counter()
        local, _, _ = asyncio.run(run_tasks(compiled.plan, compiled.program, None, tasks, options("local")))
        local_s = time.perf_counter() - started
        started = time.perf_counter()
        start_ray(None, args.actors)
        ray_start_s = time.perf_counter() - started
        on_ray: list = []
        started = time.perf_counter()
        run_on_ray(compiled.plan, compiled.program, None, tasks, options("ray"), actors=args.actors,
                   on_result=on_ray.append)
        ray_s = time.perf_counter() - started
        for name, results in (("local", local), ("ray", on_ray)):
            rows[name] = {r.task_id: (r.answer, round(r.cost, 6), r.status, r.template, r.calls, r.budget)
                          for r in results}
        local_calls, local_spent = calls_by_task(os.path.join(folder, "local.jsonl"))
        ray_calls, ray_spent = calls_by_task(os.path.join(folder, "ray.jsonl"))
        left = sorted(os.listdir(folder))
    # Under a total, which tasks fit depends on the order tasks end in, on either engine: compared are the
    # tasks that ran at the same per-task budget on both.
    same = [task for task in rows["local"] if task in rows["ray"] and rows["local"][task][5] == rows["ray"][task][5]]
    differing = [task for task in same if rows["local"][task] != rows["ray"][task]]
    call_differing = [task for task in same if local_calls.get(task) != ray_calls.get(task)]
    skipped = sum(1 for row in rows["ray"].values() if row[2] == "skipped_total")
    print(f"{args.tasks} tasks, {args.actors} actors x concurrency {args.concurrency}, fake provider `random`"
          + (f", total {args.total:g} µ$" if args.total is not None else ""))
    print(f"local engine  {local_s:7.2f} s  spent {local_spent:12.1f} µ$")
    print(f"ray engine    {ray_s:7.2f} s  spent {ray_spent:12.1f} µ$  (Ray start-up {ray_start_s:.2f} s apart)")
    print(f"tasks with a different answer/cost/status/template/calls: {len(differing)}; "
          f"with different call lines: {len(call_differing)} (of {len(same)} at the same budget on both); "
          f"skipped for the total on Ray: {skipped}")
    ok = not differing and not call_differing and len(rows["ray"]) == args.tasks and left == ["local.jsonl", "ray.jsonl"]
    if args.total is not None:
        ok = ok and max(local_spent, ray_spent) <= args.total + 1e-6
    print("same per-task answers and costs: " + ("yes" if ok else f"NO (first differing: {differing[:5]})"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
