"""REINFORCE training: the loss and its gradient by hand, the naive form only on request, early stopping, learning the best template."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from numpy.testing import assert_allclose

from bamasc.policy.features import HashedWords, budget_feature
from bamasc.policy.model import mask_logits
from bamasc.policy.train import (
    Reward,
    TrainConfig,
    build_table,
    fit,
    loss_from_logits,
    loss_fn,
    rewards,
    sample_batches,
    split_tasks,
    train_policy,
)
from bamasc.policy.report import estimated_value, oracle_choices, policy_choices
from tests.policy.synthetic import BEST, BUDGETS, TEMPLATES, cluster_of, table_rows

SCALE = 1250.0
BETA = 0.1

# Two samples, three templates. Sample 1: logits (0, 0, 0), all feasible, so pi = (1/3, 1/3, 1/3);
# template 0 was logged with mu = 1/3 and earned R = 1.5. Sample 2: logits (ln 2, 0, 5) with
# template 2 infeasible, so pi = (2/3, 1/3, 0); template 1 was logged with mu = 1/2, R = -1.
LOGITS = np.array([[0.0, 0.0, 0.0], [math.log(2.0), 0.0, 5.0]], dtype=np.float32)
FEASIBLE = np.array([[True, True, True], [True, True, False]])
ACTION = np.array([0, 1], dtype=np.int32)
REWARD = np.array([1.5, -1.0], dtype=np.float32)
BEHAVIOR = np.array([1 / 3, 1 / 2], dtype=np.float32)


def hand_loss(logits):
    return loss_from_logits(mask_logits(logits, FEASIBLE), ACTION, REWARD, BEHAVIOR, BETA)[0]


def test_loss_and_gradient_match_the_hand_computation():
    # value = mean(pi_a / mu * R) = ((1/3)/(1/3) * 1.5 + (1/3)/(1/2) * -1) / 2 = 5/12
    # H1 = ln 3; H2 = -(2/3 ln 2/3 + 1/3 ln 1/3) = ln 3 - (2/3) ln 2; mean H = ln 3 - (1/3) ln 2
    # loss = -5/12 - 0.1 * (ln 3 - ln 2 / 3)
    expected_loss = -5 / 12 - BETA * (math.log(3) - math.log(2) / 3)
    # d pi_a / d z_j = pi_a (delta_aj - pi_j); d H / d z_j = -pi_j (ln pi_j + H); each sample weighs 1/2.
    # Sample 1: -(R / mu / 2) * (1/3)(2/3, -1/3, -1/3) = -2.25 * (2/9, -1/9, -1/9); entropy term 0 (uniform).
    # Sample 2: -(R / mu / 2) * (1/3)(-2/3, 2/3, 0) = (-2/9, 2/9, 0), and the entropy term
    #   -(0.1 / 2) * (-(2/3)(1/3) ln 2, -(1/3)(-(2/3) ln 2), 0) = (0.1 ln 2 / 9) * (1, -1, 0).
    entropy = BETA * math.log(2) / 9
    expected_grad = np.array([[-0.5, 0.25, 0.25], [-2 / 9 + entropy, 2 / 9 - entropy, 0.0]])
    loss, grad = jax.value_and_grad(hand_loss)(jnp.asarray(LOGITS))
    assert_allclose(float(loss), expected_loss, rtol=1e-6)
    assert_allclose(np.asarray(grad), expected_grad, rtol=1e-5, atol=1e-7)
    # The masked template gets no gradient at all, whatever its raw logit.
    assert float(grad[1, 2]) == 0.0


def test_the_naive_log_pi_times_reward_form_runs_only_when_asked_for():
    """The default loss is the importance-weighted one: its value and gradient differ from the naive form's."""

    def naive(logits):
        log_probs = jax.nn.log_softmax(mask_logits(logits, FEASIBLE))
        taken = jnp.take_along_axis(log_probs, ACTION[:, None], axis=1)[:, 0]
        return -jnp.mean(taken * REWARD)

    def weighted(logits):
        probs = jax.nn.softmax(mask_logits(logits, FEASIBLE))
        taken = jnp.take_along_axis(probs, ACTION[:, None], axis=1)[:, 0]
        return -jnp.mean(taken / BEHAVIOR * REWARD)

    z = jnp.asarray(LOGITS)
    no_entropy = lambda logits: loss_from_logits(mask_logits(logits, FEASIBLE), ACTION, REWARD, BEHAVIOR, 0.0)[0]  # noqa: E731
    assert_allclose(float(no_entropy(z)), float(weighted(z)), rtol=1e-6)
    assert abs(float(no_entropy(z)) - float(naive(z))) > 0.1
    assert_allclose(np.asarray(jax.grad(no_entropy)(z)), np.asarray(jax.grad(weighted)(z)), rtol=1e-5, atol=1e-7)
    assert np.abs(np.asarray(jax.grad(no_entropy)(z)) - np.asarray(jax.grad(naive)(z))).max() > 0.05
    asked = lambda logits: loss_from_logits(mask_logits(logits, FEASIBLE), ACTION, REWARD, BEHAVIOR, 0.0, "naive")[0]  # noqa: E731
    assert_allclose(np.asarray(jax.grad(asked)(z)), np.asarray(jax.grad(naive)(z)), rtol=1e-5, atol=1e-7)


