"""A clock for the rate limiter and the deadline guard that moves only when a waiter sleeps."""

from __future__ import annotations

import asyncio


class FakeTime:
    """A clock that moves only when a waiter sleeps, so a test of minutes runs at once.

    The limiter lets only the head of a key's queue sleep, so one sleeper at
    a time moves the clock; `sleeps` keeps every sleep asked for.
    """

    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def clock(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += max(0.0, seconds)
        await asyncio.sleep(0)
