"""A bound template's exact worst case at a task's real length, and the length class each task runs in.

Once a template is bound, its worst case depends on the task only through the
task's length: every call's prompt bound is its role's text, its framing, the
output caps it reads and, where it reads the task, the task's tokens
(ir/bounds.py). `LengthFit.bound_at` recomputes it from the program and the
plan's binding at any length, as the compiler computed the recorded bound at
the class's own `task_tokens` (where the two are equal). It is a function of
the length, not a constant and a slope: a route's costliest branch at one
length need not be the costliest at another, and a model's price tiers change
its rate past a prompt length.

With `task_tokens = [256, 1024, 4096]` the plan holds every template bound
once per length class. A task of length L takes, of its template's bindings
whose bound at L fits the budget, the best by the binder's own order (a
shorter class's binding is the binder's best under a looser constraint, so
it is usually that one). A template given (`--template`) or picked by a
policy keeps to its own bindings; a system that selects by a rule
(`strongest`, `cheapest`) applies the rule to every template's bindings that
fit at L (docs/language.md, "Task length").
When none fits at L but one fits at its own class's length, the task is too
long for the budget: it ends `too_long`, with the longest length that would
fit. When none fits even at its own length (a budget tightened below the
compiled one, or the paper's cost model), the length is not why: the
selected template's first class binding runs, as without classes, and the
budget guard holds it.
"""

from __future__ import annotations

from dataclasses import dataclass

from bamasc.limits import MAX_TOKENS
from bamasc.records import replace

TOLERANCE = 1e-9  # relative: a bound this close above the budget fits it (the compiler's own check)


@dataclass(frozen=True)
class Fitted:
    """The template a task runs: its binding of `length_class`, its `worst_case_cost` the bound at `tokens`."""

    template: object  # a plan.schema.TemplatePlan
    tokens: int  # the task's length
    length_class: int  # the task_tokens of the class whose binding runs


@dataclass(frozen=True)
class TooLong:
    """No binding of the task's template fits the budget at its length."""

    tokens: int  # the task's length
    fits_up_to: int  # the longest task any binding fits at this budget (0: none)
    budget: float

    @property
    def reason(self) -> str:
        most = (f"tasks up to {self.fits_up_to} tokens fit" if self.fits_up_to
                else "no task fits, however short")
        return (f"too long: the task is {self.tokens} tokens, and no binding's bound at that length fits the "
                f"{self.budget:g} µ$ budget ({most}); add a longer length class to task_tokens or raise the budget")


