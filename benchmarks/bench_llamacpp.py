"""Local model throughput: `bamasc exec` on the quickstart against direct llama_cpp calls on the same prompts.

    python benchmarks/bench_llamacpp.py [--tasks 8] [--rounds 3]

The bamasc side runs each task through `bamasc exec`'s runner (the compiled
plan of examples/quickstart.bam: providers made, budget guard, exact prompt
counts, ledger, answer extraction). An untimed first run of each task
records the calls the shared model ran (messages, max_tokens, seed; the
recording stays on, and on bamasc's clock, in the timed runs). The direct
side replays those calls, in the same order, on a `llama_cpp.Llama` of its
own (same file, same load options) with nothing but
`create_chat_completion`. Models load before timing.

Throughput is generated tokens per second, over wall time and over the
process's CPU time (the second is steadier on a shared machine, and still
charges bamasc for every instruction it adds). The two sides alternate task
by task, in an order that flips every task, so a change in the machine's
load falls on both. Target: bamasc within 5% of direct.
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

QUICKSTART = os.path.join(ROOT, "examples", "quickstart.bam")
PROBLEMS = [
    "Tom has 3 apples and buys 4 more. How many apples does he have now?",
    "A box holds 12 eggs. How many eggs are in 5 boxes?",
    "Sara reads 15 pages a day. How many pages does she read in a week?",
    "A shirt costs 20 dollars and is 25% off. What does it cost now?",
    "There are 30 students and 6 leave. How many students remain?",
    "A car goes 60 miles per hour for 3 hours. How far does it go?",
    "Ben has 48 marbles and shares them equally among 4 friends. How many does each get?",
    "A baker makes 9 trays of 8 muffins. How many muffins is that?",
]
SIDES = ("bamasc exec", "direct")


class Clock:
    """Wall and CPU seconds of one measured stretch."""

    def __enter__(self):
        self.wall, self.cpu = time.perf_counter(), time.process_time()
        return self

    def __exit__(self, *exc):
        self.wall, self.cpu = time.perf_counter() - self.wall, time.process_time() - self.cpu


def bamasc_side(compiled, task, shared) -> tuple[Clock, int, list]:
    """One task through exec's runner: its clock, generated tokens, and the calls the model ran."""
    from bamasc.runtime.execute import ExecOptions
    from bamasc.runtime.workers import run_tasks

    recorded = []
    models = list({id(m): m for m in shared}.values())
    for model in models:

        def chat(messages, max_tokens, seed, deadline, _original=model.chat):
            response = _original(messages, max_tokens, seed, deadline)
            recorded.append(([{"role": m.role, "content": m.content} for m in messages], max_tokens, seed, response))
            return response

        model.chat = chat  # an instance attribute: the provider looks it up on every call
    calls: list[dict] = []
    try:
        with Clock() as clock:
            results, _, _ = asyncio.run(run_tasks(compiled.plan, compiled.program, None, [task], ExecOptions(), None, calls))
    finally:
        for model in models:
            del model.chat
    if results[0].status != "ok":
        sys.exit(f"task {task.id} did not finish: {results[0]}")
    return clock, sum(call["completion_tokens"] for call in calls), recorded


def direct_side(llama, recorded) -> tuple[Clock, int, list[int]]:
    """The same calls made straight on a Llama object: clock, generated tokens, prompt tokens per call."""
    tokens, prompts = 0, []
    with Clock() as clock:
        for messages, max_tokens, seed, _ in recorded:
            response = llama.create_chat_completion(messages=messages, max_tokens=max_tokens, seed=seed)
            tokens += response["usage"]["completion_tokens"]
            prompts.append(response["usage"]["prompt_tokens"])
    return clock, tokens, prompts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()

    import llama_cpp

    from bamasc.plan.compile import compile_file
    from bamasc.runtime.execute import Task
    from bamasc.runtime.providers import make_provider
    from bamasc.runtime.providers.llamacpp_provider import llama_options

    compiled = compile_file(QUICKSTART)
    system = compiled.plan.systems[0]
    template = system.template(system.selection["selected"])
    shared = [make_provider(model).model for model in compiled.program.models.values()]  # loads the model
    llama = llama_cpp.Llama(model_path=shared[0].path, **llama_options(shared[0].n_ctx))
    tasks = [Task(f"t{i}", PROBLEMS[i % len(PROBLEMS)]) for i in range(args.tasks)]
    print(f"quickstart: template {template.name}; {args.tasks} tasks x {args.rounds} rounds; {os.cpu_count()} CPU cores; "
          f"llama-cpp-python {llama_cpp.__version__}; n_ctx {shared[0].n_ctx}")

    # An untimed pass warms both sides and records each task's calls for the direct side.
    calls_of = {task.id: bamasc_side(compiled, task, shared)[2] for task in tasks}
    direct_side(llama, calls_of[tasks[0].id])

    totals = {side: [0.0, 0.0, 0] for side in SIDES}  # wall s, CPU s, tokens
    ratios: dict[str, list[float]] = {"wall": [], "cpu": []}
    for round_ in range(args.rounds):
        for index, task in enumerate(tasks):
            order = SIDES if (round_ * len(tasks) + index) % 2 == 0 else SIDES[::-1]
            measured = {}
            for side in order:
                if side == "bamasc exec":
                    clock, tokens, calls = bamasc_side(compiled, task, shared)
                    prompts = [c[3]["usage"]["prompt_tokens"] for c in calls]
                else:
                    clock, tokens, prompts = direct_side(llama, calls_of[task.id])
                measured[side] = (clock, tokens, sorted(prompts))
                totals[side][0] += clock.wall
                totals[side][1] += clock.cpu
                totals[side][2] += tokens
            # The library's own chat handler counts the same prompt tokens as the provider.
            assert measured["bamasc exec"][2] == measured["direct"][2], measured
            ours, direct = measured["bamasc exec"], measured["direct"]
            ratios["wall"].append((ours[1] / ours[0].wall) / (direct[1] / direct[0].wall))
            ratios["cpu"].append((ours[1] / ours[0].cpu) / (direct[1] / direct[0].cpu))

    print()
    print("| side | generated tokens | wall s | tok/s (wall) | CPU s | tok/s (CPU) |")
    print("|---|---:|---:|---:|---:|---:|")
    for side in SIDES:
        wall, cpu, tokens = totals[side]
        print(f"| {side} | {tokens} | {wall:.1f} | {tokens / wall:.1f} | {cpu:.1f} | {tokens / cpu:.1f} |")
    print()
    for kind in ("wall", "cpu"):
        values = ratios[kind]
        quartiles = statistics.quantiles(values, n=4)
        ours, direct = totals["bamasc exec"], totals["direct"]
        index = 0 if kind == "wall" else 1
        whole = (ours[2] / ours[index]) / (direct[2] / direct[index])
        print(f"bamasc / direct, tok/s over {kind} time: whole run {whole:.3f}; per task median "
              f"{statistics.median(values):.3f} (quartiles {quartiles[0]:.3f} to {quartiles[2]:.3f})")
    met = statistics.median(ratios["wall"]) >= 0.95
    print(f"target: bamasc at least 0.95x direct's tok/s (median per task, wall): {'met' if met else 'not met'}")


if __name__ == "__main__":
    main()
