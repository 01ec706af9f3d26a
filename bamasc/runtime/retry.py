"""When to try a failed provider call again, and how long to wait first.

This module only decides; the retry loop lives in the interpreter, because the
budget guard must reserve for every attempt separately.
"""

from __future__ import annotations

import math

from bamasc.records import record
from bamasc.runtime.providers.base import ProviderError

# Failures that say the provider itself keeps failing, not the request: a server error (5xx, 529), a timeout,
# a broken or refused connection. A call whose retries end on one of these goes to its model's fallbacks
# (runtime/fallbacks.py); a refused request (4xx), a 429 or a malformed reply does not.
PROVIDER_FAILURES = frozenset({"server", "timeout", "connection"})


def provider_failing(error: ProviderError) -> bool:
    """Whether `error`, the last of a call's attempts on one model, says that model's provider keeps failing."""
    return error.kind in PROVIDER_FAILURES


@record
class RetryPolicy:
    max_attempts: int = 4  # attempts in all, the first one included
    base_delay: float = 0.5  # seconds before the first retry; doubles with each further one
    max_delay: float = 20.0  # the longest any single wait may be, a server's Retry-After included
    jitter: float = 0.5  # share of each backoff drawn at random: 0 none, 1 full jitter
    timeout: float = 60.0  # seconds one attempt may take

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError("max_attempts must be at least 1")
        if not (0 <= self.base_delay <= self.max_delay) or math.isinf(self.max_delay):
            raise ValueError("delays must satisfy 0 <= base_delay <= max_delay < inf")
        if not 0 <= self.jitter <= 1:
            raise ValueError("jitter must be between 0 and 1")
        if not self.timeout > 0:
            raise ValueError("timeout must be positive")

    def should_retry(self, attempt: int, error: ProviderError) -> bool:
        """Whether to try again after `attempt` (1 for the first) failed with `error`."""
        return error.retryable and attempt < self.max_attempts

    def backoff(self, attempt: int) -> float:
        """The wait after failed attempt `attempt` before jitter: base_delay doubling, capped."""
        exponent = min(attempt - 1, 64)  # 2**64 * any sane base is far past any cap
        return min(self.max_delay, self.base_delay * 2.0**exponent)

    def delay(self, attempt: int, error: ProviderError, rng) -> float:
        """Seconds to wait after failed attempt `attempt`; `rng` is a `random.Random`.

        Proportional jitter: the wait is drawn from [backoff * (1 - jitter),
        backoff], so jitter=1 is full jitter. A Retry-After from the server is a
        floor on the wait, itself capped at max_delay.
        """
        if attempt < 1:
            raise ValueError("attempt counts from 1")
        backoff = self.backoff(attempt)
        wait = backoff * (1.0 - self.jitter * rng.random())
        if error.retry_after is not None:
            wait = max(wait, min(error.retry_after, self.max_delay))
        return wait