class LengthFit:
    """The length classes of one system of a plan, and each binding's bound at any task length."""

    def __init__(self, program, system) -> None:
        self.program = program
        self.classes = [(system.task_tokens, system.templates)]
        self.classes += [(c.task_tokens, c.templates) for c in system.length_classes or ()]
        self._unrolled: dict[tuple, object] = {}
        self._bounds: dict[tuple, tuple[float, list, tuple, object]] = {}

    def bound_at(self, template, tokens: int) -> float:
        """`template`'s worst case (µ$) when the task is `tokens` long."""
        return self._at(template, tokens)[0]

    def at_length(self, template, tokens: int):
        """`template` as a task `tokens` long runs it: its worst case, and each route's costliest branch, at that
        length (the dry run's routers take that branch, so its charge reaches the bound)."""
        total, amounts, choices = self._at(template, tokens)
        if not template.decisions:
            return replace(template, worst_case_cost=total)
        from bamasc.plan.routes import plan_decisions

        return replace(template, worst_case_cost=total, decisions=plan_decisions(template.nodes, choices, amounts))

    def _at(self, template, tokens: int) -> tuple[float, list, tuple]:
        from bamasc.ir.alternatives import worst_case
        from bamasc.ir.bounds import call_bounds, cost_amounts
        from bamasc.ir.tokens import seat_models
        from bamasc.ir.unroll import unroll

        key = (id(template), tokens)
        if key not in self._bounds or self._bounds[key][3] is not template:  # an id reused by a new object
            shape = (template.name, tuple(sorted(template.counts.items())))
            if shape not in self._unrolled:
                self._unrolled[shape] = unroll(self.program.topologies[template.name], template.counts)
            unrolled = self._unrolled[shape]
            model_of = seat_models(self.program.models, template.binding)  # each at its chosen output cap
            amounts = cost_amounts(unrolled.calls, call_bounds(unrolled.calls, model_of, self.program.roles, tokens))
            if len(self._bounds) > 4096:  # tasks of many lengths: keep the memory bounded
                self._bounds.clear()
            self._bounds[key] = (worst_case(amounts, unrolled.choices).total, amounts, unrolled.choices, template)
        return self._bounds[key][:3]

    def fit(self, name: str, tokens: int, budget: float) -> Fitted | TooLong | None:
        """Template `name`'s binding a task `tokens` long runs: see `choose`."""
        return self.choose([name], tokens, budget)

    def choose(self, names, tokens: int, budget: float, rule: str = "strongest") -> Fitted | TooLong | None:
        """Of the bindings of templates `names` in every class, the one a task `tokens` long runs: of those whose
        bound at that length fits the budget, the best by the binder's order (`rule` "strongest"), or the one of
        the lowest bound ("cheapest"). TooLong when none fits but one would at its own class's length; None when
        no template of `names` has a binding in any class."""
        bound = [(length, t) for length, templates in self.classes for t in templates if t.name in names and t.feasible]
        if not bound:
            return None
        found = self._cheapest(bound, tokens, budget) if rule == "cheapest" else self._strongest(bound, tokens, budget)
        if found is not None:
            length, template = found
            return Fitted(self.at_length(template, tokens), tokens, length)
        if not any(self.bound_at(t, length) <= budget * (1 + TOLERANCE) for length, t in bound):
            length, selected = next(((length, t) for length, t in bound if t.name == names[0]), bound[0])
            return Fitted(self.at_length(selected, tokens), tokens, length)
        return TooLong(tokens, max(self._longest(t, budget) for _, t in bound), budget)

    def _fits(self, template, tokens: int, budget: float) -> bool:
        return self.bound_at(template, tokens) <= budget * (1 + TOLERANCE)

    def _strongest(self, bound, tokens: int, budget: float):
        """(class, template) of the best binding that fits, by the binder's order; None when none fits. Bindings
        are tried strongest first and only those as strong as the first that fits are priced: a task's bound at
        its length costs one evaluation of the flow's bounds (tens of µs), so most tasks price one or two."""
        ranked = sorted(bound, key=lambda pair: (_rank(pair[1]), -pair[0]), reverse=True)
        best = None
        for length, template in ranked:
            if best is not None and _rank(template) < _rank(best[1]):
                break
            if self._fits(template, tokens, budget) and (
                    best is None or self.bound_at(template, tokens) < self.bound_at(best[1], tokens)):
                best = (length, template)
        return best

    def _cheapest(self, bound, tokens: int, budget: float):
        """(class, template) of the binding of the lowest bound at this length, if it fits; None otherwise."""
        length, template = min(bound, key=lambda pair: (self.bound_at(pair[1], tokens), pair[0], pair[1].name))
        return (length, template) if self._fits(template, tokens, budget) else None

    def _longest(self, template, budget: float) -> int:
        """The longest task `template` fits under `budget` (its bound grows with the length), 0 for none."""
        if self.bound_at(template, 0) > budget * (1 + TOLERANCE):
            return 0
        low, high = 0, MAX_TOKENS
        while low < high:
            middle = (low + high + 1) // 2
            if self.bound_at(template, middle) <= budget * (1 + TOLERANCE):
                low = middle
            else:
                high = middle - 1
        return low


def _rank(template) -> tuple:
    """The binder's order on bindings (optimize/binding.py: TemplateBinding.objective) before the cost, which
    breaks its ties: seats per tier strongest first, then quality; by value (`objective = value`), the sum of
    weight x quality."""
    objective = template.objective
    if objective.get("kind") == "value":
        return (round(objective["quality"], 9),)
    return (*objective["tier_seats"], round(objective["quality"], 9))
