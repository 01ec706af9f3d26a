"""The policy learns what can be learned: the best template as a function of the kind of task and the budget.

On tables whose right template is f(kind, budget band), with luck elsewhere
(tests/policy/tables.py), the trained policy's held-out reward must reach 95%
of what the policy that knows f earns on the same rows, and beat every fixed
template. The pieces that get it there are tested on their own below.
"""

from __future__ import annotations

import json

import jax
import numpy as np
import pytest
from numpy.testing import assert_allclose

from bamasc.policy.features import HashedWords, budget_feature
from bamasc.policy.model import budget_encoding
from bamasc.policy.report import estimated_value, outcome_metrics
from bamasc.policy.train import Reward, TrainConfig, build_table, fit, sample_batches, split_tasks, train_policy
from tests.policy.tables import BUDGETS, SCALE, SPECS, TEMPLATES, known_f_choices, make_table


@pytest.fixture(scope="module")
def minilm():
    from bamasc.policy.features import MINILM, EmbeddingUnavailable, Features, minilm_files

    try:
        minilm_files()
    except EmbeddingUnavailable as problem:
        pytest.skip(str(problem))
    return Features(MINILM).embed


@pytest.mark.parametrize("embedding", ["hashed", "minilm"])
@pytest.mark.parametrize("spec", SPECS, ids=[spec.label() for spec in SPECS])
def test_the_heldout_reward_reaches_95_percent_of_the_policy_that_knows_f(spec, embedding, request):
    # MiniLM is the default embedding: its tables are the ones the target is about.
    embed = HashedWords().encode if embedding == "hashed" else request.getfixturevalue("minilm")
    synthetic = make_table(spec)
    config = TrainConfig()
    result = train_policy(synthetic.rows, TEMPLATES, config, embed, SCALE)
    table = build_table(synthetic.rows, TEMPLATES, config.reward)
    held_ids = split_tasks(table.task_ids, config.holdout, config.seed)[1]
    held = np.array([s for s, task in enumerate(table.task_ids) if task in held_ids])
    knows_f = outcome_metrics(table, held, known_f_choices(synthetic, table, held))["reward"]
    report = result.heldout
    assert report["policy"]["states"] == len(held)
    assert knows_f > 0 and report["policy"]["reward"] >= 0.95 * knows_f, (knows_f, report)
    for name, fixed in report["fixed"].items():
        assert report["policy"]["reward"] > fixed["reward"], (name, report)
    # Early stopping kept an epoch before the last it ran.
    assert 1 <= result.best_epoch < len(result.history) <= config.epochs


def test_the_tables_best_template_depends_on_kind_and_budget_and_luck_is_there():
    synthetic = make_table(SPECS[3])
    assert len({synthetic.best[(k, 0)] for k in range(4)}) > 1
    assert all(len({synthetic.best[(k, band)] for band in range(3)}) > 1 for k in range(4))
    table = build_table(synthetic.rows, TEMPLATES, Reward())
    states = np.arange(len(table.task_ids))
    right = known_f_choices(synthetic, table, states)
    wrong = table.observed & (np.arange(len(TEMPLATES))[None, :] != right[:, None])
    # The right template always succeeds here (right = 1); the others about a quarter of the time.
    assert table.outcome_success[states, right].all()
    assert 0.2 < table.outcome_success[wrong].mean() < 0.3


