"""How well a trained policy picks: its choices per state, their reward in the data, and the held-out report."""

from __future__ import annotations

import functools

import jax
import numpy as np


@functools.partial(jax.jit, static_argnames=("apply_fn",))
def probabilities(params, apply_fn, embedding, budget, feasible):
    return jax.nn.softmax(apply_fn({"params": params}, embedding, budget, feasible))


def policy_choices(params, apply_fn, embeddings, budgets, feasible) -> np.ndarray:
    """The template each state gets: the most probable feasible one."""
    probs = np.asarray(probabilities(params, apply_fn, embeddings, budgets, feasible))
    return np.argmax(np.where(feasible, probs, -1.0), axis=1)


def estimated_value(table, samples: np.ndarray, choices: np.ndarray) -> float:
    """The mean reward per state of running `choices` (one per state of the table), estimated from logged runs.

    Each logged run i of state s counts 1[a_i is s's choice] * R_i / (mu_i * n_s),
    with n_s the runs logged for s: unbiased for any logging policy, and on a
    full-information table (every feasible template logged, mu = 1 / their
    number) exactly the mean over states of the chosen template's reward.
    """
    states = table.sample_state[samples]
    logged = np.bincount(states, minlength=len(table.task_ids))
    hit = table.sample_action[samples] == choices[states]
    weight = table.sample_reward[samples] / (table.sample_behavior[samples] * logged[states])
    return float(np.where(hit, weight, 0.0).sum() / max(1, np.count_nonzero(logged)))


def outcome_metrics(table, states: np.ndarray, choices: np.ndarray) -> dict:
    """Mean reward, success rate and mean cost of running `choices[i]` on `states[i]`.

    A choice that is infeasible at its budget cannot run: it earns the reward's
    `infeasible` constant (the failure reward unless set), at no cost and no
    success. A feasible choice the data has no row for is left out.
    """
    feasible = table.feasible[states, choices]
    observed = table.observed[states, choices]
    keep = observed | ~feasible
    if not keep.any():
        return {"reward": None, "success_rate": None, "mean_cost": None, "states": 0}
    reward = np.where(feasible, table.outcome_reward[states, choices], table.reward.infeasible_reward())[keep]
    success = (table.outcome_success[states, choices] & feasible)[keep]
    cost = np.where(feasible, table.outcome_cost[states, choices], 0.0)[keep]
    return {
        "reward": round(float(reward.mean()), 6),
        "success_rate": round(float(success.mean()), 6),
        "mean_cost": round(float(cost.mean()), 6),
        "states": int(keep.sum()),
    }


def oracle_choices(table, states: np.ndarray) -> np.ndarray:
    """Per state, the template with the best reward in the data."""
    scores = np.where(table.feasible[states] & table.observed[states], table.outcome_reward[states], -np.inf)
    return np.argmax(scores, axis=1)


def heldout_report(table, states: np.ndarray, choices: np.ndarray) -> dict:
    """The policy's choices against the per-state oracle and against every single fixed template."""
    return {
        "policy": outcome_metrics(table, states, choices),
        "oracle": outcome_metrics(table, states, oracle_choices(table, states)),
        "fixed": {
            name: outcome_metrics(table, states, np.full(len(states), k)) for k, name in enumerate(table.templates)
        },
    }


def report_text(heldout: dict) -> str:
    """The held-out table `bamasc train` prints: the policy, the oracle and every fixed template."""
    rows = [("policy", heldout["policy"]), ("oracle", heldout["oracle"])]
    rows += [(f"fixed {name}", metrics) for name, metrics in heldout["fixed"].items()]
    width = max(len(name) for name, _ in rows)

    def cell(value, form):
        return "-" if value is None else format(value, form)

    lines = [f"{'held-out'.ljust(width)}  {'reward':>8}  {'success':>8}  {'mean cost':>10}"]
    for name, m in rows:
        lines.append(
            f"{name.ljust(width)}  {cell(m['reward'], '8.3f')}  {cell(m['success_rate'], '8.1%')}  "
            f"{cell(m['mean_cost'], '8.1f')} µ$"
        )
    return "\n".join(lines)
