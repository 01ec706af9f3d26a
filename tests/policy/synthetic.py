"""Synthetic offline tables with a known best template per task cluster and budget band."""

from __future__ import annotations

import random

from bamasc.policy.data import OfflineRow

TEMPLATES = ("linear", "star", "feedback", "planner")
BUDGETS = (500.0, 875.0, 1250.0)

# Per cluster and budget: template -> (success, cost as a share of the budget); templates
# not listed fail at 60% of the budget. The best template per (cluster, budget) is BEST.
OUTCOMES = {
    "code": {
        500.0: {"linear": (True, 0.3), "star": (True, 0.8)},
        875.0: {"linear": (True, 0.3), "star": (True, 0.7), "feedback": (True, 0.9)},
        1250.0: {"linear": (True, 0.25), "star": (True, 0.6), "planner": (True, 0.9)},
    },
    "math": {
        500.0: {"star": (True, 0.5), "linear": (True, 0.95)},
        875.0: {"star": (True, 0.5), "feedback": (True, 0.6)},
        1250.0: {"feedback": (True, 0.5), "star": (False, 0.6), "linear": (True, 0.9)},
    },
    "essay": {
        500.0: {"linear": (True, 0.4), "star": (True, 0.9)},
        875.0: {"planner": (True, 0.6), "linear": (True, 0.95)},
        1250.0: {"planner": (True, 0.5), "feedback": (True, 0.8)},
    },
}
# Planner has no binding at the lowest budget.
INFEASIBLE = {500.0: ("planner",)}
BEST = {
    ("code", 500.0): "linear", ("code", 875.0): "linear", ("code", 1250.0): "linear",
    ("math", 500.0): "star", ("math", 875.0): "star", ("math", 1250.0): "feedback",
    ("essay", 500.0): "linear", ("essay", 875.0): "planner", ("essay", 1250.0): "planner",
}

_WORDS = {
    "code": ["string", "list", "integers", "dictionary", "characters", "tuple", "matrix", "array", "words", "keys"],
    "math": ["apples", "marbles", "cookies", "tickets", "pencils", "books", "eggs", "coins", "stamps", "shells"],
    "essay": ["history", "climate", "music", "friendship", "technology", "travel", "art", "sports", "cities", "science"],
}


def task_text(cluster: str, rng: random.Random) -> str:
    a, b = rng.sample(_WORDS[cluster], 2)
    n, m = rng.randint(2, 90), rng.randint(2, 90)
    if cluster == "code":
        return f"Write a python function that takes a {a} and returns the {b} sorted, with a docstring and tests."
    if cluster == "math":
        return f"A shop has {n} {a} and sells {m} {b}. How many {a} are left? Show the arithmetic."
    return f"Write a short essay about {a} and {b}, in three paragraphs, with a clear thesis."


def table_rows(tasks_per_cluster: int = 30, seed: int = 0, behavior: bool = True, budgets=BUDGETS) -> list[OfflineRow]:
    """Every template at every budget for every task: a full-information table.

    `budgets` renames the three budget bands (low, middle, high) to other amounts.
    """
    rng = random.Random(seed)
    rows = []
    for cluster in OUTCOMES:
        for i in range(tasks_per_cluster):
            task_id, text = f"{cluster}-{i}", task_text(cluster, rng)
            for band, amount in zip(BUDGETS, budgets):
                budget = float(amount)
                feasible = [t for t in TEMPLATES if t not in INFEASIBLE.get(band, ())]
                for template in TEMPLATES:
                    if template not in feasible:
                        rows.append(OfflineRow(task_id, text, budget, template, False, 0.0, False))
                        continue
                    success, share = OUTCOMES[cluster][band].get(template, (False, 0.6))
                    cost = budget * share * rng.uniform(0.97, 1.03)
                    probability = 1.0 / len(feasible) if behavior else None
                    rows.append(OfflineRow(task_id, text, budget, template, success, cost, True, probability))
    return rows


def cluster_of(task_id: str) -> str:
    return task_id.split("-")[0]
