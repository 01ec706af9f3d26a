"""The offline table a policy trains on: rewards of logged runs, and the rows grouped by (task, budget) state.

Plain NumPy, no JAX: `train.py` trains on a `Table`, `report.py` and the
benchmarks read one.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

@dataclass(frozen=True)
class Reward:
    """R = w_task * (success or failure) + w_budget * (efficiency * (1 - cost/budget) on a success
    within budget, or -overflow when cost > budget); an infeasible template's R is `infeasible`."""

    success: float = 1.0  # C_succ: reward of a correct answer
    failure: float = -1.0  # -C_fail: reward of a wrong or missing answer (a negative number)
    overflow: float = 2.0  # C_overflow: subtracted when a task spent more than its budget
    efficiency: float = 0.5  # g: a success within budget also earns g * (1 - cost / budget)
    infeasible: float | None = None  # a template with no binding at the budget; None: the failure reward
    task_weight: float = 1.0  # w_task: multiplies the success or failure term
    budget_weight: float = 1.0  # w_budget: multiplies the efficiency or overflow term

    def infeasible_reward(self) -> float:
        return self.failure if self.infeasible is None else self.infeasible


def reward_unit(reward: Reward) -> float:
    """What rewards are divided by in the loss: the gap between a success and a failure."""
    gap = reward.success - reward.failure
    return gap if gap > 0 else 1.0


def rewards(success, cost, budget, reward: Reward) -> np.ndarray:
    success = np.asarray(success, dtype=bool)
    cost = np.asarray(cost, dtype=np.float64)
    budget = np.asarray(budget, dtype=np.float64)
    over = cost > budget
    task = np.where(success, reward.success, reward.failure)
    spend = np.where(over, -reward.overflow, np.where(success, reward.efficiency * (1.0 - cost / budget), 0.0))
    return (reward.task_weight * task + reward.budget_weight * spend).astype(np.float32)


# ---------------------------------------------------------------- the table


@dataclass
class Table:
    """The offline rows as arrays.

    A state is one (task, budget); `outcome_*` hold, per state and template,
    what the data says running that template did (`observed` False where no
    row says). A sample is one logged run: a row with `feasible` true.
    """

    templates: tuple[str, ...]
    task_ids: list[str]  # per state
    texts: list[str]  # per state
    budgets: np.ndarray  # (S,) µ$
    feasible: np.ndarray  # (S, K) bool
    observed: np.ndarray  # (S, K) bool
    outcome_reward: np.ndarray  # (S, K)
    outcome_success: np.ndarray  # (S, K) bool
    outcome_cost: np.ndarray  # (S, K) µ$
    sample_state: np.ndarray  # (N,) state of each logged run
    sample_action: np.ndarray  # (N,) template index
    sample_reward: np.ndarray  # (N,)
    sample_behavior: np.ndarray  # (N,) mu(a|s)
    reward: Reward = field(default_factory=Reward)


def build_table(rows, templates: tuple[str, ...], reward: Reward, include_infeasible: bool = False) -> Table:
    """Rows naming a template the system does not have are an error; feasibility is per budget.

    With `include_infeasible` (the reference's training), a row of a template with no binding is a
    sample too, with the `infeasible` reward; the outcome arrays, and so every report, are the same."""
    index = {name: k for k, name in enumerate(templates)}
    unknown = sorted({row.template for row in rows} - set(index))
    if unknown:
        raise ValueError(
            f"the data has rows for template{'s' if len(unknown) > 1 else ''} {', '.join(unknown)} "
            f"that the system does not have (it has {', '.join(templates)})"
        )
    states: dict[tuple[str, float], int] = {}
    task_ids, texts, budgets = [], [], []
    for row in rows:
        key = (row.task_id, row.budget)
        if key not in states:
            states[key] = len(states)
            task_ids.append(row.task_id)
            texts.append(row.task)
            budgets.append(row.budget)
    count, k = len(states), len(templates)
    # Feasibility depends on the budget only (the compiler decides it), so one
    # feasible row at a budget makes the template feasible for every task there.
    feasible_at: dict[float, np.ndarray] = {}
    for row in rows:
        mask = feasible_at.setdefault(row.budget, np.zeros(k, dtype=bool))
        mask[index[row.template]] |= row.feasible
    feasible = np.stack([feasible_at[b] for b in budgets]) if count else np.zeros((0, k), dtype=bool)
    observed = np.zeros((count, k), dtype=bool)
    success = np.zeros((count, k), dtype=bool)
    cost = np.zeros((count, k), dtype=np.float64)
    samples = []
    ran = []
    for row in rows:
        if not row.feasible and not include_infeasible:
            continue
        s, a = states[(row.task_id, row.budget)], index[row.template]
        if row.feasible:
            observed[s, a], success[s, a], cost[s, a] = True, row.success, row.cost
        samples.append((s, a, row.success, row.cost, row.budget, row.behavior_prob))
        ran.append(row.feasible)
    outcome = rewards(success, cost, np.asarray(budgets, dtype=np.float64).reshape(-1, 1), reward)
    feasible_count = feasible.sum(1)
    sample_state = np.array([s for s, *_ in samples], dtype=np.int32)
    behavior = np.array(
        [p if p is not None else 1.0 / max(1, feasible_count[s]) for s, _, _, _, _, p in samples], dtype=np.float32
    )
    return Table(
        templates=tuple(templates),
        task_ids=task_ids,
        texts=texts,
        budgets=np.asarray(budgets, dtype=np.float64),
        feasible=feasible,
        observed=observed,
        outcome_reward=np.where(observed, outcome, 0.0).astype(np.float32),
        outcome_success=success,
        outcome_cost=cost,
        sample_state=sample_state,
        sample_action=np.array([a for _, a, *_ in samples], dtype=np.int32),
        sample_reward=np.where(
            np.array(ran, dtype=bool), rewards([x[2] for x in samples], [x[3] for x in samples], [x[4] for x in samples], reward),
            np.float32(reward.infeasible_reward()),
        ).astype(np.float32),
        sample_behavior=behavior,
        reward=reward,
    )


def split_tasks(task_ids, holdout: float, seed: int) -> tuple[set[str], set[str]]:
    """(training ids, held-out ids): a seeded split of the distinct task ids, never of rows."""
    unique = sorted(set(task_ids))
    if holdout <= 0 or len(unique) < 2:
        return set(unique), set()
    order = np.random.default_rng(seed).permutation(len(unique))
    held = max(1, min(len(unique) - 1, round(holdout * len(unique))))
    return {unique[i] for i in order[held:]}, {unique[i] for i in order[:held]}


# ---------------------------------------------------------------- loss and step
