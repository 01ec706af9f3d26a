"""Sends per prompt (providers/base.SendCounts): counted for each key, bounded in memory, the least recent forgotten."""

from __future__ import annotations

import asyncio

from bamasc.runtime.providers.base import REMEMBERED_PROMPTS, Message, SendCounts
from bamasc.runtime.providers.fake import FakeProvider


def test_each_key_counts_its_own_sends():
    counts = SendCounts()
    assert [counts.take("a"), counts.take("a"), counts.take("b"), counts.take("a")] == [0, 1, 0, 2]
    assert len(counts) == 2


def test_past_the_limit_the_least_recently_sent_prompt_is_forgotten():
    counts = SendCounts(kept=3)
    for key in "abc":
        counts.take(key)
    counts.take("a")  # now the most recent: b is the least recently sent
    counts.take("d")
    assert len(counts) == 3
    assert counts.take("a") == 2 and counts.take("c") == 1 and counts.take("d") == 1
    assert counts.take("b") == 0  # forgotten: it counts from 0 again, as a rerun does


def test_a_fake_provider_keeps_a_bounded_memory_of_its_prompts():
    provider = FakeProvider("f", mode="echo")

    async def send(count: int) -> None:
        for index in range(count):
            await provider.complete([Message("user", f"question {index}")], 8, timeout=60)

    asyncio.run(send(REMEMBERED_PROMPTS + 500))
    assert len(provider._sent) == REMEMBERED_PROMPTS
