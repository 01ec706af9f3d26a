"""The topology policy: MiniLM features, the Flax network, REINFORCE training, checkpoints and per-task selection.

Importing this package loads nothing heavy; each name below imports its
module (and with it jax, flax or optax) on first use.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from bamasc.policy.checkpoint import load_policy, save_policy
    from bamasc.policy.errors import PolicyError
    from bamasc.policy.data import OfflineRow, collect, read_rows
    from bamasc.policy.features import Features, HashedWords, MiniLM
    from bamasc.policy.model import TopologyPolicy
    from bamasc.policy.select import PolicySelector, selector_for
    from bamasc.policy.train import Reward, TrainConfig, loss_fn, train_policy, train_step

_HOMES = {
    "PolicyError": "errors",
    "load_policy": "checkpoint",
    "save_policy": "checkpoint",
    "OfflineRow": "data",
    "collect": "data",
    "read_rows": "data",
    "Features": "features",
    "HashedWords": "features",
    "MiniLM": "features",
    "TopologyPolicy": "model",
    "PolicySelector": "select",
    "selector_for": "select",
    "Reward": "train",
    "TrainConfig": "train",
    "loss_fn": "train",
    "train_policy": "train",
    "train_step": "train",
}

__all__ = sorted(_HOMES)


def __getattr__(name: str):
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'bamasc.policy' has no attribute {name!r}")
    return getattr(import_module(f"bamasc.policy.{home}"), name)
