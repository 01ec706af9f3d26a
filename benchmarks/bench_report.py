"""How long the spend summary takes on a large trace: reading and folding it, summarising it (what every `/ui`
poll does after folding the new lines), and writing the whole report.

A synthetic exec-shaped trace: TASKS tasks of CALLS settled attempts each (a reserve and a call line per
attempt), one task in ten with a refused call, on three models and two templates.

    python benchmarks/bench_report.py [--tasks 100000] [--calls 3]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bamasc.http.page import report_html  # noqa: E402
from bamasc.http.spend import SpendBook, read_trace  # noqa: E402


def write_trace(path: str, tasks: int, calls: int) -> int:
    lines = 0
    with open(path, "w", encoding="utf-8") as handle:
        for task in range(tasks):
            task_id = f"task-{task}"
            for attempt in range(calls):
                node = f"w[{attempt}]@1.answer"
                model = ("fast", "mid", "slow")[(task + attempt) % 3]
                reservation = f"run.{task}.{attempt}"
                handle.write(json.dumps({"type": "reserve", "id": reservation, "task_id": task_id, "node": node,
                                         "model": model, "attempt": 1, "reserved": 400.0}) + "\n")
                handle.write(json.dumps({"type": "call", "id": reservation, "task_id": task_id, "node": node,
                                         "role": "W", "model": model, "prompt_tokens": 120, "completion_tokens": 80,
                                         "reserved": 400.0, "charged": 100.0 + task % 50, "latency_ms": 850.0,
                                         "attempt": 1, "clamped": False, "skipped": False, "error": None}) + "\n")
                lines += 2
            if task % 10 == 0:
                handle.write(json.dumps({"type": "call", "id": None, "task_id": task_id, "node": "w[9]@1.answer",
                                         "model": "slow", "reserved": 0.0, "charged": 0.0, "latency_ms": 0.0,
                                         "skipped": True, "error": "budget: 12 µ$ left"}) + "\n")
                lines += 1
            handle.write(json.dumps({"type": "task", "task_id": task_id, "status": "ok", "cost": 300.0,
                                     "budget": 2000, "bound": 1600, "template": ("chain", "vote")[task % 2],
                                     "elapsed_s": 2.5}) + "\n")
            lines += 1
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=100_000)
    parser.add_argument("--calls", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "trace.jsonl")
        lines = write_trace(path, args.tasks, args.calls)
        size = os.path.getsize(path)
        started = time.process_time()
        book = SpendBook()
        read_trace(book, path)
        folded = time.process_time() - started
        started = time.process_time()
        summary = book.summary()
        summarised = time.process_time() - started
        started = time.process_time()
        page = report_html(summary)
        rendered = time.process_time() - started
    print(f"{args.tasks} tasks, {lines} lines, {size / 1e6:.1f} MB of trace")
    print(f"read and fold: {folded:.2f} s CPU ({lines / folded:,.0f} lines/s)")
    print(f"summary: {summarised * 1000:.0f} ms CPU, {len(json.dumps(summary)) / 1e3:.0f} kB of JSON")
    print(f"page: {rendered * 1000:.0f} ms CPU, {len(page) / 1e6:.2f} MB of HTML")


if __name__ == "__main__":
    main()
