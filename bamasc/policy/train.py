"""Training the policy on an offline dataset: rewards, the REINFORCE loss, the loop with early stopping.

The default objective is the off-policy (importance-weighted) form of REINFORCE,

    loss = -mean_i( pi(a_i|s_i) / mu(a_i|s_i) * R_i / u ) - beta * mean_i H(pi(.|s_i)),

over logged rows i, with mu the probability that the logging policy chose
a_i (`behavior_prob`; uniform over the templates feasible at that budget
when absent) and u the reward unit, success - failure. It is an unbiased
estimate of the expected reward of pi, and it is bounded: pi <= 1. The
reference's naive form, -mean(log pi(a_i|s_i) * R_i / u), is `objective =
"naive"`, for ablations: on a full-information table every row with a
positive reward pushes its own logit up without limit, so it fits each
training task's lucky templates. `objective = "reference"` (`reference_config`)
is the BAMAS reference's training as a whole: the naive form on raw rewards
over every row, infeasible templates included and unmasked, its network,
settings and seed, and the epoch kept by its own rule (`fit_reference`).

Rewards are divided by u so that beta means the same for any reward
constants. beta is set high enough (0.25 of a unit) that pi keeps some mass
on every template: the weighted loss's gradient for a template is
proportional to its probability, so a template the policy has all but
ruled out could never be learned back. Training stops early when the
argmax policy's reward on validation tasks (a share of the training tasks)
has not improved for `patience` epochs, and keeps the best epoch's
parameters: after a few epochs the network starts to learn each training
task's luck instead of what its kind and budget share.
"""

from __future__ import annotations

import dataclasses
import functools
import os
from dataclasses import dataclass, field

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax.training import train_state

from bamasc.policy.features import budget_feature
from bamasc.policy.table import Reward, Table, build_table, reward_unit, rewards, split_tasks  # noqa: F401 (re-exported)
from bamasc.policy.model import TopologyPolicy
from bamasc.policy.report import estimated_value, heldout_report, policy_choices

OBJECTIVES = ("weighted", "naive", "reference")
# The BAMAS reference's training seed (configs/3_training_params*.yml): 42, and 123 for MBPP.
REFERENCE_SEED = 42
REFERENCE_SEEDS = {"mbpp": 123}
# Its learning-rate schedule, PyTorch's StepLR: times 0.6 every 20 epochs (none within its 10 epochs).
REFERENCE_DECAY_EPOCHS = 20
REFERENCE_DECAY = 0.6


@dataclass(frozen=True)
class TrainConfig:
    hidden: int = 128  # width of the policy's hidden layers
    depth: int = 1  # hidden layers after the first (embedding + budget) layer
    learning_rate: float = 1e-3  # Adam step size; larger ones collapse pi onto the globally best template early
    epochs: int = 100  # the most passes over the training rows
    batch_size: int = 64  # rows per gradient step
    entropy: float = 0.25  # beta, in reward units (success - failure): keeps every template learnable
    seed: int = 0  # parameter initialisation, batch order and the held-out and validation splits
    holdout: float = 0.2  # share of task ids held out for the report (0: none)
    validation: float = 0.25  # share of the training task ids that pick the epoch (0: none, train every epoch)
    patience: int = 10  # epochs without a better validation reward before training stops
    objective: str = "weighted"  # "weighted" (importance-weighted, bounded), "naive" (-log pi * R) or "reference"
    budget_features: str = "steps"  # how the budget enters the network (model.BUDGET_FEATURES)
    input_width: int | None = None  # width of the first (embedding + budget) layer; None: `hidden`
    embedding_scale: str = "unit_rms"  # the embedding's scale before its layer (model.EMBEDDING_SCALES)
    param_init: str = "flax"  # how parameters start (model.INITS)
    reward: Reward = field(default_factory=Reward)  # the reward constants


