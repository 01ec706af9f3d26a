"""What a run may be given: budgets and deadlines checked as numbers, and never looser than the plan's."""

from __future__ import annotations

import math

from bamasc.api.errors import BudgetError


def checked_budget(value: object, field: str, above: float | None = None) -> float:
    """`value` as µ$ when it is a number above 0, at most 1e12 µ$ and (given `above`) at most that; else BudgetError."""
    from bamasc.limits import MAX_BUDGET, written

    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise BudgetError(f"{field} must be a number of µ$, not {type(value).__name__}")
    try:
        amount = float(value)
    except OverflowError:
        amount = math.inf
    if not amount > 0:  # NaN too
        raise BudgetError(f"{field} must be above zero, not {value!r}")
    if not amount <= MAX_BUDGET:
        raise BudgetError(f"{field} must be at most {written(MAX_BUDGET)} µ$ (${MAX_BUDGET / 1e6:,.0f}), not {value!r}")
    if above is not None and amount > above * (1 + 1e-12):
        raise BudgetError(
            f"{field} of {amount:g} µ$ is above the plan's budget of {above:g} µ$: a run may tighten the budget "
            "it was compiled for, never loosen it (compile at the larger budget instead)"
        )
    return amount


def checked_deadline(value: object, field: str, compiled: float | None) -> float:
    """`value` in seconds when it is above 0, finite and no later than the plan's deadline; else BudgetError."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise BudgetError(f"{field} must be a number of seconds, not {type(value).__name__}")
    seconds = float(value)
    if not (seconds > 0 and math.isfinite(seconds)):
        raise BudgetError(f"{field} must be seconds above zero, not {value!r}")
    if compiled is not None and seconds > compiled * (1 + 1e-12):
        raise BudgetError(
            f"{field} of {seconds:g} s is later than the plan's deadline of {compiled:g} s: a run may tighten the "
            "deadline it was compiled for, never loosen it"
        )
    return seconds
