"""Policy checkpoints: the parameters as Flax msgpack, and a metadata JSON beside them that says what they fit.

`policy.msgpack` holds the parameters; `policy.json` (the same name with
`.json`) holds the template names in logit order, the embedding model, the
budget scale, the reward constants, the network's shape, the SHA-256 of the
training data and of the parameters, and the held-out metrics. Loading checks
the parameters against their hash, and the templates and embedding model
against what the caller has.
"""

from __future__ import annotations

import hashlib
import json
import os

from bamasc.policy.errors import PolicyError
from bamasc.records import record

FORMAT_VERSION = 1


def metadata_path(checkpoint: str) -> str:
    return os.path.splitext(checkpoint)[0] + ".json"


def _replace(path: str, data: bytes) -> None:
    temporary = path + ".tmp"
    with open(temporary, "wb") as handle:
        handle.write(data)
    os.replace(temporary, path)


def save_policy(path: str, params, metadata: dict) -> str:
    """Write the parameters and their metadata (with format and parameter hash added); returns the metadata path."""
    from flax import serialization

    data = serialization.to_bytes(params)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    _replace(path, data)
    meta = {"format_version": FORMAT_VERSION, **metadata, "params_sha256": hashlib.sha256(data).hexdigest()}
    target = metadata_path(path)
    _replace(target, (json.dumps(meta, indent=2) + "\n").encode("utf-8"))
    return target


@record
class LoadedPolicy:
    params: object
    module: object  # model.TopologyPolicy
    metadata: dict
    path: str

    @property
    def templates(self) -> tuple[str, ...]:
        return tuple(self.metadata["templates"])

    @property
    def embedding_model(self) -> str:
        return self.metadata["embedding_model"]

    @property
    def budget_scale(self) -> float:
        return float(self.metadata["budget_scale"])


def read_metadata(path: str) -> dict:
    meta_path = metadata_path(path)
    if not os.path.isfile(path):
        raise PolicyError(f"no policy checkpoint at {path}; train one with `bamasc train FILE --data ROWS.jsonl -o {path}`")
    if not os.path.isfile(meta_path):
        raise PolicyError(f"{path} has no metadata file {meta_path} beside it; it was not written by `bamasc train`")
    try:
        with open(meta_path, encoding="utf-8") as handle:
            meta = json.load(handle)
    except json.JSONDecodeError as problem:
        raise PolicyError(f"{meta_path} is not JSON: {problem.msg}") from None
    missing = [k for k in ("templates", "embedding_model", "budget_scale", "network", "params_sha256") if k not in meta]
    if missing:
        raise PolicyError(f"{meta_path} lacks {', '.join(missing)}; retrain the policy")
    if meta.get("format_version") != FORMAT_VERSION:
        raise PolicyError(f"{meta_path} has format version {meta.get('format_version')}; this bamasc reads {FORMAT_VERSION}")
    return meta


def check_match(meta: dict, path: str, templates=None, embedding_models=None) -> None:
    """Raise PolicyError unless the checkpoint's templates and embedding model are the caller's."""
    if templates is not None and set(meta["templates"]) != set(templates):
        missing = [t for t in templates if t not in meta["templates"]]
        extra = [t for t in meta["templates"] if t not in templates]
        parts = []
        if missing:
            parts.append(f"the system's {', '.join(missing)} {'is' if len(missing) == 1 else 'are'} not in it")
        if extra:
            parts.append(f"it scores {', '.join(extra)}, which the system does not have")
        raise PolicyError(
            f"policy {path} was trained for templates {', '.join(meta['templates'])}, but the system has "
            f"{', '.join(templates)} ({'; '.join(parts)}); retrain it on data collected for this system"
        )
    if embedding_models is not None and meta["embedding_model"] not in embedding_models:
        raise PolicyError(
            f"policy {path} was trained on {meta['embedding_model']} embeddings, which this bamasc does not have "
            f"(it has {', '.join(embedding_models)}); retrain it"
        )


def load_policy(path: str, templates=None) -> LoadedPolicy:
    """The checkpoint at `path`, checked: its parameter hash, templates (when given) and embedding model."""
    import jax
    import jax.numpy as jnp
    from flax import serialization

    from bamasc.policy.features import EMBEDDING_DIM, EMBEDDING_MODELS
    from bamasc.policy.model import BUDGET_FEATURES, EMBEDDING_SCALES, TopologyPolicy

    meta = read_metadata(path)
    check_match(meta, path, templates, EMBEDDING_MODELS)
    with open(path, "rb") as handle:
        data = handle.read()
    if hashlib.sha256(data).hexdigest() != meta["params_sha256"]:
        raise PolicyError(f"{path} does not match the parameter hash in {metadata_path(path)}; it was changed or damaged")
    count = len(meta["templates"])
    network = meta["network"]
    # Checkpoints written before the budget steps existed read the budget linearly, and say nothing.
    budget = network.get("budget", "linear")
    if budget not in BUDGET_FEATURES:
        raise PolicyError(f"{metadata_path(path)} reads the budget as {budget!r}, which this bamasc does not know; retrain it")
    # Checkpoints of the default network say nothing of its first layer's width or the embedding's scale.
    scale = network.get("embedding_scale", "unit_rms")
    if scale not in EMBEDDING_SCALES:
        raise PolicyError(f"{metadata_path(path)} scales the embedding as {scale!r}, which this bamasc does not know; retrain it")
    module = TopologyPolicy(templates=count, hidden=network["hidden"], depth=network["depth"], budget_features=budget,
                            input_width=network.get("input"), embedding_scale=scale)
    shapes = module.init(
        jax.random.PRNGKey(0), jnp.zeros((1, EMBEDDING_DIM)), jnp.zeros((1,)), jnp.ones((1, count), bool)
    )["params"]
    try:
        params = serialization.from_bytes(shapes, data)
    except (ValueError, KeyError, TypeError) as problem:
        raise PolicyError(f"{path} does not hold parameters of the network its metadata describes: {problem}") from None
    expected = jax.tree_util.tree_map(jnp.shape, shapes)
    if jax.tree_util.tree_map(jnp.shape, params) != expected:
        raise PolicyError(f"{path} does not hold parameters of the network its metadata describes (layer shapes differ)")
    return LoadedPolicy(params, module, meta, path)
