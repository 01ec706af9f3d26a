"""What a bind produces: a template's binding under a budget, its seats, and the error when it cannot be bound.

Its own module, apart from the binder, so that every binder (the exact one in
bind.py, the reference's seat model in paper.py, the greedy one in greedy.py) and every
reader of bindings uses these records without loading the MILP.
"""

from __future__ import annotations

from bamasc.ir.bounds import CallBound
from bamasc.ir.unroll import Unrolled
from bamasc.optimize.strategy import BindPath
from bamasc.records import record


class BindingError(Exception):
    """A template cannot be bound at all (too large to enumerate)."""


@record
class TemplateSeat:
    """One seat of a template binding, by name: the model that runs an instance of a slot."""

    slot: str
    instance: int
    model: str
    cap: int | None = None  # the output cap chosen for it when its role's `max_output` is a range (caps.py)


@record
class TemplateBinding:
    """A template's best binding under a budget, or why it has none."""

    template: str
    budget: float
    feasible: bool
    counts: tuple[tuple[str, int], ...]
    seats: tuple[TemplateSeat, ...]
    unrolled: Unrolled | None
    bounds: tuple[CallBound, ...]
    worst_case_cost: float  # exact, from the unrolled calls; math.inf when infeasible
    tiers: tuple[int, ...]  # tier levels of the pool, strongest first
    tier_seats: tuple[int, ...]  # seats per tier level
    quality: float
    solves: int  # ILP solves, cuts included
    cuts: int  # bindings cut off because their exact bound broke the budget
    cheapest_cost: float | None  # the cheapest exact bound of any binding, budget ignored
    binding_rows: tuple[str, ...]  # when infeasible: rules whose removal alone would admit a binding
    estimate: float | None = None  # --cost-model paper: the reference's per-seat estimate of the binding, µ$
    path: BindPath | None = None  # how the binder found it (shown by `bamasc explain`; not in the plan)
    objective_kind: str = "tiers"  # the system's `objective`: what `objective` ranks by

    @property
    def objective(self) -> tuple:
        """Larger is better: seats per tier strongest first, then quality, then lower cost; by value,
        quality (the sum of weight x quality), then lower cost."""
        if self.objective_kind == "value":
            return (round(self.quality, 9), -self.worst_case_cost)
        return (*self.tier_seats, round(self.quality, 9), -self.worst_case_cost)
