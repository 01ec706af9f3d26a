"""A task's deadline holds while it waits for room in the batch's total budget."""

from __future__ import annotations

import asyncio

from bamasc.plan.lengths import LengthFit
from bamasc.runtime.batch import BatchBudget
from bamasc.runtime.execute import ExecOptions, Task
from bamasc.runtime.providers.base import Completion
from bamasc.runtime.trace import TraceWriter
from bamasc.runtime.workers import Batch, run_chunk
from tests.helpers.runtime import RETRY, compiled

HOLD_AT_MOST_S = 30.0  # a call held for the other task gives up after this, so a regression fails instead of hanging


class Holding:
    """A provider whose calls answer once `release` is called: the first task holds the total meanwhile."""

    name = "remote"

    def __init__(self):
        self.released: asyncio.Event | None = None
        self.sent = 0

    def count_prompt_tokens(self, messages):
        return None

    def release(self):
        self.released.set()

    async def complete(self, messages, max_tokens, *, timeout, decoding=None, expect="text"):
        self.sent += 1
        try:
            await asyncio.wait_for(self.released.wait(), HOLD_AT_MOST_S)
        except TimeoutError:
            pass
        return Completion("#### 7", 5, 1)

    async def aclose(self):
        pass


def test_a_task_waiting_for_room_in_the_total_ends_at_its_deadline(tmp_path):
    plan, program = compiled(
        tmp_path, "fake", "http://unused", "", "latency { first_token = 0.01  per_token = 0.001 }", "deadline = 0.5",
    )
    system = plan.systems[0]
    template = system.template(system.selection["selected"])
    provider = Holding()
    # Room for one task's worst case (at its length: a one-token task): the second waits for the first to settle,
    # which waits for the second to end.
    ledger = BatchBudget(LengthFit(program, system).bound_at(template, 1) * 1.5)
    batch = Batch(program, system, ExecOptions(retry=RETRY), {"remote": provider}, TraceWriter(None), {}, ledger)
    results = {}

    def note(result):
        results[result.task_id] = result
        if result.task_id == "waiting":
            provider.release()

    async def main():
        provider.released = asyncio.Event()
        await run_chunk(batch, [Task("first", "x"), Task("waiting", "y")], 2, note)

    asyncio.run(main())
    waiting = results["waiting"]
    assert (waiting.status, waiting.exhausted, waiting.calls) == ("failed", "deadline", 0), waiting
    assert waiting.error.startswith("deadline") and "waiting for room in the total" in waiting.error
    assert results["first"].status == "ok" and provider.sent == 1
    assert ledger.held == 0 and ledger.spent == results["first"].cost  # giving up held nothing back
