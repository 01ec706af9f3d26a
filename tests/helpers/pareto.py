"""Random `parallel`/`chain` pipelines for the dynamic program over slots, its budgets and its binding."""

from __future__ import annotations

import math
import random

from bamasc.optimize import bind
from tests.helpers.milp import objective, strategy


def pipeline(rng: random.Random, require: str = "", min_agents: int = 0) -> str:
    statements = rng.randint(2, 4)
    models = []
    for m in range(rng.randint(2, 4)):
        cap = rng.choice(["", f"max_output = {rng.choice([16, 48, 96])}"])
        quality = rng.choice(["", f"quality {{ R0 = {rng.choice([0.5, 2.0])} }}", "quality = 1.5"])
        # A cliff tier re-prices a call whose prompt may pass 60 tokens: the MILP bills its most.
        fee = rng.choice(["", "  long_prompt { above = 60  input = 4.0  output = 8.0 }"])
        models.append(
            f'model m{m} {{\n  provider = fake\n  name = "m{m}"\n'
            f"  price {{ input = {rng.choice([0.1, 0.5, 1.0, 3.0])}  output = {rng.choice([0.4, 2.0, 5.0])}{fee} }}\n"
            f"  tier = {rng.randint(1, 3)}\n  {cap}\n  {quality}\n}}\n"
        )
    roles, slots, flow = [], [], []
    for s in range(statements):
        previous = f" {{{{v{s - 1}}}}}" if s else ""
        roles.append(f'role R{s} {{\n  max_output = {rng.choice([32, 64])}\n  reads = answer\n  prompt = "Do {{{{task}}}}{previous}"\n}}\n')
        lo = rng.choice([0, 1]) if s else 1
        slots.append(f"  slot s{s} : R{s} [{lo}..{lo + rng.randint(1, 2)}]")
        call = f"{rng.choice(['parallel', 'chain'])} s{s}({'task' if s == 0 else f'task, v{s - 1}'})"
        flow.append(f"    v{s} = {call}" if s + 1 < statements else f"    answer {call}")
    return (
        "".join(models) + "".join(roles)
        + "topology t {\n" + "\n".join(slots) + f"\n{require}\n  flow {{\n" + "\n".join(flow) + "\n  }\n}\n"
        + f"system s {{\n  models = [{', '.join(f'm{m}' for m in range(len(models)))}]\n  topologies = [t]\n"
        + f"  budget = 1000\n  task_tokens = 40\n  min_agents = {min_agents}\n}}\n"
    )  # fmt: skip


def not_better(found: tuple, truth: tuple | None) -> bool:
    if truth is None:
        return False
    return found[:-1] < truth[:-1] or found[:-1] == truth[:-1] and found[-1] <= truth[-1] + 1e-6


def budgets(program, rng: random.Random) -> list[float]:
    """Budgets from below the cheapest binding to above the dearest best one."""
    system = program.systems["s"]
    cheapest = bind.bind_template(program, system, "t", 0.0).cheapest_cost
    loose = bind.bind_template(program, system, "t", math.inf).worst_case_cost
    return sorted(round(cheapest * (loose / cheapest) ** rng.uniform(-0.1, 1.1), 3) for _ in range(3))


def bind_by(program, budget: float, sweep_from: float, swept: list, **thresholds) -> tuple | None:
    chosen = strategy(sweep_from_columns=sweep_from, **thresholds)
    found = bind.bind_template(program, program.systems["s"], "t", budget, strategy=chosen)
    swept.append(found.solves == 0 and found.feasible)
    return objective(found)
