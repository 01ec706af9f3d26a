"""Rate limits: sustained throughput against a server that enforces them, and how many calls it refuses.

    python benchmarks/bench_ratelimit.py [--window 10] [--duration 30] [--rate 30] [--concurrency 32]

A local server speaking the OpenAI (or Anthropic) wire protocol, in a process
of its own, counts requests and tokens over a sliding window and answers 429
with Retry-After beyond either limit (tests/runtime/rate_server.py). bamasc
runs a dataset at it through the official SDK, one call per task, paced by
its rate limiter. A "minute" is scaled down to --window seconds on both
sides, so a run of --duration seconds spans several whole windows; the
limits are --rate requests (or the tokens of that many calls) per second.

Each row is one run:
  requests  the model declares requests_per_minute; tokens unlimited
  tokens    it declares tokens_per_minute; prompts of random length (100 to 550 tokens a call)
  both      it declares both, the token limit binding
  learned   it declares nothing: the limits come from the server's headers
  anthropic as `tokens`, over the Anthropic Messages protocol
  ray       as `tokens`, run by 4 Ray actors sharing one limiter actor (--engine ray; skipped without Ray)
  unpaced   for comparison: nothing declared and no headers sent, so only the 429s slow it down
Throughput is what the server accepted from the first acceptance to the last,
as a share of the binding limit; refused is the share of requests answered 429.
Targets: throughput >= 90% of the binding limit, refused < 1% (the paced rows).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

TASK_CHARS = (30, 480)  # a task's length, drawn uniformly, when tokens bind: 100 to 550 tokens a call

SOURCE = """
model remote {{
  provider = {provider}
  name     = "local-model"
  base_url = "{base_url}"
  api_key  = env("BENCH_KEY")
  price    {{ input = 0.15  output = 0.60 }}
  tier     = 1
  {rate_limit}
}}
role Solver {{
  max_output = 64
  prompt     = "Solve: {{{{task}}}}"
}}
topology single {{
  slot solver : Solver [1..1]
  flow {{ answer solver(task) }}
}}
system s {{ models = [remote] topologies = [single] budget = 100000 answer = text }}
"""


def serve(flavor: str, limits: dict, window_s: float):
    """The limited server in its own process; returns the process, its port, and the pipe that stops it."""
    import multiprocessing

    context = multiprocessing.get_context("fork")
    ours, theirs = context.Pipe()
    process = context.Process(target=_serve, args=(flavor, limits, window_s, theirs), daemon=True)
    process.start()
    return process, ours.recv(), ours


def _serve(flavor: str, limits: dict, window_s: float, pipe) -> None:
    from tests.runtime.rate_server import limited_server

    server, window = limited_server(flavor, window_s=window_s, **limits)
    pipe.send(server.base_url)
    pipe.recv()  # told to stop
    server.close()
    pipe.send((window.accepted, len(window.refused)))


def one_run(label: str, flavor: str, declared: dict, served: dict, binding: str, args, folder: str,
            engine: str = "local") -> dict:
    from bamasc.plan.compile import compile_file
    from bamasc.runtime.execute import ExecOptions, Task
    from bamasc.runtime.workers import run_tasks
    from bamasc.metering.limiter import limiter_for
    from bamasc.runtime.retry import RetryPolicy

    process, base_url, pipe = serve(flavor, served, args.window)
    names = {"requests": "requests_per_minute", "tokens": "tokens_per_minute"}
    block = " ".join(f"{names[k]} = {v}" for k, v in declared.items())
    path = os.path.join(folder, f"{label}.bam")
    with open(path, "w") as handle:
        handle.write(SOURCE.format(provider=flavor, base_url=base_url, rate_limit=f"rate_limit {{ {block} }}" if block else ""))
    compiled = compile_file(path)
    assert compiled.plan is not None, [d.message for d in compiled.diagnostics]
    rng = random.Random(1)
    count = int(args.rate * args.duration)  # the binding limit lets about --rate calls through a second
    width = TASK_CHARS if binding == "tokens" else (20, 20)
    tasks = [Task(str(i), "x" * rng.randint(*width)) for i in range(count)]
    options = ExecOptions(
        concurrency=args.concurrency,
        retry=RetryPolicy(max_attempts=4, base_delay=0.1, max_delay=args.window, jitter=0.5, timeout=30),
        limiter=limiter_for(compiled.program.models.values(), window_s=args.window),
    )
    calls: list[dict] = []
    started = time.perf_counter()
    if engine == "ray":
        from bamasc.runtime.ray_engine import run_on_ray

        results = []
        run_on_ray(compiled.plan, compiled.program, None, tasks, options, actors=4, calls=calls,
                   on_result=results.append)
    else:
        results, _, _ = asyncio.run(run_tasks(compiled.plan, compiled.program, None, tasks, options, calls=calls))
    wall = time.perf_counter() - started
    pipe.send("stop")
    accepted, refused = pipe.recv()
    process.join(10)
    first, last = accepted[0][0], accepted[-1][0]
    span = last - first
    requests_rate = (len(accepted) - 1) / span
    tokens_rate = sum(cost for _, cost in accepted[1:]) / span
    achieved = tokens_rate if binding == "tokens" else requests_rate
    limit = served[binding] / args.window
    waits = [call.get("rate_wait_s", 0.0) for call in calls]
    return {
        "label": label,
        "binding": binding,
        "limit": limit,
        "achieved": achieved,
        "share": achieved / limit,
        "requests": len(accepted) + refused,
        "refused": refused,
        "refused_share": refused / max(1, len(accepted) + refused),
        "ok": sum(r.status == "ok" for r in results),
        "tasks": len(results),
        "wall": wall,
        "mean_wait": sum(waits) / max(1, len(waits)),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--window", type=float, default=10.0, help="seconds in a scaled-down minute")
    parser.add_argument("--duration", type=float, default=30.0, help="seconds each run should take")
    parser.add_argument("--rate", type=float, default=30.0, help="the binding limit, in calls per second")
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--only", nargs="*", help="run only these rows")
    args = parser.parse_args()
    os.environ["BENCH_KEY"] = "bench"
    per_window = int(args.rate * args.window)
    mean_tokens = 8 + len("Solve: ") + sum(TASK_CHARS) / 2 + 64  # message overhead, prompt, max_tokens
    tokens = int(per_window * mean_tokens)
    rows = [
        ("requests", "openai", {"requests": per_window}, {"requests": per_window}, "requests"),
        ("tokens", "openai", {"tokens": tokens}, {"tokens": tokens}, "tokens"),
        ("both", "openai", {"requests": per_window * 2, "tokens": tokens},
         {"requests": per_window * 2, "tokens": tokens}, "tokens"),
        ("learned", "openai", {}, {"requests": per_window, "tokens": 10**9}, "requests"),
        ("anthropic", "anthropic", {"tokens": tokens}, {"tokens": tokens}, "tokens"),
        ("ray", "openai", {"tokens": tokens}, {"tokens": tokens}, "tokens"),
        ("unpaced", "openai", {}, {"requests": per_window, "headers": False}, "requests"),
    ]
    print(f"window {args.window:g} s, runs of about {args.duration:g} s, binding limit {args.rate:g} calls/s, "
          f"concurrency {args.concurrency}")
    print(f"{'row':<10} {'binding':<8} {'limit/s':>9} {'achieved/s':>11} {'share':>7} {'requests':>9} "
          f"{'refused':>8} {'ok':>9} {'wall s':>7} {'mean wait s':>11}")
    with tempfile.TemporaryDirectory() as folder:
        for label, flavor, declared, served, binding in rows:
            if args.only and label not in args.only:
                continue
            engine = "ray" if label == "ray" else "local"
            if engine == "ray" and not _ray_starts():
                continue
            row = one_run(label, flavor, declared, served, binding, args, folder, engine)
            print(f"{row['label']:<10} {row['binding']:<8} {row['limit']:>9.1f} {row['achieved']:>11.1f} "
                  f"{row['share']:>7.1%} {row['requests']:>9} {row['refused']:>3} ({row['refused_share']:.2%}) "
                  f"{row['ok']:>4}/{row['tasks']:<4} {row['wall']:>7.1f} {row['mean_wait']:>11.3f}", flush=True)


def _ray_starts() -> bool:
    from bamasc.runtime.ray_engine import RayUnavailable, start_ray

    try:
        start_ray(None, 4)
    except RayUnavailable as problem:
        print(f"ray       skipped: {problem}")
        return False
    return True


if __name__ == "__main__":
    main()
