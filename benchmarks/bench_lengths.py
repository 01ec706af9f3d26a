"""Length classes: one assumed task length against classes, on support tickets of 50 to 5,000 tokens.

    python benchmarks/bench_lengths.py [--budget 6000] [--baseline TREE]

examples/support.bam (a router, then billing, a refined engineer reply,
account or a generalist) runs the 200 tickets of benchmarks/data/tickets.jsonl
(made by `make_tickets` below: lengths log-uniform from 50 to 5,000 tokens,
written once and committed) on the offline `fake` provider in `verbose` mode:
every answer as long as its cap, the router taking the costliest branch, so
each task is charged its worst case. The system is compiled three ways at the
same budget: `task_tokens = 800` (as shipped), `task_tokens = 5000` (every
ticket within the assumption) and `task_tokens = [200, 800, 2000, 5000]`.
Per variant: tasks that ran, tasks too long, the mean bound the task lines
state, the mean tier of the models that answered (1 is the strongest), and
tasks charged above the bound their line states. `--baseline TREE` adds the
single-length run of another source tree (a checkout before bounds followed
the task's length).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TICKETS = os.path.join(ROOT, "benchmarks", "data", "tickets.jsonl")
VARIANTS = (("800 (as shipped)", "800"), ("5000", "5000"), ("[200, 800, 2000, 5000]", "[200, 800, 2000, 5000]"))
SENTENCES = (
    "I was charged twice for my subscription this month.",
    "The export to CSV stops at about ten thousand rows and the file is cut off.",
    "After the last update the desktop app crashes when I open the settings page.",
    "Please move my account to the new company email address.",
    "Our invoices show the old billing address even though we changed it in March.",
    "Two-factor sign-in codes arrive several minutes late, so they have expired by then.",
    "Here is the full log from the sync service, with timestamps:",
    "ERROR 2026-11-03T10:14:22Z sync worker 7 lost its lease on shard 12; retrying in 30 s.",
    "We need a refund for the annual plan we bought by mistake yesterday.",
    "The API returns 502 for every request to the reports endpoint since this morning.",
)


def make_tickets(count: int = 200, seed: int = 2026) -> list[dict]:
    """Support tickets whose lengths (UTF-8 bytes, the fake's tokens) are log-uniform from 50 to 5,000."""
    rng = random.Random(seed)
    tickets = []
    for i in range(count):
        size = int(math.exp(rng.uniform(math.log(50), math.log(5000))))
        words = []
        while len(" ".join(words)) < size:
            words.append(rng.choice(SENTENCES))
        tickets.append({"id": f"ticket-{i:03d}", "task": " ".join(words)[:size]})
    return tickets


def write_tickets(path: str = TICKETS) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as handle:
        handle.writelines(json.dumps(ticket) + "\n" for ticket in make_tickets())


def run(tree: str, task_tokens: str, budget: float, folder: str) -> dict:
    """One variant on `tree`'s bamasc: the figures of its trace."""
    with open(os.path.join(ROOT, "examples", "support.bam"), encoding="utf-8") as handle:
        source = handle.read()
    source = re.sub(r"task_tokens\s*=\s*\d+", f"task_tokens = {task_tokens}", source)
    source = re.sub(r"\n  budget\s*=\s*\d+", f"\n  budget = {budget:g}", source)
    bam = os.path.join(folder, "support.bam")
    with open(bam, "w", encoding="utf-8") as handle:
        handle.write(source)
    trace = os.path.join(folder, "trace.jsonl")
    if os.path.exists(trace):
        os.remove(trace)
    environment = dict(os.environ, PYTHONPATH=tree)
    subprocess.run([sys.executable, "-m", "bamasc", "exec", bam, "--fake", "verbose", "--dataset", TICKETS,
                    "--trace", trace, "--concurrency", "16"], cwd=tree, env=environment, check=False,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    tiers = {"gpt41": 1, "gpt41_mini": 2, "gpt41_nano": 3}
    tasks, calls = [], []
    with open(trace, encoding="utf-8") as handle:
        for line in map(json.loads, handle):
            if line["type"] == "task":
                tasks.append(line)
            elif line["type"] == "call" and line.get("charged", 0) > 0:
                calls.append(tiers[line["model"]])
    ran = [t for t in tasks if t["status"] not in ("too_long", "skipped_total", "skipped_budget")]
    return {
        "ran": len(ran),
        "ok": sum(t["status"] == "ok" for t in ran),
        "too_long": sum(t["status"] == "too_long" for t in tasks),
        "mean_bound": sum(t["bound"] for t in ran) / len(ran) if ran else float("nan"),
        "mean_cost": sum(t["cost"] for t in ran) / len(ran) if ran else float("nan"),
        "mean_tier": sum(calls) / len(calls) if calls else float("nan"),
        "over_bound": sum(t["cost"] > t["bound"] + 1e-6 for t in ran),
    }


def fitting_cpu(budget: float, folder: str, runs: int = 2000) -> list[tuple[str, float]]:
    """CPU µs per task to count nothing but choose its binding and price it at its length (plan/lengths.py)."""
    import time

    sys.path.insert(0, ROOT)
    from bamasc.plan.compile import compile_file
    from bamasc.plan.lengths import LengthFit

    figures = []
    lengths = [t["task"] for t in make_tickets()]
    for label, written in VARIANTS:
        run_folder = os.path.join(folder, "cpu")
        os.makedirs(run_folder, exist_ok=True)
        with open(os.path.join(ROOT, "examples", "support.bam"), encoding="utf-8") as handle:
            source = re.sub(r"task_tokens\s*=\s*\d+", f"task_tokens = {written}", handle.read())
        path = os.path.join(run_folder, "support.bam")
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(re.sub(r"\n  budget\s*=\s*\d+", f"\n  budget = {budget:g}", source))
        compiled = compile_file(path)
        system = compiled.plan.systems[0]
        fit = LengthFit(compiled.program, system)
        names = [template.name for template in system.templates]
        start = time.process_time()
        for i in range(runs):
            fit.choose(names, len(lengths[i % len(lengths)]) + i // len(lengths), budget)  # no two alike
        figures.append((label, (time.process_time() - start) / runs * 1e6))
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", type=float, default=6000.0)
    parser.add_argument("--baseline", help="another source tree: its run of the shipped task_tokens = 800")
    parser.add_argument("--write-tickets", action="store_true", help="write benchmarks/data/tickets.jsonl again")
    args = parser.parse_args()
    if args.write_tickets or not os.path.exists(TICKETS):
        write_tickets()
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        if args.baseline:
            rows.append(("800, tree before", run(os.path.abspath(args.baseline), "800", args.budget, folder)))
        for label, written in VARIANTS:
            rows.append((label, run(ROOT, written, args.budget, folder)))
    print(f"200 tickets, 50 to 5,000 tokens; budget {args.budget:g} µ$ per task; fake provider, verbose\n")
    print("| task_tokens | ran | ok | too_long | mean bound µ$ | mean cost µ$ | mean tier answering | charged above its bound |")
    print("|---|---|---|---|---|---|---|---|")
    for label, r in rows:
        print(f"| {label} | {r['ran']} | {r['ok']} | {r['too_long']} | {r['mean_bound']:.1f} | {r['mean_cost']:.1f} | "
              f"{r['mean_tier']:.2f} | {r['over_bound']} |")
    with tempfile.TemporaryDirectory() as folder:
        figures = fitting_cpu(args.budget, folder)
    print("\n| task_tokens | CPU µs per task to choose its binding and price it at its length |\n|---|---|")
    for label, micros in figures:
        print(f"| {label} | {micros:.0f} |")


if __name__ == "__main__":
    main()
