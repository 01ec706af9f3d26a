"""Prompt token counts: the safe byte bound, and exact OpenAI counts from the offline tokenizer."""

from __future__ import annotations

import base64
import gzip
import hashlib
import importlib.resources

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bamasc.runtime.providers.base import Message
from bamasc.runtime.tokens import (
    MESSAGE_OVERHEAD_TOKENS,
    OPENAI_REPLY_PRIMING,
    OPENAI_TOKENS_PER_MESSAGE,
    encoding_for,
    exact_prompt_tokens,
    safe_prompt_bound,
    tokenizer_available,
)

TEXTS = [
    "",
    "hello world",
    "Solve this problem step by step: Natalia sold clips to 48 of her friends in April.",
    "def add(a, b):\n    return a + b\n",
    "Größenordnung — naïve café",
    "日本語のテキスト",
    "🙂🚀👍🏽",
    "👩‍👩‍👧‍👦 family, 🏳️‍🌈 flag",
    "<|endoftext|>",
    "  \n\n  x",
    "\t\t\t    \n\r\n   ",
    "A" * 5000,
    "1234567890" * 50,
    "```python\nfor i in range(10):\n    print(f'{i:>4}')  # ←\n```",
    "Ω≈ç√∫˜µ≤≥÷ ¡™£¢∞§¶•ªº–≠ الْعَرَبِيَّة हिन्दी ไทย",
]
MODELS = ["gpt-4o", "gpt-4o-mini", "gpt-4.1-nano", "o3-mini", "gpt-4", "gpt-3.5-turbo"]

# Token counts of TEXTS[1:8] from tiktoken 0.14 itself (encode_ordinary), with
# its official cl100k_base and o200k_base files (hashes checked).
KNOWN = {
    "cl100k_base": [2, 21, 12, 9, 8, 11],
    "o200k_base": [2, 19, 12, 8, 6, 6],
}

# OpenAI's token-counting cookbook example, with the prompt_tokens the API
# reported for it: 129 on gpt-3.5-turbo and gpt-4, 124 on gpt-4o.
COOKBOOK = [
    (
        "system",
        None,
        "You are a helpful, pattern-following assistant that translates corporate jargon into plain English.",
    ),
    ("system", "example_user", "New synergies will help drive top-line growth."),
    ("system", "example_assistant", "Things working well together will increase revenue."),
    (
        "system",
        "example_user",
        "Let's circle back when we have more bandwidth to touch base on opportunities for increased leverage.",
    ),
    ("system", "example_assistant", "Let's talk later when we're less busy about how to do better."),
    ("user", None, "This late pivot means we don't have time to boil the ocean for the client deliverable."),
]
COOKBOOK_REPORTED = {"gpt-4": 129, "gpt-3.5-turbo": 129, "gpt-4o": 124, "gpt-4o-mini": 124}

# bpe_openai loads its vocabulary files through a deprecated importlib call.
quiet_vocabulary_load = pytest.mark.filterwarnings("ignore:open_binary is deprecated:DeprecationWarning")
needs_tokenizer = pytest.mark.skipif(not tokenizer_available(), reason="the offline OpenAI tokenizer is not installed")


def conversation(text: str) -> list[Message]:
    return [Message("system", "You are a careful assistant."), Message("user", text), Message("assistant", text[:7])]


def test_safe_bound_is_bytes_plus_overhead_per_message():
    messages = [Message("system", "héllo"), Message("user", "🙂 x")]
    assert MESSAGE_OVERHEAD_TOKENS == 8
    assert safe_prompt_bound(messages) == (6 + 8) + (6 + 8)
    assert safe_prompt_bound([]) == 0


def test_safe_bound_survives_a_lone_surrogate():
    assert safe_prompt_bound([Message("user", "a\ud800b")]) == 5 + MESSAGE_OVERHEAD_TOKENS


@pytest.mark.parametrize(
    ("model_id", "encoding"),
    [
        ("gpt-4o", "o200k_base"),
        ("gpt-4o-mini-2024-07-18", "o200k_base"),
        ("chatgpt-4o-latest", "o200k_base"),
        ("gpt-4.1-nano", "o200k_base"),
        ("gpt-5-mini", "o200k_base"),
        ("o1", "o200k_base"),
        ("o3-mini", "o200k_base"),
        ("o4-mini-2025-04-16", "o200k_base"),
        ("ft:gpt-4o-mini-2024-07-18:acme::abc123", "o200k_base"),
        ("gpt-4", "cl100k_base"),
        ("gpt-4-turbo", "cl100k_base"),
        ("gpt-4-0613", "cl100k_base"),
        ("gpt-3.5-turbo", "cl100k_base"),
        ("o200k_base", "o200k_base"),
        ("deepseek-chat", None),
        ("claude-sonnet-4-5", None),
        ("o1x", None),
        ("gpt-4.7", None),
        (None, None),
    ],
)
def test_model_families_map_to_their_encoding(model_id, encoding):
    assert encoding_for(model_id) == encoding


