"""Synthetic offline tables whose best template is a known function of the kind of task and the budget.

A table has K kinds of task text (each its own sentence pattern and
vocabulary), every template run at every budget of every task (a
full-information table, as `bamasc collect` writes), and a function
f(kind, band) naming the right template, where the band is how many of the
budget thresholds the budget is above. The right template succeeds with
probability `right`; every other one succeeds by chance, with probability
`noise`: a per-task luck that the per-task oracle sees and no policy can
learn. The measure of a trained policy is the reward of the policy that
knows f, on the same held-out rows.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import numpy as np

from bamasc.policy.data import OfflineRow, row_data

TEMPLATES = ("linear", "star", "feedback", "planner")  # examples/gsm8k.bam's, in its order
BUDGETS = (500.0, 875.0, 1250.0, 1625.0, 2000.0)  # examples/gsm8k.bam's `budgets`
SCALE = 2000.0  # the largest of them: its budget scale
# A template's typical charge, as a share of the budget: dearer templates have more seats.
COST_SHARE = {"linear": 0.3, "star": 0.5, "feedback": 0.65, "planner": 0.8}
INFEASIBLE_BELOW = {"planner": 875.0}  # no binding for the planner under 875 µ$, as in the paper's setup

_KINDS = (
    ("math", "A shop has {n} {a} and sells {m} {b}. How many {a} are left at the end of the day?",
     ["apples", "marbles", "cookies", "tickets", "pencils", "books", "eggs", "coins", "stamps", "shells"]),
    ("code", "Write a python function that takes a {a} of {n} items and returns the {b} sorted, with tests.",
     ["string", "list", "dictionary", "tuple", "matrix", "array", "queue", "set", "graph", "tree"]),
    ("essay", "Write a short essay of {n} words about {a} and {b}, in three paragraphs, with a clear thesis.",
     ["history", "climate", "music", "friendship", "technology", "travel", "art", "sports", "cities", "science"]),
    ("translate", "Translate into French the sentence: the {a} met the {b} near the river at {n} o'clock.",
     ["doctor", "farmer", "teacher", "sailor", "baker", "painter", "soldier", "child", "priest", "merchant"]),
)
MAX_KINDS = len(_KINDS)


@dataclass(frozen=True)
class TableSpec:
    kinds: int = 2  # kinds of task text, up to MAX_KINDS
    thresholds: tuple[float, ...] = (1000.0,)  # budgets above each one change the right template
    noise: float = 0.25  # chance that a template other than the right one succeeds
    right: float = 1.0  # chance that the right template succeeds
    tasks: int = 240  # tasks in the table, spread evenly over the kinds
    seed: int = 0  # texts, f, outcomes and costs

    def label(self) -> str:
        return f"kinds {self.kinds}, thresholds {len(self.thresholds)}, noise {self.noise:g}"


@dataclass(frozen=True)
class SyntheticTable:
    spec: TableSpec
    rows: list[OfflineRow]
    kind_of: dict[str, int]  # task id -> kind
    best: dict[tuple[int, int], str]  # f: (kind, band) -> the right template

    def band(self, budget: float) -> int:
        return sum(budget > threshold for threshold in self.spec.thresholds)

    def right_template(self, task_id: str, budget: float) -> str:
        return self.best[(self.kind_of[task_id], self.band(budget))]

    def json_rows(self) -> list[dict]:
        return [row_data(row) for row in self.rows]


def feasible_templates(budget: float) -> list[str]:
    return [t for t in TEMPLATES if budget >= INFEASIBLE_BELOW.get(t, 0.0)]


def choose_f(spec: TableSpec, rng: random.Random) -> dict[tuple[int, int], str]:
    """A random f that depends on both the kind and the band, and picks only templates feasible in its band."""
    bands = len(spec.thresholds) + 1
    in_band = [[b for b in BUDGETS if sum(b > t for t in spec.thresholds) == band] for band in range(bands)]
    if any(not budgets for budgets in in_band):
        raise ValueError(f"thresholds {spec.thresholds} leave a band without a budget of {BUDGETS}")
    allowed = [[t for t in TEMPLATES if all(t in feasible_templates(b) for b in budgets)] for budgets in in_band]
    while True:
        best = {(k, band): rng.choice(allowed[band]) for k in range(spec.kinds) for band in range(bands)}
        by_kind = all(len({best[(k, band)] for k in range(spec.kinds)}) > 1 for band in range(bands))
        by_band = all(len({best[(k, band)] for band in range(bands)}) > 1 for k in range(spec.kinds))
        if by_kind and (bands == 1 or by_band):
            return best


def make_table(spec: TableSpec) -> SyntheticTable:
    if not 1 <= spec.kinds <= MAX_KINDS:
        raise ValueError(f"kinds must be 1 to {MAX_KINDS}, not {spec.kinds}")
    rng = random.Random(spec.seed)
    best = choose_f(spec, rng)
    table = SyntheticTable(spec, [], {}, best)
    for i in range(spec.tasks):
        kind = i % spec.kinds
        _, pattern, words = _KINDS[kind]
        a, b = rng.sample(words, 2)
        text = pattern.format(a=a, b=b, n=rng.randint(2, 999), m=rng.randint(2, 999))
        task_id = f"{_KINDS[kind][0]}-{i}"
        table.kind_of[task_id] = kind
        for budget in BUDGETS:
            feasible = feasible_templates(budget)
            right = table.right_template(task_id, budget)
            for template in TEMPLATES:
                if template not in feasible:
                    table.rows.append(OfflineRow(task_id, text, budget, template, False, 0.0, False))
                    continue
                success = rng.random() < (spec.right if template == right else spec.noise)
                cost = budget * COST_SHARE[template] * rng.uniform(0.9, 1.1)
                table.rows.append(OfflineRow(task_id, text, budget, template, success, cost, True, 1 / len(feasible)))
    return table


def known_f_choices(synthetic: SyntheticTable, table, states: np.ndarray) -> np.ndarray:
    """Per state of a `build_table` table, the index of f's template: the choices of the policy that knows f."""
    return np.array(
        [TEMPLATES.index(synthetic.right_template(table.task_ids[s], table.budgets[s])) for s in states], dtype=np.int64
    )


# Several tables with the structure of the acceptance criterion: kinds 2 to 4, one or two thresholds, noise 0.1 to 0.4.
SPECS = (
    TableSpec(kinds=2, thresholds=(1000.0,), noise=0.25, seed=1),
    TableSpec(kinds=3, thresholds=(1000.0,), noise=0.1, seed=2),
    TableSpec(kinds=2, thresholds=(700.0, 1400.0), noise=0.4, seed=3),
    TableSpec(kinds=4, thresholds=(700.0, 1400.0), noise=0.25, seed=4),
    TableSpec(kinds=3, thresholds=(1400.0,), noise=0.3, right=0.9, tasks=360, seed=5),
)
