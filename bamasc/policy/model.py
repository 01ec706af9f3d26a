"""The topology policy network: (task embedding, budget) to one logit per template, infeasible ones masked."""

from __future__ import annotations

import flax.linen as nn
import jax.numpy as jnp

# A masked logit: exp(MASKED - max) is exactly 0 in float32, and unlike -inf it
# keeps softmax, log-softmax and their gradients finite even if a whole row is masked.
MASKED = -1e9


class TopologyPolicy(nn.Module):
    templates: int  # one logit per template, in the system's order
    hidden: int = 128  # width of every hidden layer
    depth: int = 1  # hidden layers after the first (embedding + budget) layer

    @nn.compact
    def __call__(self, embedding, budget, feasible):
        """embedding (B, 384), budget (B,) normalised, feasible (B, templates) bool -> masked logits."""
        # Sentence embeddings have unit norm, so each of their 384 components is about 1/20; rescaled to
        # unit RMS they weigh as much as the budget at initialisation, instead of a twentieth of it.
        unit_rms = embedding * jnp.sqrt(jnp.float32(embedding.shape[-1]))
        h = nn.Dense(self.hidden, name="embedding")(unit_rms) + nn.Dense(self.hidden, name="budget")(budget[:, None])
        h = nn.relu(h)
        for i in range(self.depth):
            h = nn.relu(nn.Dense(self.hidden, name=f"hidden{i}")(h))
        logits = nn.Dense(self.templates, name="logits")(h)
        return mask_logits(logits, feasible)


def mask_logits(logits, feasible):
    return jnp.where(feasible, logits, MASKED)
