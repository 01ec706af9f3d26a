"""The topology policy network: (task embedding, budget) to one logit per template, infeasible ones masked."""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

# A masked logit: exp(MASKED - max) is exactly 0 in float32, and unlike -inf it
# keeps softmax, log-softmax and their gradients finite even if a whole row is masked.
MASKED = -1e9

# The budget as soft steps: one sigmoid of log2(budget / scale) per centre, a quarter octave apart
# from 1/16 of the scale to 1.4 times it, each rising over about a sixteenth of an octave.
STEP_CENTRES = tuple(-4.0 + 0.25 * i for i in range(19))
STEP_WIDTH = 1.0 / 16
BUDGET_FEATURES = ("steps", "linear")  # "linear": the budget / scale itself, as checkpoints before the steps read it


def budget_encoding(budget, features: str):
    """(B,) budgets over the scale -> (B, F) inputs of the budget layer.

    The right template changes at budget thresholds. A linear input makes the
    network learn each threshold as a ramp, and the point where a ramp crosses
    shifts with each task's embedding, so tasks of one kind switch templates
    at different budgets. With steps a threshold between two budgets is one
    weight on the step between them.
    """
    if features == "linear":
        return budget[:, None]
    octaves = jnp.log2(jnp.maximum(budget, 1e-9))[:, None]
    return jax.nn.sigmoid((octaves - jnp.asarray(STEP_CENTRES)[None, :]) / STEP_WIDTH)


EMBEDDING_SCALES = ("unit_rms", "none")  # "none": the unit-length embedding as it is, as the BAMAS reference reads it
INITS = ("flax", "torch")  # "torch": PyTorch's nn.Linear initialisation, as the BAMAS reference's network starts


class TopologyPolicy(nn.Module):
    templates: int  # one logit per template, in the system's order
    hidden: int = 128  # width of every hidden layer
    depth: int = 1  # hidden layers after the first (embedding + budget) layer
    budget_features: str = "steps"  # how the budget enters: BUDGET_FEATURES
    input_width: int | None = None  # width of the first (embedding + budget) layer; None: `hidden`
    embedding_scale: str = "unit_rms"  # EMBEDDING_SCALES
    param_init: str = "flax"  # INITS: how parameters start (the shapes, and so checkpoints, do not depend on it)

    @nn.compact
    def __call__(self, embedding, budget, feasible):
        """embedding (B, 384), budget (B,) normalised, feasible (B, templates) bool -> masked logits."""
        if self.embedding_scale == "unit_rms":
            # Sentence embeddings have unit norm, so each of their 384 components is about 1/20; rescaled to
            # unit RMS they weigh as much as the budget at initialisation, instead of a twentieth of it.
            embedding = embedding * jnp.sqrt(jnp.float32(embedding.shape[-1]))
        budget_in = budget_encoding(budget, self.budget_features)
        width = self.input_width or self.hidden
        h = self._dense(width, "embedding", embedding.shape[-1])(embedding)
        h = nn.relu(h + self._dense(width, "budget", budget_in.shape[-1])(budget_in))
        for i in range(self.depth):
            h = nn.relu(self._dense(self.hidden, f"hidden{i}", h.shape[-1])(h))
        logits = self._dense(self.templates, "logits", h.shape[-1])(h)
        return mask_logits(logits, feasible)

    def _dense(self, features: int, name: str, fan_in: int) -> nn.Dense:
        if self.param_init == "flax":
            return nn.Dense(features, name=name)
        # PyTorch's nn.Linear: weights and biases uniform in +-1/sqrt(fan_in).
        bound = 1.0 / float(fan_in) ** 0.5

        def uniform(key, shape, dtype=jnp.float32):
            return jax.random.uniform(key, shape, dtype, -bound, bound)

        return nn.Dense(features, name=name, kernel_init=uniform, bias_init=uniform)


def mask_logits(logits, feasible):
    return jnp.where(feasible, logits, MASKED)
