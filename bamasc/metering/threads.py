"""A thread's budget: one more level above a task's, shared by the turns of one conversation.

A thread (a support ticket, a chat) is a sequence of turns, each a task,
that share one budget in µ$. Before a turn starts, its whole worst case
(what its budget guard may still charge: its bound at the turn's length,
the capped history included) is reserved from what the thread has left;
when it ends, the reservation is settled to what the turn charged. A turn
whose worst case does not fit is refused before anything is reserved for
it (`ThreadExhausted`, status `thread_exhausted`) and spends nothing. So the
sum of every turn's charges never passes the thread's budget, for every
provider that keeps the guard's promise.

`ThreadBudget` is the level's ledger (µ$: budget, spent, held), and
`ThreadLink` the same level as a link of the admission protocol
(metering/admission.py), admitting a `TaskHold` as `TotalLink` admits one
from a batch's total. Turns of one thread run one at a time (the runtime
orders them, runtime/threads.py), but the reservation does not rely on it:
a second turn reserving at once sees what the first holds.
"""

from __future__ import annotations

import math

from bamasc.metering.admission import Admission, TaskHold
from bamasc.metering.refusals import ThreadExhausted

# Floating sums of µ$: a worst case equal to what is left fits.
SLACK = 1e-9

MAX_THREAD_ID = 256  # characters of a thread's id


def thread_id_problem(value: object) -> str | None:
    """Why `value` cannot name a thread (None: it can). Any text is an id: it is a key, never a path."""
    if not isinstance(value, str):
        return f"thread_id must be a string, not {type(value).__name__}"
    if not value or not value.strip():
        return "thread_id must not be empty"
    if len(value) > MAX_THREAD_ID:
        return f"thread_id is {len(value)} characters; at most {MAX_THREAD_ID} are taken"
    if any(ord(char) < 32 or ord(char) == 127 for char in value):
        return "thread_id must not hold control characters"
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return "thread_id holds a lone surrogate, which UTF-8 cannot encode"
    return None


def thread_budget_problem(value: object) -> str | None:
    """Why `value` cannot be a thread's budget (None: it can, or it is None, no cap)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return f"thread_budget must be a number of µ$, not {type(value).__name__}"
    try:
        if not math.isfinite(value) or value <= 0:
            return f"thread_budget must be a finite number of µ$ above 0, not {value!r}"
    except OverflowError:
        return "thread_budget must be a finite number of µ$"
    return None


class ThreadBudget:
    """What is left of one thread's budget (µ$); None as the budget: the thread has no cap of its own."""

    def __init__(self, thread_id: str, budget: float | None, spent: float = 0.0) -> None:
        self.thread_id = thread_id
        self.budget = budget
        self.spent = spent  # settled charges of its turns, earlier runs' included (a crash's open holds in full)
        self.held = 0.0  # the worst case of the turn in flight

    @property
    def left(self) -> float | None:
        """µ$ a new turn may still reserve; None without a cap."""
        return None if self.budget is None else max(0.0, self.budget - self.spent - self.held)

    def reserve(self, amount: float) -> bool:
        """Hold `amount` for a turn about to start, if it fits in what is left (nothing is held otherwise)."""
        if self.budget is not None and amount > self.budget - self.spent - self.held + SLACK:
            return False
        self.held += amount
        return True

    def settle(self, reserved: float, charged: float) -> None:
        """A turn ended: its reservation is replaced by what it charged."""
        self.held = max(0.0, self.held - reserved)
        self.spent += charged


class ThreadLink(Admission):
    """A thread's budget as a link: a turn's `TaskHold` is admitted from what the thread has left (or refused
    with `ThreadExhausted`), and settled to what the turn charged (µ$; None keeps the hold in full)."""

    def __init__(self, ledger: ThreadBudget) -> None:
        self.ledger = ledger

    async def admit(self, hold: TaskHold) -> None:
        if not self.ledger.reserve(hold.amount):
            budget = self.ledger.budget
            raise ThreadExhausted(hold.task_id, (
                f"thread_exhausted: the thread has {self.ledger.left:.1f} µ$ left of its {budget:g} µ$ budget; "
                f"the turn's worst case is {hold.amount:.1f} µ$, so it was not run and spent nothing"))

    async def settle(self, hold: TaskHold, charged: float | None) -> None:
        self.ledger.settle(hold.amount, hold.amount if charged is None else charged)

    async def release(self, hold: TaskHold) -> None:
        self.ledger.settle(hold.amount, 0.0)


async def hold_for_turn(link: ThreadLink, task_id: str, rest: float, bound: float | None
                        ) -> tuple[TaskHold | None, str | None]:
    """(the turn's hold, None), or (None, why) when it does not fit: its worst case is its bound (at its length)
    or, without one, or past it, what its own budget leaves (`rest`), held from what the thread has left."""
    amount = rest if bound is None else min(rest, bound)
    hold = TaskHold(task_id, max(0.0, amount))
    try:
        await link.admit(hold)
    except ThreadExhausted as refusal:
        return None, refusal.error
    return hold, None