def test_the_naive_loss_matches_the_hand_computation():
    # log pi_a: sample 1 ln(1/3), sample 2 ln(1/3); value = mean(log pi_a * R) = (1.5 + (-1)) * ln(1/3) / 2,
    # with no behaviour weights; loss = -value - beta * mean H = 0.25 ln 3 - 0.1 * (ln 3 - ln 2 / 3)
    loss = loss_from_logits(mask_logits(jnp.asarray(LOGITS), FEASIBLE), ACTION, REWARD, BEHAVIOR, BETA, "naive")[0]
    assert_allclose(float(loss), 0.25 * math.log(3) - BETA * (math.log(3) - math.log(2) / 3), rtol=1e-6)
    # d(-R log pi_a)/dz_j = -R (delta_aj - pi_j) / 2 per sample: sample 1 -0.75 * (2/3, -1/3, -1/3).
    grad = jax.grad(lambda z: loss_from_logits(mask_logits(z, FEASIBLE), ACTION, REWARD, BEHAVIOR, 0.0, "naive")[0])
    assert_allclose(np.asarray(grad(jnp.asarray(LOGITS)))[0], [-0.5, 0.25, 0.25], rtol=1e-5)


def test_an_unknown_objective_is_an_error():
    table = build_table(table_rows(tasks_per_cluster=1), TEMPLATES, Reward())
    data = sample_batches(table, HashedWords().encode(table.texts), SCALE, np.arange(8))
    with pytest.raises(ValueError, match="weighted, naive"):
        fit(data, len(TEMPLATES), TrainConfig(objective="greedy", epochs=1))


def test_the_loss_stays_bounded_on_a_full_information_table():
    """Every row logged with a positive reward: the naive form would push every logit up without end."""
    rows = table_rows(tasks_per_cluster=6)
    table = build_table(rows, TEMPLATES, Reward())
    embeddings = HashedWords().encode(table.texts)
    data = sample_batches(table, embeddings, SCALE, np.arange(len(table.sample_action)))
    fitted = fit(data, len(TEMPLATES), TrainConfig(epochs=30, learning_rate=0.01, entropy=0.01))
    state, history = fitted.state, fitted.history
    logits = state.apply_fn({"params": state.params}, data["embedding"], data["budget"], data["feasible"])
    feasible_logits = np.asarray(logits)[data["feasible"]]
    assert np.isfinite(history).all()
    assert np.abs(feasible_logits).max() < 100
    # The loss is bounded below by -max(pi / mu * R / u) - beta * ln K, u = success - failure = 2.
    assert min(history) > -float((data["reward"] / data["behavior"]).max()) / 2 - 0.01 * math.log(4) - 1e-6


def test_rewards_follow_the_paper():
    reward = Reward(success=1.0, failure=-1.0, overflow=2.0, efficiency=0.5)
    got = rewards([True, False, True, False, True], [250.0, 100.0, 600.0, 700.0, 500.0], [500.0] * 5, reward)
    # success within budget: 1 + 0.5 * (1 - 0.5); failure: -1; success over budget: 1 - 2;
    # failure over budget: -1 - 2; success spending exactly the budget: 1 + 0.
    assert_allclose(got, [1.25, -1.0, -1.0, -3.0, 1.0])


def test_the_split_is_by_task_id_never_by_row():
    rows = table_rows(tasks_per_cluster=10)
    train, held = split_tasks([row.task_id for row in rows], 0.2, seed=3)
    assert train and held and not train & held
    assert len(held) == 6 and train | held == {row.task_id for row in rows}
    assert split_tasks([row.task_id for row in rows], 0.2, seed=3) == (train, held)


