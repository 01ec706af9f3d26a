"""The refusals of the metering: an attempt (or a forwarded call) that a limit will not admit.

One family for every surface. `exec` stops a task early with one, as its
`on_exhausted` says; the proxy answers 402 (a limit ran out) or 503 (the
ledger cannot be trusted). Each kind names its `limit`, which a task's result
records as what ran out (`exhausted`) and the proxy's error names; `error` is
why, in words (None: the limit says nothing more).
"""

from __future__ import annotations


class Refused(Exception):
    """An attempt was not admitted (metering/admission.py)."""

    limit: str

    def __init__(self, where: str, error: str | None = None):
        super().__init__(where)
        self.where = where  # the call's node, or the proxy's scope
        self.error = error


class BudgetExhausted(Refused):
    """The next call does not fit in what is left of the budget: money ran out."""

    limit = "budget"


class DeadlineReached(Refused):
    """The next attempt might not finish before the task's deadline: time, not money, ran out."""

    limit = "deadline"


class ShortOfTotal(Refused):
    """A total shared by many tasks or scopes has no room left for this one."""

    limit = "total"


class ScopeClosed(Refused):
    """A provider billed one of the scope's calls past its reservation: nothing more is reserved for it."""

    limit = "overbilled"


class LedgerLost(Refused):
    """The shared ledger cannot be reached or was lost: nothing is reserved until it is back."""

    limit = "ledger"


class ThreadExhausted(Refused):
    """A conversation's thread has less left of its budget than the next turn's worst case."""

    limit = "thread"