def test_unknown_models_get_no_exact_count():
    assert exact_prompt_tokens("deepseek-chat", conversation("hello")) is None
    assert exact_prompt_tokens(None, conversation("hello")) is None


@needs_tokenizer
@pytest.mark.parametrize("encoding", sorted(KNOWN))
def test_exact_counts_match_tiktoken_known_values(encoding):
    model = "gpt-4o" if encoding == "o200k_base" else "gpt-4"
    framing = OPENAI_REPLY_PRIMING + OPENAI_TOKENS_PER_MESSAGE + 1  # one message; "user" is one token
    counts = [exact_prompt_tokens(model, [Message("user", text)]) - framing for text in TEXTS[1:7]]
    assert counts == KNOWN[encoding]


@needs_tokenizer
@quiet_vocabulary_load
@pytest.mark.parametrize("model", sorted(COOKBOOK_REPORTED))
def test_count_bounds_what_the_api_reported_by_one_token_per_message(model):
    import bpe_openai

    encoding = bpe_openai.get_encoding(encoding_for(model))
    messages = [Message(role, content) for role, _, content in COOKBOOK]
    # Our messages carry no `name`; OpenAI charges a name's tokens plus one.
    names = sum(1 + len(encoding.encode_ordinary(name)) for _, name, _ in COOKBOOK if name)
    counted = exact_prompt_tokens(model, messages) + names
    reported = COOKBOOK_REPORTED[model]
    assert counted >= reported
    assert counted - reported == len(messages) * (OPENAI_TOKENS_PER_MESSAGE - 3)


@needs_tokenizer
@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("text", TEXTS, ids=range(len(TEXTS)))
def test_safe_bound_is_at_least_the_exact_count(model, text):
    messages = conversation(text)
    exact = exact_prompt_tokens(model, messages)
    assert exact is not None
    assert exact <= safe_prompt_bound(messages)


@needs_tokenizer
@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from(["system", "user", "assistant"]), st.text(max_size=300)),
        min_size=1,
        max_size=4,
    ),
    st.sampled_from(MODELS),
)
def test_safe_bound_dominates_exact_counts_for_any_text(pairs, model):
    messages = [Message(role, content) for role, content in pairs]
    assert exact_prompt_tokens(model, messages) <= safe_prompt_bound(messages)


@needs_tokenizer
def test_text_past_the_tokenizer_limit_still_gets_a_safe_answer():
    huge = [Message("user", "ab " * 300_000)]  # past bpe-openai's 200k-token limit per text
    counted = exact_prompt_tokens("gpt-4o", huge)
    assert counted is None or counted <= safe_prompt_bound(huge)


@needs_tokenizer
@quiet_vocabulary_load
@pytest.mark.parametrize("encoding", ["cl100k_base", "o200k_base"])
def test_offline_tokens_equal_tiktoken_with_its_official_files(encoding, monkeypatch):
    """tiktoken itself, with its own pattern, fed the vocabulary the offline package ships (hash-checked)."""
    tiktoken = pytest.importorskip("tiktoken")
    openai_public = pytest.importorskip("tiktoken_ext.openai_public")
    import bpe_openai

    def load_shipped(url, expected_hash=None):
        name = url.rsplit("/", 1)[1]
        data = gzip.decompress(importlib.resources.files("bpe_openai.data").joinpath(name + ".gz").read_bytes())
        assert hashlib.sha256(data).hexdigest() == expected_hash
        return {
            base64.b64decode(token): int(rank) for token, rank in (line.split() for line in data.splitlines() if line)
        }

    monkeypatch.setattr(openai_public, "load_tiktoken_bpe", load_shipped)
    reference = tiktoken.Encoding(**getattr(openai_public, encoding)())
    offline = bpe_openai.get_encoding(encoding)
    for text in TEXTS:
        assert offline.encode_ordinary(text) == reference.encode_ordinary(text)


@needs_tokenizer
@pytest.mark.parametrize("base_url, tokenizer, exact", [
    (None, None, True),  # OpenAI's own API: the name is the model
    ("https://api.openai.com/v1", None, True),
    ("http://127.0.0.1:9/v1", None, False),  # another server: the name may be any model
    ("https://gateway.example.com/v1", None, False),
    ("http://127.0.0.1:9/v1", "gpt-4o", True),  # unless the model declares its tokenizer
    ("http://127.0.0.1:9/v1", "o200k_base", True),
])
def test_a_model_is_counted_exactly_by_its_name_only_at_openai(base_url, tokenizer, exact):
    from bamasc.runtime.providers.openai_provider import OpenAIProvider

    provider = OpenAIProvider("m", "gpt-4o-mini", api_key="k", base_url=base_url, tokenizer=tokenizer)
    counted = provider.count_prompt_tokens([Message("user", "abcdefgh" * 100)])
    assert (counted is not None) == exact
