"""`bamasc serve`'s series beside the shared ones (http/metrics.py): its tasks, from the session it serves."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Any

from prometheus_client import Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from bamasc.http.metrics import Metrics

# Seconds a task takes, from a one-call answer to a long multi-agent run.
TASK_BUCKETS = (0.1, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0)


def serve_metrics(session: Any, responses: Counter[int]) -> Metrics:
    """The series of a server of `session` (open): each of its trace lines counted as it is written, and its tasks
    read at each scrape (`scrape` reads its ledger first)."""
    metrics = Metrics(session.models, responses=responses)
    durations = Histogram("bamasc_task_duration_seconds", "Seconds tasks ran, from their start to their answer.",
                          buckets=TASK_BUCKETS, registry=metrics.registry)

    def heard(kind: str, line: dict[str, Any]) -> None:
        metrics.line(kind, line)
        if kind == "task" and isinstance(line.get("elapsed_s"), (int, float)):
            durations.observe(line["elapsed_s"])

    def tasks() -> Iterable[Any]:
        ended = CounterMetricFamily("bamasc_tasks", "Tasks ended since the server started, by status.",
                                    labels=["status"])
        for status, count in sorted(session.statuses.items()):  # the statuses a task's result may have: a few
            ended.add_metric([status], count)
        yield ended
        yield GaugeMetricFamily("bamasc_tasks_in_flight", "Tasks running or waiting for a turn.",
                                value=session.in_flight)
        yield GaugeMetricFamily("bamasc_reservations_open", "Call attempts reserved and not yet settled.",
                                value=session.open_reservations)

    session.watchers.append(heard)
    metrics.collectors.append(tasks)
    return metrics


def scrape(metrics: Metrics, session: Any) -> bytes:
    """The text of `metrics` now, the session's total read first."""
    budget = session.budget
    metrics.ledger(budget.spent, budget.held, budget.total, budget.left)
    return metrics.text()
