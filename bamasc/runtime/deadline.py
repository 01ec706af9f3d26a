"""The deadline guard: an attempt starts only if its worst case fits in the time the task has left.

As the budget guard holds money, this holds time. Before every attempt it
compares the task's elapsed time plus the attempt's worst case (its model's
declared first-token time plus per-token time on every token the attempt may
emit) with the deadline; an attempt that might pass it is not made, and the
task stops as when the budget runs out. An attempt that is made gets the
time left as its timeout when that is shorter than the retry policy's, a
retry whose backoff would leave too little time is not waited for, and a
wait for a provider's rate limit ends when the attempt could no longer
finish in time (`wait_left`). So a task never runs past its deadline by
more than the time between two checks (the provider's return and the next
prompt's rendering), whatever its models and their servers do.

A run's attempts reach the clock as one link of their admission
(metering/admission.py, `DeadlineLink`); its refusal is `DeadlineReached`,
which is not a `BudgetExhausted`: time and money are different limits.
"""

from __future__ import annotations

import time

from bamasc.ir.latency import attempt_latency_s


class DeadlineGuard:
    """One task's clock. `deadline` in seconds, or None for no deadline; `timeout` is the retry policy's."""

    def __init__(self, deadline: float | None, timeout: float, clock=time.perf_counter):
        self.deadline = deadline
        self.timeout = timeout
        self.clock = clock
        self.started = clock()

    def start(self, at: float | None = None) -> None:
        """Start the task's time now, or at `at` (on this guard's clock) when it began waiting earlier."""
        self.started = self.clock() if at is None else at

    @property
    def elapsed(self) -> float:
        return self.clock() - self.started

    def left(self) -> float | None:
        """Seconds until the deadline (None without one)."""
        return None if self.deadline is None else self.deadline - self.elapsed

    def timeout_for(self, latency, max_tokens: int, wait: float = 0.0) -> float | None:
        """The timeout of an attempt that may emit `max_tokens` after `wait` seconds: the policy's, or the
        time left if shorter. None when its worst case might pass the deadline: do not make it.
        Check rejects a deadline on a model without a declared latency (BAM408)."""
        left = self.left()
        if left is None:
            return self.timeout
        if wait + attempt_latency_s(latency, max_tokens) > left:
            return None
        return min(self.timeout, left - wait)

    def wait_left(self, latency, max_tokens: int) -> float | None:
        """The longest an attempt that may emit `max_tokens` may wait before it starts (for a provider's
        rate limit) and still finish by the deadline; None without one."""
        left = self.left()
        return None if left is None else left - attempt_latency_s(latency, max_tokens)

    def refusal(self, latency, max_tokens: int) -> str:
        """Why an attempt was not made, as the trace records it."""
        left = max(0.0, self.left())
        worst = attempt_latency_s(latency, max_tokens)
        return f"deadline: {left:.3f} s left of {self.deadline:g} s, and the attempt may take {worst:.3f} s"
