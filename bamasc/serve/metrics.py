"""`GET /metrics`: the server's counters in the Prometheus text exposition format (version 0.0.4)."""

from __future__ import annotations

from collections import Counter
from typing import Any

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def metrics_text(session: Any, responses: Counter[int]) -> str:
    """Tasks by status, spend and the total, reservations open, rate-limit waits, and responses by status code."""
    budget = session.budget
    lines: list[str] = []

    def metric(name: str, kind: str, help_text: str, samples: list[tuple[str, float]]) -> None:
        lines.append(f"# HELP {name} {help_text}")
        lines.append(f"# TYPE {name} {kind}")
        for labels, value in samples:
            lines.append(f"{name}{labels} {_number(value)}")

    metric("bamasc_tasks_total", "counter", "Tasks ended since the server started, by status.",
           [(f'{{status="{status}"}}', count) for status, count in sorted(session.statuses.items())])
    metric("bamasc_tasks_in_flight", "gauge", "Tasks running or waiting for a turn.", [("", session.in_flight)])
    metric("bamasc_spent_microdollars", "gauge",
           "Micro-dollars charged in the trace: this server's tasks and every earlier run's.", [("", budget.spent)])
    metric("bamasc_spent_here_microdollars_total", "counter", "Micro-dollars charged by tasks since the server started.",
           [("", session.spent_here)])
    if budget.total is not None:
        metric("bamasc_budget_total_microdollars", "gauge", "The total budget (--total-budget).", [("", budget.total)])
        metric("bamasc_budget_held_microdollars", "gauge", "Worst cases held by tasks in flight.", [("", budget.held)])
        metric("bamasc_budget_left_microdollars", "gauge", "What is left of the total.", [("", budget.left or 0.0)])
    metric("bamasc_reservations_open", "gauge", "Call attempts reserved and not yet settled.",
           [("", session.open_reservations)])
    metric("bamasc_rate_waits_total", "counter", "Call attempts that waited for a provider key's rate limit.",
           [("", session.rate_waits)])
    metric("bamasc_rate_wait_seconds_total", "counter", "Seconds call attempts waited for rate limits.",
           [("", session.rate_wait_s)])
    metric("bamasc_http_responses_total", "counter", "HTTP responses, by status code.",
           [(f'{{code="{code}"}}', count) for code, count in sorted(responses.items())])
    return "\n".join(lines) + "\n"


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(round(float(value), 6))
