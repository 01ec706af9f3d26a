"""One forwarded call's attempt through the metering's admission chain, ended exactly once.

The chain is the one `exec` uses (metering/admission.py): the scope's
ledger (metering/scopes.py), then the upstream key's rate pace. This module
only translates what HTTP says into the chain's three endings: a reply with
usage settles, a reply the upstream surely did not bill releases, anything
else keeps the whole hold.
"""

from __future__ import annotations

import asyncio

from bamasc.metering.admission import Admissions, Attempt
from bamasc.metering.rate_headers import parse_retry_after
from bamasc.prices import Usage


class Answer:
    """What the upstream answered, as the chain's links read a reply: its status and rate-limit headers."""

    __slots__ = ("status", "rate_headers", "kind", "retry_after")

    def __init__(self, status: int, headers) -> None:
        self.status = status
        self.rate_headers = dict(headers)
        self.kind = "rate_limited" if status == 429 else None
        self.retry_after = parse_retry_after(self.rate_headers) if status == 429 else None


# Endings under way: a task keeps a strong reference until it is done.
_ENDING: set[asyncio.Task] = set()


class Metered:
    """Ends one admitted attempt exactly once: settled to usage, released, or kept in full.

    The ending runs as its own task, shielded: a client that hangs up cancels
    the request (and every await of a stream's last `finally`), and an ending
    cut there would leave the hold in a shared ledger for ever.
    """

    def __init__(self, chain: Admissions, attempt: Attempt):
        self.chain, self.attempt = chain, attempt
        self.done = False

    def answered(self, status: int, headers) -> None:
        self.attempt.reply = Answer(status, headers)

    async def settle(self, usage: Usage | None) -> None:
        if usage is None:
            await self.keep("the reply reported no usage")
        elif not self.done:
            self.done = True
            await self._end(self.chain.settle(self.attempt, usage))

    async def release(self, why: str) -> None:
        if not self.done:
            self.done = True
            await self._end(self.chain.release(self.attempt, why))

    async def keep(self, why: str) -> None:
        if not self.done:
            self.done = True
            await self._end(self.chain.keep(self.attempt, why))

    @staticmethod
    async def _end(ending) -> None:
        task = asyncio.ensure_future(ending)
        _ENDING.add(task)
        task.add_done_callback(_ENDING.discard)
        await asyncio.shield(task)
