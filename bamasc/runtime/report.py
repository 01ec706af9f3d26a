"""Text reports of runs: the per-call ledger of one task, and totals per role and per model."""

from __future__ import annotations

from bamasc.plan.render import binding_text, text_table
from bamasc.words import counted


def ledger_table(calls: list[dict]) -> str:
    """One row per attempt, and per tool call (runtime/tool_loop.py): its round, its tool's name and its price."""
    rows = []
    for call in calls:
        if call.get("tool"):
            notes = [f"round {call['round']}", "result cut" if call.get("truncated") else "", call["error"] or ""]
            rows.append([call["node"], f"tool {call['name']}", "", "", "", f"{call['reserved']:.1f}",
                         f"{call['charged']:.1f}", " ".join("; ".join(n for n in notes if n).split())])
            continue
        if call["skipped"]:
            notes = ["skipped: deadline" if (call["error"] or "").startswith("deadline") else "skipped: budget"]
        else:
            notes = ["clamped"] * bool(call["clamped"]) + [call["error"] or ""]
        if call.get("round") is not None:
            notes.insert(0, f"round {call['round']}")
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
        f"bound: {result.bound:.1f} µ$ of a {result.budget:g} µ$ budget",
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
    if result.longer_than_assumed:
        lines.append(f"note: the task is {result.task_tokens} tokens, longer than its length class "
                     f"({result.length_class} tokens): its bound is taken at its own length")
    lines.append(f"answer: {result.answer}")
    return "\n".join(lines)


def dataset_report(totals, summary, skipped: int) -> str:
    """The figures of a dataset run from its running totals (runtime/batch.py: BatchTotals)."""
    if not totals.ended:
        return f"nothing to run: all {skipped} tasks are finished in the trace" if skipped else "no tasks"
    lines = [
        f"tasks run: {totals.tasks}" + (f" (skipped {skipped} already in the trace)" if skipped else ""),
    ]
    if totals.skipped_total:
        lines.append(f"skipped for the total budget: {totals.skipped_total} (--resume runs them again)")
    if totals.skipped_budget:
        lines.append(f"skipped for their own budget, spent by earlier runs: {totals.skipped_budget} "
                     "(--resume at a larger --budget runs them again)")
    if totals.interrupted:
        lines.append(f"interrupted, their runner gone with them in flight: {totals.interrupted} "
                     "(their open reservations count in full; --resume runs them again)")
    if totals.tasks:
        costs = totals.costs
        lines += [
            "status: " + ", ".join(f"{k} {v}" for k, v in sorted(totals.statuses.items())),
            f"cost µ$: mean {costs.mean:.1f}, p95 {costs.percentile(0.95):.1f}, max {costs.largest:.1f}; "
            f"over budget: {totals.overran}",
        ]
    if totals.too_long:
        lines.append(f"too long for the budget at any length class: {totals.too_long} "
                     "(each task line says the longest task that fits)")
    if len(totals.classes) > 1:
        lines.append("length classes: " + ", ".join(f"{tokens} tokens: {counted(n, 'task')}"
                                                    for tokens, n in sorted(totals.classes.items())))
    if totals.deadlined:
        times = totals.times
        lines.append(
            f"time s: mean {times.mean:.3f}, p95 {times.percentile(0.95):.3f}, max {times.largest:.3f}; "
            f"stopped by the deadline: {totals.stopped_by_deadline}"
        )
    lines += ["", summary_table(summary)]
    return "\n".join(lines)