def reference_config(kind: str | None = None, **given) -> TrainConfig:
    """The BAMAS reference's training (main_train_offline.py, high_level_policy.py and its configs), with
    `given` settings on top: REINFORCE -mean(log pi * R) - 0.001 H on raw rewards, Adam 3e-3, batches
    of 20,000 rows (one batch of a whole table), 10 epochs, the epoch kept by its training-row rule, seed
    42 (123 for MBPP, `kind`); the network 384 -> 64 and budget 1 -> 64, summed, then 64 -> 128 -> K,
    the budget as one number over the scale, the unit-length embedding unscaled, PyTorch's
    initialisation. A `hidden` width given keeps the reference's first layer at half of it."""
    settings = {
        "objective": "reference",
        "learning_rate": 3e-3,
        "batch_size": 20000,
        "epochs": 10,
        "entropy": 0.001,  # on raw rewards: the reference does not divide them
        "seed": REFERENCE_SEEDS.get(kind, REFERENCE_SEED),
        "validation": 0.0,  # the reference keeps its best epoch by the training rows
        "hidden": 128,
        "depth": 1,
        "budget_features": "linear",
        "embedding_scale": "none",
        "param_init": "torch",
        **given,
    }
    settings["input_width"] = max(1, settings["hidden"] // 2)
    return TrainConfig(**settings)


def loss_from_logits(logits, action, reward, behavior, entropy_weight, objective: str = "weighted"):
    """REINFORCE (importance-weighted, or naive) with an entropy bonus; returns (loss, (policy value, mean entropy))."""
    log_probs = jax.nn.log_softmax(logits)
    probs = jnp.exp(log_probs)
    if objective in ("naive", "reference"):
        value = jnp.mean(jnp.take_along_axis(log_probs, action[:, None], axis=1)[:, 0] * reward)
    else:
        taken = jnp.take_along_axis(probs, action[:, None], axis=1)[:, 0]
        value = jnp.mean(taken / behavior * reward)
    # Masked templates have probability exactly 0, so they add 0 * (finite) to the entropy.
    entropy = jnp.mean(-jnp.sum(probs * log_probs, axis=-1))
    return -value - entropy_weight * entropy, (value, entropy)


def loss_fn(params, apply_fn, batch, entropy_weight, objective: str = "weighted"):
    logits = apply_fn({"params": params}, batch["embedding"], batch["budget"], batch["feasible"])
    return loss_from_logits(logits, batch["action"], batch["reward"], batch["behavior"], entropy_weight, objective)


@functools.partial(jax.jit, static_argnames=("objective",))
def train_step(state: train_state.TrainState, batch: dict, entropy_weight, objective: str = "weighted"):
    """One Adam step on one batch; returns the new state and the batch's loss, value and entropy."""
    grad = jax.value_and_grad(loss_fn, has_aux=True)
    (loss, (value, entropy)), grads = grad(state.params, state.apply_fn, batch, entropy_weight, objective)
    return state.apply_gradients(grads=grads), {"loss": loss, "value": value, "entropy": entropy}


def create_state(templates: int, config: TrainConfig, embedding_dim: int, learning_rate=None) -> train_state.TrainState:
    """A new train state; `learning_rate` (a number or an optax schedule) defaults to the config's."""
    module = TopologyPolicy(
        templates=templates, hidden=config.hidden, depth=config.depth, budget_features=config.budget_features,
        input_width=config.input_width, embedding_scale=config.embedding_scale, param_init=config.param_init,
    )
    params = module.init(
        jax.random.PRNGKey(config.seed),
        jnp.zeros((1, embedding_dim), jnp.float32),
        jnp.zeros((1,), jnp.float32),
        jnp.ones((1, templates), bool),
    )["params"]
    rate = config.learning_rate if learning_rate is None else learning_rate
    return train_state.TrainState.create(apply_fn=module.apply, params=params, tx=optax.adam(rate))


def sample_batches(table: Table, embeddings: np.ndarray, scale: float, samples: np.ndarray) -> dict:
    """The training arrays for the given sample indices (embeddings are per state)."""
    states = table.sample_state[samples]
    return {
        "embedding": embeddings[states],
        "budget": budget_feature(table.budgets[states], scale),
        "feasible": table.feasible[states],
        "action": table.sample_action[samples],
        "reward": table.sample_reward[samples],
        "behavior": table.sample_behavior[samples],
    }


@dataclass
class Fitted:
    state: train_state.TrainState  # the chosen epoch's parameters: the best on validation, else the last
    history: list[float]  # mean training loss per epoch run
    validation: list[float]  # validation reward per epoch run (empty without validation)
    best_epoch: int  # the epoch (from 1) whose parameters `state` holds


def fit(data: dict, templates: int, config: TrainConfig, progress=None, validate=None) -> Fitted:
    """Train on the arrays of `sample_batches` (raw rewards; the loss divides them by the reward unit).

    Every epoch visits the rows in a new seeded order; the last partial batch
    is topped up with rows from the start of that order, so every step has the
    same shape and compiles once. With `validate` (train state -> validation
    reward), training stops once `config.patience` epochs in a row have not
    beaten the best, and the best epoch's parameters are kept.
    """
    if config.objective not in OBJECTIVES:
        raise ValueError(f"objective must be one of {', '.join(OBJECTIVES)}, not {config.objective!r}")
    if config.objective == "reference":
        return fit_reference(data, templates, config, progress)
    state = create_state(templates, config, data["embedding"].shape[1])
    device = jax.device_put({**data, "reward": np.asarray(data["reward"] / reward_unit(config.reward), np.float32)})
    count = len(data["action"])
    size = min(config.batch_size, count)
    steps = -(-count // size)
    rng = np.random.default_rng(config.seed)
    entropy_weight = jnp.float32(config.entropy)
    history, scores = [], []
    best_params, best_epoch = state.params, 0
    for epoch in range(config.epochs):
        order = rng.permutation(count)
        order = np.concatenate([order, order[: steps * size - count]])
        losses = []
        for step in range(steps):
            batch = _take(device, jnp.asarray(order[step * size : (step + 1) * size]))
            state, metrics = train_step(state, batch, entropy_weight, config.objective)
            losses.append(metrics["loss"])
        history.append(float(jnp.mean(jnp.stack(losses))))
        if progress is not None:
            progress(epoch + 1, config.epochs)
        if validate is None:
            best_params, best_epoch = state.params, epoch + 1
            continue
        scores.append(validate(state))
        if scores[-1] > max(scores[:-1], default=-np.inf):
            best_params, best_epoch = state.params, epoch + 1
        elif epoch + 1 - best_epoch >= config.patience:
            break
    return Fitted(state.replace(params=best_params), history, scores, best_epoch)


@jax.jit
def reference_step(state: train_state.TrainState, batch: dict, key, entropy_weight):
    """One step of the reference: the templates the policy samples before the step (for its epoch
    score), then one Adam step on the naive loss over raw rewards."""
    logits = state.apply_fn({"params": state.params}, batch["embedding"], batch["budget"], batch["feasible"])
    agree = jax.random.categorical(key, logits) == batch["action"]
    grad = jax.value_and_grad(loss_fn, has_aux=True)
    (loss, (value, entropy)), grads = grad(state.params, state.apply_fn, batch, entropy_weight, "reference")
    metrics = {"loss": loss, "agreed": jnp.sum(agree), "agreed_reward": jnp.sum(jnp.where(agree, batch["reward"], 0.0))}
    return state.apply_gradients(grads=grads), metrics


def reference_schedule(learning_rate: float, steps_per_epoch: int):
    """The reference's step size at each Adam step: `learning_rate`, times REFERENCE_DECAY after every
    REFERENCE_DECAY_EPOCHS epochs."""
    period = steps_per_epoch * REFERENCE_DECAY_EPOCHS

    def schedule(step):
        return learning_rate * REFERENCE_DECAY ** (step // period)

    return schedule


def fit_reference(data: dict, templates: int, config: TrainConfig, progress=None) -> Fitted:
    """The reference's loop: raw rewards, every template unmasked, each epoch's rows in a new seeded
    order in batches of `batch_size` (the last one smaller), its step-size schedule, and the epoch
    kept by its rule: the mean reward of the rows whose template the policy, sampled before each
    step, agreed with (0 where none did), the first best of every epoch run, with the parameters
    after its step."""
    count = len(data["action"])
    size = min(config.batch_size, count)
    schedule = reference_schedule(config.learning_rate, -(-count // size))
    state = create_state(templates, config, data["embedding"].shape[1], schedule)
    device = jax.device_put({**data, "feasible": np.ones_like(data["feasible"])})
    rng = np.random.default_rng(config.seed)
    key = jax.random.PRNGKey(config.seed)
    entropy_weight = jnp.float32(config.entropy)
    history, scores = [], []
    best_params, best_epoch = state.params, 0
    for epoch in range(config.epochs):
        order = rng.permutation(count)
        losses, agreed, agreed_reward = [], 0, 0.0
        for start in range(0, count, size):
            key, draw = jax.random.split(key)
            batch = _take(device, jnp.asarray(order[start : start + size]))
            state, metrics = reference_step(state, batch, draw, entropy_weight)
            losses.append(float(metrics["loss"]))
            agreed += int(metrics["agreed"])
            agreed_reward += float(metrics["agreed_reward"])
        history.append(float(np.mean(losses)))
        scores.append(agreed_reward / agreed if agreed else 0.0)
        if progress is not None:
            progress(epoch + 1, config.epochs)
        if scores[-1] > max(scores[:-1], default=-np.inf):
            best_params, best_epoch = state.params, epoch + 1
    return Fitted(state.replace(params=best_params), history, scores, best_epoch)


@jax.jit
def _take(data: dict, indices):
    return jax.tree_util.tree_map(lambda column: column[indices], data)


def config_data(config: TrainConfig) -> dict:
    return dataclasses.asdict(config)


# ---------------------------------------------------------------- the whole run


@dataclass
class TrainResult:
    state: train_state.TrainState
    history: list[float]  # mean loss per epoch run
    heldout: dict | None  # heldout_report on the held-out tasks; None without a hold-out
    train_tasks: int  # the tasks trained on, validation tasks included
    heldout_tasks: int
    samples: int  # logged runs trained on (the validation tasks' excluded)
    validation_tasks: int = 0
    validation: list[float] = field(default_factory=list)  # validation reward per epoch run
    best_epoch: int = 0  # the epoch whose parameters were kept
    training_scores: list[float] = field(default_factory=list)  # the reference's epoch score per epoch run


def task_states(table: Table, ids: set[str]) -> np.ndarray:
    return np.array([s for s, task in enumerate(table.task_ids) if task in ids], dtype=np.int64)


def train_policy(rows, templates: tuple[str, ...], config: TrainConfig, embed, scale: float, progress=None) -> TrainResult:
    """Train on the rows of the training tasks and report on the held-out ones.

    `embed` maps a list of task texts to their embeddings; `scale` is the
    budget that maps to 1.0. A `config.validation` share of the training
    tasks is kept out of the gradient steps to choose the epoch.
    """
    reference = config.objective == "reference"
    table = build_table(rows, templates, config.reward, include_infeasible=reference)
    train_ids, held_ids = split_tasks(table.task_ids, config.holdout, config.seed)
    validation_share = 0.0 if reference else config.validation  # the reference picks its epoch by the training rows
    fit_ids, validation_ids = split_tasks(sorted(train_ids), validation_share, config.seed + 1)
    samples = np.flatnonzero([table.task_ids[s] in fit_ids for s in table.sample_state])
    if not len(samples):
        raise ValueError("the data has no run of a feasible template on a training task to learn from")
    embeddings = embed(table.texts)
    budgets = budget_feature(table.budgets, scale)
    validate = None
    validation_samples = np.flatnonzero([table.task_ids[s] in validation_ids for s in table.sample_state])
    if len(validation_samples):
        states = task_states(table, validation_ids)

        def validate(state) -> float:
            choices = np.full(len(table.task_ids), -1)
            choices[states] = policy_choices(
                state.params, state.apply_fn, embeddings[states], budgets[states], table.feasible[states]
            )
            return estimated_value(table, validation_samples, choices)

    fitted = fit(sample_batches(table, embeddings, scale, samples), len(templates), config, progress, validate)
    state = fitted.state
    held = task_states(table, held_ids)
    heldout = None
    if len(held):
        choices = policy_choices(state.params, state.apply_fn, embeddings[held], budgets[held], table.feasible[held])
        heldout = heldout_report(table, held, choices)
    return TrainResult(
        state, fitted.history, heldout, len(train_ids), len(held_ids), len(samples),
        validation_tasks=len(validation_ids) if validate else 0, validation=[] if reference else fitted.validation,
        best_epoch=fitted.best_epoch, training_scores=fitted.validation if reference else [],
    )


def network_data(config: TrainConfig) -> dict:
    """The network's shape as the checkpoint records it; fields at their old defaults are left out, so
    checkpoints of the default network read as before."""
    network = {"hidden": config.hidden, "depth": config.depth, "budget": config.budget_features}
    if config.input_width is not None:
        network["input"] = config.input_width
    if config.embedding_scale != "unit_rms":
        network["embedding_scale"] = config.embedding_scale
    return network


def checkpoint_metadata(
    system, embedding: str, scale: float, config: TrainConfig, data_path: str, rows: int, result: TrainResult
) -> dict:
    """What `bamasc train` records beside the parameters (docs/policy.md): what they fit and how well."""
    from bamasc.policy.data import file_sha256
    from bamasc.policy.features import EMBEDDING_DIM

    settings = config_data(config)
    return {
        "system": system.name,
        "templates": list(system.topologies),
        "embedding_model": embedding,
        "embedding_dim": EMBEDDING_DIM,
        "budget_scale": scale,
        "reward": settings["reward"],
        "network": network_data(config),
        "config": settings,
        "data": os.path.basename(data_path),
        "data_sha256": file_sha256(data_path),
        "rows": rows,
        "samples": result.samples,
        "tasks": {"train": result.train_tasks, "validation": result.validation_tasks, "heldout": result.heldout_tasks},
        "epochs_run": len(result.history),
        "best_epoch": result.best_epoch,
        "validation_reward": round(max(result.validation), 6) if result.validation else None,
        **({"training_score": round(max(result.training_scores), 6)} if result.training_scores else {}),
        "final_loss": round(result.history[-1], 6),
        "heldout": result.heldout,
    }
