"""Ending a forwarded call's hold exactly once (settled to usage, released, or kept in full), and its key's pace."""

from __future__ import annotations

import asyncio

from bamasc.runtime.limiter import rate_key
from bamasc.runtime.providers.failures import parse_retry_after


class Pace:
    """One upstream key's turn under the rate limiter (the limits its models declare, adapted to the headers
    its replies send); nothing when no limiter paces the model."""

    def __init__(self, limiter, model):
        self.limiter = limiter
        self.key = rate_key(model) if limiter is not None else None

    async def turn(self, tokens: int) -> None:
        if self.key is not None:
            await self.limiter.acquire(self.key, tokens)

    def answered(self, status: int | None, headers) -> None:
        if self.key is None or headers is None:
            return
        self.limiter.observe(self.key, dict(headers))
        if status == 429:
            self.limiter.penalise(self.key, parse_retry_after(dict(headers)))


# Ledger closes under way: a task keeps a strong reference until it is done.
_CLOSING: set[asyncio.Task] = set()


class Closing:
    """Ends one hold exactly once: charged to usage, released, or kept in full.

    The ledger's close runs as its own task, shielded: a client that hangs up
    cancels the request (and every await of a stream's last `finally`), and a
    close cut there would leave the hold in a shared ledger for ever.
    """

    pace: Pace | None = None

    def __init__(self, ledger, hold, protocol: str, prompt_bound: int, pricing, choices: int):
        self.ledger, self.hold, self.protocol = ledger, hold, protocol
        self.prompt_bound, self.pricing, self.choices = prompt_bound, pricing, choices
        self.done = False

    async def settle(self, usage, status: int) -> None:
        if self.done:
            return
        if not usage.complete:
            await self.keep("the reply reported no usage")
            return
        from bamasc.prices import Usage

        self.done = True
        charge, _ = self.pricing.charge(Usage(usage.prompt, usage.completion, usage.cached, usage.cache_write))
        excess = []
        if usage.completion > self.hold.tokens * self.choices:
            excess.append(f"{usage.completion} completion tokens for a cap of {self.hold.tokens}")
        if usage.prompt > self.prompt_bound:
            excess.append(f"{usage.prompt} prompt tokens where {self.prompt_bound} were reserved")
        if not excess and charge > self.hold.amount * (1 + 1e-9) + 1e-9:
            excess.append(f"{charge:.4f} µ$ where {self.hold.amount:.4f} were reserved")
        overbilled = f"{self.hold.model} billed " + " and ".join(excess) if excess else None
        await self._close(charge, {"status": status, "prompt_tokens": usage.prompt, "completion_tokens": usage.completion,
                                   "cached_tokens": usage.cached, "outcome": "settled",
                                   **({"error": f"overbilled: {overbilled}"} if overbilled else {})}, overbilled)

    async def release(self, status: int) -> None:
        if not self.done:
            self.done = True
            await self._close(0.0, {"status": status, "outcome": "released"})

    async def keep(self, why: str, status: int | None = None) -> None:
        if not self.done:
            self.done = True
            await self._close(self.hold.amount, {"status": status, "outcome": "kept", "error": why})

    async def _close(self, charged: float, record: dict, overbilled: str | None = None) -> None:
        task = asyncio.ensure_future(self.ledger.close(self.hold, charged, record, overbilled))
        _CLOSING.add(task)
        task.add_done_callback(_CLOSING.discard)
        await asyncio.shield(task)
