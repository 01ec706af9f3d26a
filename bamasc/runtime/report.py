"""Text reports of runs: the per-call ledger of one task, and totals per role and per model."""

from __future__ import annotations

import statistics

from bamasc.plan.render import binding_text, text_table


def ledger_table(calls: list[dict]) -> str:
    rows = []
    for call in calls:
        if call["skipped"]:
            notes = ["skipped: deadline" if (call["error"] or "").startswith("deadline") else "skipped: budget"]
        else:
            notes = ["clamped"] * bool(call["clamped"]) + [call["error"] or ""]
        # A server's message may hold newlines or tabs; one row stays one line.
        note = " ".join("; ".join(n for n in notes if n).split())
        rows.append(
            [
                call["node"],
                call["model"],
                str(call["attempt"]),
                str(call["prompt_tokens"]),
                str(call["completion_tokens"]),
                f"{call['reserved']:.1f}",
                f"{call['charged']:.1f}",
                note,
            ]
        )
    return text_table(["call", "model", "try", "prompt tok", "output tok", "reserved µ$", "charged µ$", "note"], rows)


def summary_table(summary) -> str:
    blocks = []
    for title, table in (("role", summary.by_role), ("model", summary.by_model)):
        rows = [[key, str(int(v[0])), str(int(v[1])), str(int(v[2])), f"{v[3]:.1f}"] for key, v in sorted(table.items())]
        blocks.append(text_table([title, "calls", "prompt tok", "output tok", "µ$"], rows))
    return "\n\n".join(blocks)


def task_report(result, template, calls: list[dict]) -> str:
    lines = [
        f"template: {template.name} ({binding_text(template)})",
        f"bound: {template.worst_case_cost:.1f} µ$ of a {result.budget:g} µ$ budget",
    ]
    if result.deadline_s is not None:
        lines.append(f"latency bound: {result.latency_bound_s:.3f} s of a {result.deadline_s:g} s deadline")
    lines += [
        "",
        ledger_table(calls),
        "",
        f"spent: {result.cost:.1f} µ$ (bound {result.bound:.1f}, budget {result.budget:g}); status: {result.status}"
        + (f", the {result.exhausted} ran out" if result.exhausted else "")
        + (f" ({result.error})" if result.error else ""),
    ]
    if result.deadline_s is not None:
        lines.append(f"took: {result.elapsed_s:.3f} s (bound {result.latency_bound_s:.3f}, deadline {result.deadline_s:g})")
    lines.append(f"answer: {result.answer}")
    return "\n".join(lines)


def dataset_report(results, summary, skipped: list[str]) -> str:
    costs = [r.cost for r in results]
    statuses: dict[str, int] = {}
    for result in results:
        statuses[result.status] = statuses.get(result.status, 0) + 1
    if not results:
        return f"nothing to run: all {len(skipped)} tasks are finished in the trace" if skipped else "no tasks"
    lines = [
        f"tasks run: {len(results)}" + (f" (skipped {len(skipped)} already in the trace)" if skipped else ""),
        "status: " + ", ".join(f"{k} {v}" for k, v in sorted(statuses.items())),
    ]
    if costs:
        p95 = sorted(costs)[max(0, int(round(0.95 * len(costs))) - 1)]
        lines.append(
            f"cost µ$: mean {statistics.fmean(costs):.1f}, p95 {p95:.1f}, max {max(costs):.1f}; "
            f"over budget: {sum(r.overran for r in results)}"
        )
    deadlines = {r.deadline_s for r in results if r.deadline_s is not None}
    if deadlines:
        times = sorted(r.elapsed_s for r in results)
        p95 = times[max(0, int(round(0.95 * len(times))) - 1)]
        lines.append(
            f"time s: mean {statistics.fmean(times):.3f}, p95 {p95:.3f}, max {times[-1]:.3f}; "
            f"stopped by the deadline: {sum(r.exhausted == 'deadline' for r in results)}"
        )
    lines += ["", summary_table(summary)]
    return "\n".join(lines)
