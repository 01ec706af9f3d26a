"""Per-task budgets chosen online to get the most expected reward out of a batch's total budget.

Each task may run at any of the system's `budgets`. With an estimate, per
task and budget, of the chance of success p and the expected charge c (from
an offline table: `bamasc collect` rows of the template that runs at that
budget, the task's own row when the table has it, else the mean over the
table's tasks), the allocator gives a task the budget maximising
p - λ·c. The price λ of a µ$ is the dual variable of the total: it starts
where the table's tasks, scaled to the batch, would spend the total, and
after each task moves by a dual-descent step towards spending what is left
evenly over the tasks left (Balseiro, Lu and Mirrokni's dual mirror descent,
with a Euclidean step). The ledger's reservations keep the total a hard cap
whatever λ does; λ only decides how the total is shared.

The baseline is the uniform split: every task at the largest budget within
total / tasks.
"""

from __future__ import annotations

from collections import defaultdict

# The dual step, in units of (per-task target spend)^-1: small enough not to swing on one task's cost.
STEP = 0.05


class Estimates:
    """p(success) and expected charge per task and budget, from offline rows (task_id, budget, template, success, cost)."""

    def __init__(self, rows, templates: dict[float, str | None]) -> None:
        """`templates[b]` is the template that runs at budget b (None: the best of the table's templates there)."""
        self.budgets = sorted(templates)
        own: dict[tuple[str, float], tuple[float, float]] = {}
        sums: dict[float, list[float]] = defaultdict(lambda: [0.0, 0.0, 0])
        best: dict[tuple[str, float], tuple[float, float]] = {}
        for task_id, budget, template, success, cost in rows:
            budget = float(budget)
            if budget not in templates:
                continue
            if templates[budget] is None:
                key = (task_id, budget)
                best[key] = max(best.get(key, (0.0, 0.0)), (float(success), -float(cost)))
                continue
            if template != templates[budget]:
                continue
            own[(task_id, budget)] = (float(success), float(cost))
        for (task_id, budget), (success, negative_cost) in best.items():
            own[(task_id, budget)] = (success, -negative_cost)
        for (_, budget), (success, cost) in own.items():
            row = sums[budget]
            row[0] += success
            row[1] += cost
            row[2] += 1
        self.own = own
        self.mean = {b: (row[0] / row[2], row[1] / row[2]) for b, row in sums.items() if row[2]}
        self.budgets = [b for b in self.budgets if b in self.mean]
        self.tasks = sorted({task_id for task_id, _ in own})

    def at(self, task_id: str, budget: float) -> tuple[float, float]:
        """(p(success), expected charge) of the task at the budget."""
        return self.own.get((task_id, budget), self.mean[budget])


class DualAllocator:
    """Picks each task's per-task budget online under a total, by a price λ on µ$ (see the module's docstring)."""

    def __init__(self, estimates: Estimates, total: float, tasks: int) -> None:
        if not estimates.budgets:
            raise ValueError("the offline table has no row of a template that runs at any of the system's budgets")
        self.estimates = estimates
        self.total = total
        self.tasks = max(1, tasks)
        self.target = total / self.tasks  # the even share of the total per task
        self.committed = 0.0  # expected charges of the tasks given a budget, corrected by actual ones as they end
        self.left = self.tasks
        self.start_price = self.price = _starting_price(estimates, self.target)
        self.chosen: dict[float, int] = defaultdict(int)

    def choose(self, task_id: str) -> float:
        """The budget this task runs at; the price moves towards spending the rest evenly."""
        budget = self.best(task_id, self.price)
        expected = self.estimates.at(task_id, budget)[1]
        share = (self.total - self.committed) / max(1, self.left)
        self.committed += expected
        self.left = max(0, self.left - 1)
        self.price = max(0.0, self.price + STEP * (expected - share) / self.target**2)
        self.chosen[budget] += 1
        return budget

    def observe(self, budget: float, charged: float) -> None:
        """A task that ran at `budget` charged this: the pacing counts what it spent, not what was expected."""
        self.committed += charged - self.estimates.mean.get(budget, (0.0, charged))[1]

    def best(self, task_id: str, price: float) -> float:
        """The budget maximising p - price·c for the task (the cheaper one on a tie)."""
        def value(budget: float):
            success, cost = self.estimates.at(task_id, budget)
            return success - price * cost, -budget

        return max(self.estimates.budgets, key=value)

    def explain(self) -> str:
        mix = ", ".join(f"{budget:g} µ$ × {count}" for budget, count in sorted(self.chosen.items()))
        return (f"allocated by a dual price on µ$ (p(success) - λ·cost, from the offline table): {mix or 'none'}; "
                f"λ from {self.start_price:.3g} to {self.price:.3g} per µ$")


def uniform_budget(budgets, total: float, tasks: int) -> float | None:
    """The uniform split's per-task budget: the largest of `budgets` within total / tasks (None when none fits)."""
    share = total / max(1, tasks)
    fitting = [budget for budget in budgets if budget <= share + 1e-9]
    return max(fitting) if fitting else None


def _starting_price(estimates: Estimates, target: float) -> float:
    """The price at which the table's tasks (each once, or the mean task when the table's tasks are few) spend `target` each.

    Spend falls as the price rises, so the price is found by bisection; 0
    when even the best budgets spend within the target.
    """
    tasks = estimates.tasks or [""]

    def mean_spend(price: float) -> float:
        total = 0.0
        for task_id in tasks:
            choice = max(estimates.budgets, key=lambda b: (estimates.at(task_id, b)[0] - price * estimates.at(task_id, b)[1], -b))
            total += estimates.at(task_id, choice)[1]
        return total / len(tasks)

    if mean_spend(0.0) <= target:
        return 0.0
    low, high = 0.0, 1.0 / max(target, 1e-9)
    while mean_spend(high) > target and high < 1e6:
        high *= 2
    for _ in range(40):
        middle = (low + high) / 2
        low, high = (middle, high) if mean_spend(middle) > target else (low, middle)
    return high
