"""Binding models to slots: the seat ILP over plain arrays and its HiGHS solve.

Names load lazily so that importing the package does not import highspy.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from bamasc.optimize.brute import brute_force
    from bamasc.optimize.ilp import (
        Binding,
        Explanation,
        InexactWeights,
        Relaxation,
        RequireRow,
        SeatIlp,
        SeatProblem,
        SolverError,
        cheapest_cost,
        cheapest_seats,
        evaluate,
        explain,
        formulate,
        solve,
        tier_weights,
        violations,
    )

_LAZY = {
    "Binding": "ilp",
    "Explanation": "ilp",
    "InexactWeights": "ilp",
    "Relaxation": "ilp",
    "RequireRow": "ilp",
    "SeatIlp": "ilp",
    "SeatProblem": "ilp",
    "SolverError": "ilp",
    "cheapest_cost": "ilp",
    "cheapest_seats": "ilp",
    "evaluate": "ilp",
    "explain": "ilp",
    "formulate": "ilp",
    "solve": "ilp",
    "tier_weights": "ilp",
    "violations": "ilp",
    "brute_force": "brute",
}

__all__ = [
    "Binding",
    "Explanation",
    "InexactWeights",
    "Relaxation",
    "RequireRow",
    "SeatIlp",
    "SeatProblem",
    "SolverError",
    "brute_force",
    "cheapest_cost",
    "cheapest_seats",
    "evaluate",
    "explain",
    "formulate",
    "solve",
    "tier_weights",
    "violations",
]


def __getattr__(name: str):
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(f"{__name__}.{_LAZY[name]}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_LAZY])
