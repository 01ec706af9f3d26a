"""Policy benchmarks: training throughput, end-to-end `bamasc train`, and selection latency.

    python benchmarks/bench_policy.py [--rows 10000] [--skip-minilm]

(a) Throughput of the jitted train step (samples per second, after compile)
    on 10,000 offline rows, at the default batch size and two larger ones.
    Target: >= 50,000 samples/s.
(b) End-to-end `bamasc train` on the same rows (a fresh process: start-up,
    reading, embedding, training until early stopping, held-out report, checkpoint), with the
    hashed-words embedding and with MiniLM, cold and warm embedding cache.
(c) Selection latency per task, warm (model loaded and compiled): MiniLM
    embedding of a task not seen before plus the policy's forward pass, and
    the same for a task whose embedding is cached. Target: < 20 ms per task.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

TEMPLATES = ("linear", "star", "feedback", "planner")
BUDGETS = (500.0, 875.0, 1625.0)
GSM8K = os.path.join(ROOT, "examples", "gsm8k.bam")
NOUNS = ["apples", "marbles", "strings", "lists", "essays", "cities", "tickets", "matrices", "poems", "coins"]


def task_text(rng: random.Random) -> tuple[str, str]:
    kind = rng.choice(["code", "math", "essay"])
    a, b = rng.sample(NOUNS, 2)
    n, m = rng.randint(2, 999), rng.randint(2, 999)
    if kind == "code":
        return kind, f"Write a python function that merges {n} {a} with {m} {b} and returns them sorted."
    if kind == "math":
        return kind, f"A shop has {n} {a} and sells {m} {b}. How many {a} are left? Show the arithmetic."
    return kind, f"Write a short essay of {n} words about {a} and {b}, with a clear thesis."


def offline_rows(count: int, seed: int = 0) -> list[dict]:
    """About `count` rows: every template at every budget for count / 12 tasks."""
    rng = random.Random(seed)
    best = {"code": "linear", "math": "star", "essay": "feedback"}
    rows = []
    for i in range(-(-count // (len(TEMPLATES) * len(BUDGETS)))):
        kind, text = task_text(rng)
        for budget in BUDGETS:
            feasible = [t for t in TEMPLATES if not (t == "planner" and budget < 1488)]
            for template in TEMPLATES:
                ok = template in feasible
                success = ok and (template == best[kind] or rng.random() < 0.3)
                cost = budget * rng.uniform(0.3, 0.95) if ok else 0.0
                rows.append({"task_id": f"t{i}", "task": text, "budget": budget, "template": template,
                             "success": success, "cost": round(cost, 3), "feasible": ok,
                             **({"behavior_prob": 1 / len(feasible)} if ok else {})})
    return rows[:count] if len(rows) > count else rows


def throughput(rows: list[dict], batch_sizes, epochs: int = 5) -> list[tuple[int, float]]:
    import jax
    import jax.numpy as jnp
    import numpy as np

    from bamasc.policy.data import _row
    from bamasc.policy.features import HashedWords
    from bamasc.policy.train import Reward, TrainConfig, _take, build_table, create_state, sample_batches, train_step

    table = build_table([_row(r, "bench") for r in rows], TEMPLATES, Reward())
    data = sample_batches(table, HashedWords().encode(table.texts), 2000.0, np.arange(len(table.sample_action)))
    device = jax.device_put(data)
    count = len(data["action"])
    results = []
    for size in batch_sizes:
        state = create_state(len(TEMPLATES), TrainConfig(batch_size=size), 384)
        steps = count // size
        batches = [jnp.asarray(np.arange(i * size, (i + 1) * size)) for i in range(steps)]
        state, metrics = train_step(state, _take(device, batches[0]), jnp.float32(0.05))  # compile
        jax.block_until_ready(metrics)
        rates = []
        for _ in range(epochs):
            started = time.perf_counter()
            for indices in batches:
                state, metrics = train_step(state, _take(device, indices), jnp.float32(0.05))
            jax.block_until_ready(state.params)
            rates.append(steps * size / (time.perf_counter() - started))
        results.append((size, statistics.median(rates)))
    return results


def end_to_end(folder: str, rows_path: str, embedding: str, cache: str) -> tuple[float, str]:
    command = [sys.executable, "-m", "bamasc", "train", GSM8K, "--data", rows_path, "-o",
               os.path.join(folder, f"policy-{embedding}.msgpack"), "--embedding", embedding, "--cache", cache]
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")})
    elapsed = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(done.stderr)
    return elapsed, done.stdout.splitlines()[0]


def selection_latency(checkpoint: str, cache: str, tasks: int = 100) -> tuple[list[float], list[float]]:
    from bamasc.policy.select import PolicySelector

    selector = PolicySelector.load(checkpoint, TEMPLATES, cache)
    feasible = dict.fromkeys(TEMPLATES, True)
    rng = random.Random(7)
    for _ in range(10):  # load, and compile the shapes one task at a time takes
        selector.choose([task_text(rng)[1] + f" (warm-up {rng.random():.6f})"], 1625.0, feasible)
    fresh, cached = [], []
    for _ in range(tasks):
        text = task_text(rng)[1] + f" (variant {rng.random():.6f})"
        started = time.perf_counter()
        selector.choose([text], 1625.0, feasible)
        fresh.append((time.perf_counter() - started) * 1000)
        started = time.perf_counter()
        selector.choose([text], 1625.0, feasible)
        cached.append((time.perf_counter() - started) * 1000)
    return fresh, cached


def percentile(values, share):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10_000)
    parser.add_argument("--skip-minilm", action="store_true", help="only the hashed embedding (no model package)")
    args = parser.parse_args()
    rows = offline_rows(args.rows)
    print(f"{len(rows)} offline rows, {len({r['task_id'] for r in rows})} tasks, {len(TEMPLATES)} templates\n")

    print("(a) jitted train step, after compile")
    print("| batch size | samples/s (median of 5 epochs) |\n|---:|---:|")
    for size, rate in throughput(rows, (64, 256, 1024)):
        print(f"| {size} | {rate:,.0f} |")

    with tempfile.TemporaryDirectory() as folder:
        rows_path = os.path.join(folder, "offline.jsonl")
        with open(rows_path, "w", encoding="utf-8") as handle:
            handle.writelines(json.dumps(row) + "\n" for row in rows)
        cache = os.path.join(folder, "cache")
        print("\n(b) end-to-end `bamasc train` (fresh process, default settings, early stopping)")
        print("| embedding | wall s | first line of its output |\n|---|---:|---|")
        runs = [("hashed", "hashed")]
        if not args.skip_minilm:
            runs += [("minilm", "minilm, cold cache"), ("minilm", "minilm, warm cache")]
        for embedding, label in runs:
            elapsed, line = end_to_end(folder, rows_path, embedding, cache)
            print(f"| {label} | {elapsed:.1f} | {line} |")
        if not args.skip_minilm:
            fresh, cached = selection_latency(os.path.join(folder, "policy-minilm.msgpack"), cache)
            print("\n(c) selection per task, warm (100 tasks)")
            print("| task | median ms | p95 ms | max ms |\n|---|---:|---:|---:|")
            for label, values in (("not seen before (MiniLM + forward)", fresh), ("embedding cached (forward)", cached)):
                print(f"| {label} | {statistics.median(values):.2f} | {percentile(values, 0.95):.2f} | {max(values):.2f} |")


if __name__ == "__main__":
    main()
