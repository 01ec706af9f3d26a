"""What a task run produces and how it stops: a call's output, the task's result, the errors that end it.

The refusals that stop a task early (a limit ran out) are the metering's: `bamasc.metering.refusals`."""

from __future__ import annotations

from bamasc.records import record


@record
class Output:
    """What one call produced, and who produced it (votes break ties by tier)."""

    text: str
    node: str
    tier: int


@record
class TaskResult:
    task_id: str
    template: str
    answer: str | None
    output: str | None  # the raw text the answer was extracted from
    cost: float  # µ$ charged in total
    budget: float
    bound: float  # the template's proven worst case
    overran: bool
    status: str  # ok | exhausted | failed | error | overbilled
    error: str | None
    calls: int
    exhausted: str | None = None  # what ran out when the task stopped early: "budget" or "deadline"
    elapsed_s: float = 0.0  # wall time of the task, from its first call's guard to its answer
    deadline_s: float | None = None
    latency_bound_s: float | None = None  # the template's proven worst-case latency
    task_tokens: int | None = None  # the task's length in tokens (runtime/tokens.py: task_tokens)
    assumed_task_tokens: int | None = None  # the `task_tokens` of the length class whose binding ran
    length_class: int | None = None  # the same: the class whose binding ran (None: the task did not start)
    fits_up_to: int | None = None  # `too_long`: the longest task a binding fits at its budget
    thread_id: str | None = None  # the thread the task is a turn of (runtime/threads.py)
    turn: int | None = None  # its turn's number in the thread, from 1

    @property
    def longer_than_assumed(self) -> bool:
        """The task is longer than the length class whose binding ran. Run by `workers.run_one`, its `bound`
        is the binding's bound at the task's own length (plan/lengths.py), so the cost never passes it."""
        return self.task_tokens is not None and self.assumed_task_tokens is not None and (
            self.task_tokens > self.assumed_task_tokens
        )


class TaskError(Exception):
    """The task cannot go on: a provider kept failing, or a plan card was malformed."""


class TaskOverbilled(Exception):
    """A provider billed more than the call's reservation allowed: the task stops at once."""