def test_early_stopping_keeps_the_best_epoch_and_stops_after_the_patience():
    table = build_table(make_table(SPECS[0]).rows[:400], TEMPLATES, Reward())
    data = sample_batches(table, HashedWords().encode(table.texts), SCALE, np.arange(len(table.sample_action)))
    scores = iter([0.1, 0.5, 0.3, 0.2, 0.4, 0.9, 0.9])
    seen = []

    def validate(state):
        seen.append(jax.tree_util.tree_map(np.asarray, state.params))
        return next(scores)

    fitted = fit(data, len(TEMPLATES), TrainConfig(epochs=50, patience=3), validate=validate)
    # Epoch 2 is the best; 3, 4 and 5 do not beat it, so training stops after epoch 5.
    assert fitted.best_epoch == 2 and len(fitted.history) == 5 and fitted.validation == [0.1, 0.5, 0.3, 0.2, 0.4]
    kept = jax.tree_util.tree_map(np.asarray, fitted.state.params)
    jax.tree_util.tree_map(np.testing.assert_array_equal, kept, seen[1])
    assert not np.array_equal(kept["logits"]["kernel"], seen[-1]["logits"]["kernel"])


def test_the_estimated_value_is_the_mean_reward_on_a_full_information_table_and_weighs_a_logged_one():
    table = build_table(make_table(SPECS[1]).rows, TEMPLATES, Reward())
    states = np.arange(len(table.task_ids))
    samples = np.arange(len(table.sample_action))
    for k in range(len(TEMPLATES)):
        choices = np.full(len(states), k)
        feasible = table.feasible[:, k]
        expected = table.outcome_reward[feasible, k].sum() / len(states)  # an infeasible choice logs nothing: 0
        assert_allclose(estimated_value(table, samples, choices), expected, rtol=1e-5)
    # One logged run per state, chosen with probability mu: the run counts R / mu when it is the choice.
    one = np.array([np.flatnonzero(table.sample_state == s)[0] for s in states])
    choices = table.sample_action[one]
    expected = np.mean(table.sample_reward[one] / table.sample_behavior[one])
    assert_allclose(estimated_value(table, one, np.asarray(choices)), expected, rtol=1e-5)


def test_the_budget_steps_tell_every_pair_of_declared_budgets_apart_and_saturate_outside():
    steps = np.asarray(budget_encoding(budget_feature(BUDGETS, SCALE), "steps"))
    assert steps.shape == (len(BUDGETS), 19)
    assert np.all(np.diff(steps, axis=0) >= 0)  # a larger budget has every step at least as far up
    for low, high in zip(steps, steps[1:]):
        # Some step rises by most of its height between them, so a threshold there is (about) one weight;
        # 1625 and 2000 µ$, under a third of an octave apart, are the closest pair.
        assert (high - low).max() > 0.6
    far = np.asarray(budget_encoding(np.array([1e-4, 5.0], np.float32), "steps"))
    assert far[0].max() < 1e-6 and far[1].min() > 1 - 1e-6
    assert_allclose(np.asarray(budget_encoding(np.array([0.5], np.float32), "linear")), [[0.5]])


def test_a_checkpoint_written_before_the_steps_loads_with_the_linear_budget(tmp_path):
    from bamasc.policy.checkpoint import load_policy, save_policy
    from bamasc.policy.train import create_state

    state = create_state(len(TEMPLATES), TrainConfig(budget_features="linear"), 384)
    meta = {"templates": list(TEMPLATES), "embedding_model": "hashed-words-384", "budget_scale": SCALE,
            "network": {"hidden": 128, "depth": 1}}
    path = str(tmp_path / "old.msgpack")
    save_policy(path, state.params, meta)
    loaded = load_policy(path, TEMPLATES)
    assert loaded.module.budget_features == "linear"
    meta_path = tmp_path / "old.json"
    data = json.loads(meta_path.read_text())
    data["network"]["budget"] = "steps"  # the parameters are the linear network's: the shapes do not match
    meta_path.write_text(json.dumps(data))
    from bamasc.policy.errors import PolicyError

    with pytest.raises(PolicyError, match="layer shapes differ|does not hold parameters"):
        load_policy(path, TEMPLATES)
    data["network"]["budget"] = "cubic"
    meta_path.write_text(json.dumps(data))
    with pytest.raises(PolicyError, match="'cubic'.*retrain"):
        load_policy(path, TEMPLATES)
