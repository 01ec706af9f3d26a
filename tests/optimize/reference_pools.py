"""The BAMAS reference's ILP, restated from its description and solved by brute force.

Independent of bamasc: it knows nothing of .bam files, slots or flows. It
takes the reference's agent libraries (per dataset: role, level, prices,
max_tokens, performance), its four patterns with their role counts, the
candidate agents its filter passes for each pattern, and maximises
Σ W_level × performance × role factor over every count of every (role, level)
group (0..5 instances each) under Σ estimate ≤ budget. Run it to print the
pools: `python -m tests.optimize.reference_pools`.
"""

from __future__ import annotations

import itertools
import math

PROMPT_TOKENS = 500  # the reference's ilp_solver.avg_prompt_tokens
PER_GROUP = 5  # instances per (role, level) group

# (role, level, USD/M in, USD/M out, max_tokens, performance), in the libraries' order.
LIBRARIES = {
    "gsm8k": [
        ("Planner", "High", 0.27, 1.1, 320, 1.0), ("Planner", "Low", 0.1, 0.4, 320, 0.95),
        ("Executor", "High", 0.27, 1.1, 384, 1.0), ("Executor", "Low", 0.1, 0.4, 384, 0.5),
        ("Critic", "High", 0.27, 1.1, 384, 1.0), ("Critic", "Low", 0.1, 0.4, 384, 0.5),
    ],
    "math": [
        ("Planner", "High", 0.27, 1.1, 320, 1.0), ("Planner", "Low", 0.1, 0.4, 320, 0.95),
        ("Critic", "High", 0.27, 1.1, 1024, 1.0), ("Critic", "Low", 0.1, 0.4, 1024, 0.5),
        ("Executor", "High", 0.27, 1.1, 1024, 1.0), ("Executor", "Low", 0.1, 0.4, 1024, 0.5),
    ],
    "mbpp": [
        ("Planner", "High", 0.27, 1.1, 384, 1.0), ("Planner", "Low", 0.1, 0.4, 384, 0.9),
        ("Executor", "High", 0.27, 1.1, 384, 1.0), ("Executor", "Low", 0.1, 0.4, 384, 0.8),
        ("Critic", "High", 0.27, 1.1, 384, 1.0), ("Critic", "Low", 0.1, 0.4, 384, 0.8),
    ],
}

BUDGETS = {"gsm8k": [500, 875, 1250, 1625, 2000], "math": [1000, 2000, 3000], "mbpp": [500, 875, 1250, 1625, 2000]}

# Per pattern: the roles its candidate filter passes, with (min, max) instances over both levels
# (None: no cap beyond the groups'), and whether it is the dynamic (planner-driven) one.
PATTERNS = {
    "linear": ({"Executor": (1, 5)}, False),
    "star": ({"Executor": (1, 5)}, False),
    "feedback": ({"Executor": (1, 3), "Critic": (1, 2)}, False),
    "planner": ({"Planner": (1, 1), "Executor": (1, None)}, True),
}


def estimate(p_in, p_out, max_tokens) -> float:
    return p_in * PROMPT_TOKENS + p_out * max_tokens


def factor(role: str, level: str, dynamic: bool) -> float:
    if dynamic:
        return 1.001 if role == "Planner" else 1.0
    if role == "Executor":
        return 1.01 if level == "High" else 1.0
    return {"Critic": 1.005, "OutputFormatter": 0.95}.get(role, 0.90)


def solve(dataset: str, pattern: str, budget: float):
    """({(role, level): count}, estimate, tied): the best pool, or (None, None, False)."""
    roles, dynamic = PATTERNS[pattern]
    groups = [g for g in LIBRARIES[dataset] if g[0] in roles]
    cost = {(g[0], g[1]): estimate(g[2], g[3], g[4]) for g in groups}
    first = {}
    for role, level, *_ in groups:
        first.setdefault(level, cost[(role, level)])
    weight = {"Low": 1.0, "High": 1.0 + math.floor(budget / first["Low"])}
    best, best_key, tied = None, None, False
    for counts in itertools.product(range(PER_GROUP + 1), repeat=len(groups)):
        pool = {(g[0], g[1]): n for g, n in zip(groups, counts)}
        if not all(lo <= sum(n for (r, _), n in pool.items() if r == role) <= (hi or math.inf)
                   for role, (lo, hi) in roles.items()):
            continue
        if pattern == "feedback":
            if pool[("Critic", "High")] > pool[("Executor", "High")]:
                continue
            if pool[("Critic", "High")] + pool[("Critic", "Low")] > pool[("Executor", "High")] + pool[("Executor", "Low")]:
                continue
        spent = sum(cost[k] * n for k, n in pool.items())
        if spent > budget:
            continue
        score = sum(weight[g[1]] * g[5] * factor(g[0], g[1], dynamic) * n for g, n in zip(groups, counts))
        key = round(score, 9)
        if best_key is None or key > best_key:
            best, best_key, tied = ({k: n for k, n in pool.items() if n}, spent), key, False
        elif key == best_key:
            tied = True
    if best is None:
        return None, None, False
    return best[0], best[1], tied


def table() -> dict:
    return {
        (dataset, pattern, budget): solve(dataset, pattern, budget)[0]
        for dataset, budgets in BUDGETS.items()
        for pattern in PATTERNS
        for budget in budgets
    }


if __name__ == "__main__":
    for (dataset, pattern, budget), pool in table().items():
        print(f"    ({dataset!r}, {pattern!r}, {budget}): {pool},")