def test_smoke_training_lowers_the_loss():
    rows = table_rows(tasks_per_cluster=4)
    table = build_table(rows, TEMPLATES, Reward())
    data = sample_batches(table, HashedWords().encode(table.texts), SCALE, np.arange(len(table.sample_action)))
    history = fit(data, len(TEMPLATES), TrainConfig(epochs=15, batch_size=32)).history
    assert len(history) == 15  # without a validation function every epoch runs
    assert history[-1] < history[0] - 0.05


def test_a_row_without_behavior_prob_is_uniform_over_the_feasible_templates():
    table = build_table(table_rows(tasks_per_cluster=1, behavior=False), TEMPLATES, Reward())
    at_500 = table.budgets[table.sample_state] == 500.0
    assert_allclose(table.sample_behavior[at_500], 1 / 3)  # planner is infeasible there
    assert_allclose(table.sample_behavior[~at_500], 1 / 4)


def test_unknown_templates_in_the_data_are_an_error():
    rows = table_rows(tasks_per_cluster=1)
    with pytest.raises(ValueError, match="planner"):
        build_table(rows, ("linear", "star", "feedback"), Reward())


@pytest.mark.parametrize("seed, behavior", [(0, True), (1, False)])
def test_the_policy_learns_the_best_template_per_cluster_and_budget(seed, behavior):
    """Held-out tasks: >= 95% of the oracle's mean reward, and better than every fixed template."""
    rows = table_rows(tasks_per_cluster=30, seed=seed, behavior=behavior)
    config = TrainConfig(seed=seed, holdout=0.25)
    result = train_policy(rows, TEMPLATES, config, HashedWords().encode, SCALE)
    report = result.heldout
    policy, oracle = report["policy"]["reward"], report["oracle"]["reward"]
    assert result.heldout_tasks == 22
    assert oracle > 0 and policy >= 0.95 * oracle, report
    for name, fixed in report["fixed"].items():
        assert policy > fixed["reward"], (name, report)


def test_the_trained_policy_picks_the_known_best_template():
    rows = table_rows(tasks_per_cluster=30, seed=2)
    table = build_table(rows, TEMPLATES, Reward())
    states = np.arange(len(table.task_ids))
    # The data's own oracle is the table's design.
    expected = [BEST[(cluster_of(table.task_ids[s]), table.budgets[s])] for s in states]
    assert [TEMPLATES[k] for k in oracle_choices(table, states)] == expected
    result = train_policy(rows, TEMPLATES, TrainConfig(seed=2, holdout=0.25), HashedWords().encode, SCALE)
    train_ids = {row.task_id for row in rows} - {t for t in table.task_ids if t in _held(rows, 0.25, 2)}
    held = np.array([s for s in states if table.task_ids[s] not in train_ids])
    embeddings = HashedWords().encode([table.texts[s] for s in held])
    picks = policy_choices(
        result.state.params, result.state.apply_fn, embeddings, budget_feature(table.budgets[held], SCALE), table.feasible[held]
    )
    right = [TEMPLATES[k] == expected[s] for k, s in zip(picks, held)]
    assert sum(right) / len(held) >= 0.9
    # Any miss is a near tie: within 0.1 of the best reward (math at 875 µ$: star 1.25, feedback 1.2).
    for k, s, ok in zip(picks, held, right):
        assert ok or table.outcome_reward[s].max() - table.outcome_reward[s, k] < 0.1, (table.task_ids[s], table.budgets[s])
    assert {table.budgets[s] for s in held} == set(BUDGETS)


def _held(rows, holdout, seed):
    return split_tasks([row.task_id for row in rows], holdout, seed)[1]


def test_loss_fn_runs_the_network_on_a_batch():
    """loss_fn is pure: the same params and batch give the same loss, and it is finite."""
    from bamasc.policy.train import create_state

    table = build_table(table_rows(tasks_per_cluster=2), TEMPLATES, Reward())
    data = sample_batches(table, HashedWords().encode(table.texts), SCALE, np.arange(8))
    state = create_state(len(TEMPLATES), TrainConfig(), 384)
    first = loss_fn(state.params, state.apply_fn, data, 0.01)[0]
    second = loss_fn(state.params, state.apply_fn, data, 0.01)[0]
    assert float(first) == float(second) and np.isfinite(float(first))
