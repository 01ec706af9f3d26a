"""`objective = "reference"`: the BAMAS reference's training (its loss on raw rewards over every row, its
network, settings and epoch rule), by hand, as a smoke training, through `bamasc train` and its checkpoint."""

from __future__ import annotations

import contextlib
import io
import json
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from numpy.testing import assert_allclose

from bamasc.cli import main
from bamasc.policy.checkpoint import load_policy
from bamasc.policy.data import row_data
from bamasc.policy.features import HashedWords
from bamasc.policy.train import (
    Reward,
    TrainConfig,
    build_table,
    create_state,
    fit,
    loss_from_logits,
    reference_config,
    reference_schedule,
    sample_batches,
    train_policy,
)
from tests.policy.synthetic import TEMPLATES, table_rows
from tests.helpers.policy import policy_bam

# The GSM8K file's constants, as the reference's configs/3_training_params.yml has them.
PAPER_REWARD = Reward(success=1000.0, failure=-1000.0, overflow=1000.0, efficiency=0.0001, infeasible=-120.0)
SCALE = 1250.0


def test_the_reference_settings_are_the_references():
    config = reference_config()
    assert (config.objective, config.learning_rate, config.batch_size, config.epochs, config.entropy) == (
        "reference", 0.003, 20000, 10, 0.001)
    assert (config.seed, reference_config("gsm8k").seed, reference_config("math").seed) == (42, 42, 42)
    assert reference_config("mbpp").seed == 123
    assert (config.hidden, config.input_width, config.depth) == (128, 64, 1)
    assert (config.budget_features, config.embedding_scale, config.param_init, config.validation) == (
        "linear", "none", "torch", 0.0)
    # Settings given on top win; a hidden width keeps the first layer at half of it.
    given = reference_config("mbpp", epochs=3, seed=7, hidden=32)
    assert (given.epochs, given.seed, given.hidden, given.input_width, given.learning_rate) == (3, 7, 32, 16, 0.003)


def test_the_step_size_falls_to_0_6_of_itself_every_20_epochs_as_pytorch_steplr():
    schedule = reference_schedule(0.003, steps_per_epoch=3)
    assert_allclose([float(schedule(step)) for step in (0, 59, 60, 119, 120)],
                    [0.003, 0.003, 0.0018, 0.0018, 0.00108], rtol=1e-6)


def test_the_reference_network_has_its_shapes_and_pytorch_initialisation():
    state = create_state(4, reference_config(), 384)
    shapes = {name: (layer["kernel"].shape, layer["bias"].shape) for name, layer in state.params.items()}
    assert shapes == {"embedding": ((384, 64), (64,)), "budget": ((1, 64), (64,)),
                      "hidden0": ((64, 128), (128,)), "logits": ((128, 4), (4,))}
    # nn.Linear: weights and biases uniform in +-1/sqrt(fan_in); the budget layer's fan-in is 1.
    for name, fan_in in (("embedding", 384), ("budget", 1), ("hidden0", 64), ("logits", 128)):
        for part in ("kernel", "bias"):
            values = np.abs(np.asarray(state.params[name][part]))
            assert values.max() <= 1 / math.sqrt(fan_in) and values.max() > 0.5 / math.sqrt(fan_in), (name, part)
    # The budget enters as one number: two budgets change the budget layer's output linearly.
    embedding = jnp.zeros((3, 384))
    logits = [state.apply_fn({"params": state.params}, embedding, jnp.array([b, b, b]), jnp.ones((3, 4), bool))[0]
              for b in (0.0, 0.5, 1.0)]
    assert np.asarray(logits[0] != logits[2]).any()


def test_infeasible_rows_are_trained_on_with_the_infeasible_reward_and_reports_are_unchanged():
    rows = table_rows(tasks_per_cluster=1)  # planner has no binding at 500 µ$
    default = build_table(rows, TEMPLATES, PAPER_REWARD)
    reference = build_table(rows, TEMPLATES, PAPER_REWARD, include_infeasible=True)
    infeasible = [not row.feasible for row in rows]
    assert len(default.sample_action) == len(rows) - sum(infeasible) and len(reference.sample_action) == len(rows)
    assert_allclose(reference.sample_reward[np.array(infeasible)], -120.0)
    assert_allclose(reference.sample_reward[~np.array(infeasible)], default.sample_reward)
    for name in ("feasible", "observed", "outcome_reward", "outcome_success", "outcome_cost"):
        assert np.array_equal(getattr(reference, name), getattr(default, name)), name


def test_the_reference_loss_by_hand_raw_rewards_and_no_mask():
    # Two rows, three templates, nothing masked. Row 1: logits (0, 0, 0), template 0 earned 1000.
    # Row 2: logits (ln 2, 0, 5), template 2 was infeasible there and earned -120.
    logits = jnp.array([[0.0, 0.0, 0.0], [math.log(2.0), 0.0, 5.0]])
    action, reward = jnp.array([0, 2]), jnp.array([1000.0, -120.0])
    z = 3.0 + math.exp(5.0)  # row 2's softmax denominator: pi = (2, 1, e^5) / z
    log_pi = (math.log(1 / 3), 5.0 - math.log(z))
    entropy = (math.log(3) + -sum(p * math.log(p) for p in (2 / z, 1 / z, math.exp(5.0) / z))) / 2
    expected = -(log_pi[0] * 1000.0 + log_pi[1] * -120.0) / 2 - 0.001 * entropy
    behavior = jnp.ones(2)  # the reference's loss reads no behaviour probability
    loss = lambda x: loss_from_logits(x, action, reward, behavior, 0.001, "reference")[0]  # noqa: E731
    assert_allclose(float(loss(logits)), expected, rtol=1e-6)
    # d(-R log pi_a)/dz_j = -R (delta_aj - pi_j) / 2: the infeasible template is pushed down, not masked.
    grad = np.asarray(jax.grad(lambda x: loss_from_logits(x, action, reward, behavior, 0.0, "reference")[0])(logits))
    assert_allclose(grad[1], [-120.0 / 2 * 2 / z, -120.0 / 2 * 1 / z, 120.0 / 2 * (1 - math.exp(5.0) / z)], rtol=1e-5)
    assert grad[1, 2] > 0  # a descent step lowers the infeasible template's logit


def _reference_data(config: TrainConfig, tasks_per_cluster: int = 4):
    table = build_table(table_rows(tasks_per_cluster=tasks_per_cluster), TEMPLATES, PAPER_REWARD, include_infeasible=True)
    samples = np.arange(len(table.sample_action))
    return sample_batches(table, HashedWords().encode(table.texts), SCALE, samples)


def test_smoke_reference_training_lowers_the_loss():
    config = reference_config()
    data = _reference_data(config)
    fitted = fit(data, len(TEMPLATES), config)
    assert len(fitted.history) == 10 == len(fitted.validation)  # every epoch runs: no early stop
    # Raw rewards of +-1000: the loss is in those units, and ten steps of 3e-3 lower it.
    assert fitted.history[-1] < fitted.history[0] - 1.0, fitted.history


def test_the_kept_epoch_is_the_first_best_score_with_the_parameters_after_its_step():
    config = reference_config(epochs=6, batch_size=50)  # several batches per epoch, the last one smaller
    data = _reference_data(config, tasks_per_cluster=6)
    assert len(data["action"]) % 50
    fitted = fit(data, len(TEMPLATES), config)
    scores = fitted.validation
    assert fitted.best_epoch == int(np.argmax(scores)) + 1
    # The same run stopped after the kept epoch ends with exactly the kept parameters.
    again = fit(data, len(TEMPLATES), reference_config(epochs=fitted.best_epoch, batch_size=50))
    same = jax.tree_util.tree_map(lambda a, b: bool(np.array_equal(a, b)), fitted.state.params, again.state.params)
    assert jax.tree_util.tree_all(same)
    assert again.validation == scores[: fitted.best_epoch]


def test_train_policy_trains_on_every_row_without_validation():
    rows = table_rows(tasks_per_cluster=6)
    result = train_policy(rows, TEMPLATES, reference_config(holdout=0.0), HashedWords().encode, SCALE)
    assert result.samples == len(rows)  # the infeasible rows too
    assert result.validation_tasks == 0 and result.validation == [] and len(result.training_scores) == 10


def test_bamasc_train_objective_reference_writes_a_checkpoint_that_loads_as_the_reference_network(tmp_path, capsys):
    bam = policy_bam(tmp_path)
    rows = tmp_path / "offline.jsonl"
    rows.write_text("".join(json.dumps(row_data(r)) + "\n" for r in table_rows(tasks_per_cluster=5, budgets=(500, 875, 1625))))
    (tmp_path / "policies").mkdir()
    checkpoint = str(tmp_path / "policies" / "gsm8k.msgpack")
    argv = ["train", bam, "--data", str(rows), "-o", checkpoint, "--embedding", "hashed", "--objective", "reference",
            "--holdout", "0.2", "--epochs", "4"]
    with contextlib.redirect_stderr(io.StringIO()):
        assert main(argv) == 0
    out = capsys.readouterr().out
    assert "(the reference's rule)" in out and "(4 epochs," in out
    meta = json.loads((tmp_path / "policies" / "gsm8k.json").read_text())
    assert meta["network"] == {"hidden": 128, "depth": 1, "budget": "linear", "input": 64, "embedding_scale": "none"}
    assert meta["config"]["objective"] == "reference" and meta["config"]["seed"] == 42
    assert meta["config"]["learning_rate"] == 0.003 and meta["config"]["epochs"] == 4
    assert meta["validation_reward"] is None and meta["training_score"] is not None
    loaded = load_policy(checkpoint, TEMPLATES)
    assert loaded.module.input_width == 64 and loaded.module.embedding_scale == "none"
    assert loaded.params["embedding"]["kernel"].shape == (384, 64)


@pytest.mark.parametrize("option, value", [("--validation", "0.3"), ("--patience", "3")])
def test_early_stopping_options_do_not_apply_to_the_reference(tmp_path, capsys, option, value):
    bam = policy_bam(tmp_path)
    rows = tmp_path / "offline.jsonl"
    rows.write_text("".join(json.dumps(row_data(r)) + "\n" for r in table_rows(tasks_per_cluster=1)))
    argv = ["train", bam, "--data", str(rows), "-o", str(tmp_path / "p.msgpack"), "--embedding", "hashed",
            "--objective", "reference", option, value]
    assert main(argv) == 2
    assert f"{option} does not apply to --objective reference" in capsys.readouterr().err
