"""Fallback models: where a call goes when its seat's model's provider keeps failing, within the call's reservation.

A model may name fallbacks (`fallback = [a, b]`, docs/language.md). When a
call's attempts on its seat's model are spent (the retry policy's attempts)
and the last one failed as a provider that keeps failing does (a server
error, a timeout, a broken or refused connection: `retry.provider_failing`),
the call goes to the first fallback whose worst case fits the call's
reservation: the hold of the seat model's last attempt. A fallback's worst
case is the call's prompt bound counted for the fallback's own tokenizer, at
its dearest input rate for that prompt, plus the output cap the last attempt
was sent with (or the fallback's `max_output`, where smaller) at its output
rate (metering/afford.py: `worst_case`, `within`). A fallback dearer than that
is passed over for the next one. The one chosen gets the retry policy's
attempts of its own, each admitted by the same chain as any attempt (the
deadline, the budget guard, its provider key's pace; under a deadline, a
fallback that declares no latency is passed over), so each reserves afresh
from the task's budget, as a retry does, and holds no more than the seat's
model held. When its last attempt fails the same way, the next fallback that
fits is tried; a refusal of the request (4xx), a 429, a malformed reply, or
no fallback left ends the call as it ended before fallbacks. A budget or
deadline refusal is never a provider failing: it stops the task, as ever.

What the seat model's failed attempts were charged (a 500 keeps its hold,
metering/replies.py) stays charged; the fallback's attempts are new holds on
what the budget has left, so the task's budget caps it all, and no attempt
on a fallback holds more than the seat's model held for the call (which,
for a task within the plan's assumed length, is at most what the plan's
bound counts for the call's first attempt).
"""

from __future__ import annotations

from bamasc.metering.afford import within, worst_case
from bamasc.runtime.outcomes import TaskError
from bamasc.runtime.retry import provider_failing
from bamasc.runtime.structured import structured


class ModelFailed(Exception):
    """A call's attempts on one model are spent without an answer: the model, its last error and last attempt."""

    def __init__(self, model, error, attempt) -> None:
        super().__init__(error.message)
        self.model = model
        self.error = error  # the last attempt's ProviderError
        self.attempt = attempt  # the last attempt: its reservation, the cap it was sent with, its error line

    def task_error(self, node, tried: list[str] = ()) -> TaskError:
        """The error the call ends the task with; `tried` says what became of each fallback."""
        ended = f"{node.id} on {self.model.name}: {self.error.message}"
        return TaskError(ended + (f"; fallbacks: {'; '.join(tried)}" if tried else ""))


async def fall_back(run, failed: ModelFailed, request, node, role, provider, messages, prompt_tokens: int,
                    expect: str, tools: tuple, round: int | None):
    """The Completion of the first of the seat model's fallbacks that fits the call's reservation and answers;
    `failed` is how the seat's model (`provider`, whose count `prompt_tokens` started from) ended."""
    seat = failed.model
    if not seat.fallbacks or not provider_failing(failed.error):
        raise failed.task_error(node)
    held = failed.attempt.reservation.amount  # the call's reservation: the seat model's last hold
    sent = failed.attempt.max_tokens
    # What the call's bound adds to the provider's own count of the messages (a tool loop's conversation so far
    # and its tools' specs, counted for any tokenizer): the same for every model.
    added = max(0, prompt_tokens - run.count_prompt(provider, messages))
    tried: list[str] = []
    skipped: list[str] = []
    last = failed
    for name in seat.fallbacks:
        model = run.program.models[name]
        if name not in run.providers:
            tried.append(f"{name}: the run made no provider for it")
            continue
        if model.latency is None and run.clock.deadline is not None:
            tried.append(f"{name}: it declares no latency, so no attempt on it can be timed against the deadline")
            continue
        backup = structured(run.providers[name], role.output_schema)
        cap = sent if model.max_output is None else min(sent, model.max_output)
        bound = run.count_prompt(backup, messages) + added
        if not within(held, worst_case(model.prices(), bound, cap)):
            skipped.append(name)
            tried.append(f"{name}: its worst case is dearer than the call's reservation of {held:.4f} µ$")
            continue
        note = {"fallback_from": seat.name, "fallback_reason": last.attempt.error}
        if skipped:
            note["fallback_skipped"] = list(skipped)
        try:
            return await run.attempts(request, node, role, model, backup, messages, bound, cap, expect, tools, round,
                                      note)
        except ModelFailed as again:
            tried.append(f"{name}: {again.error.message}")
            if not provider_failing(again.error):
                raise failed.task_error(node, tried) from None
            last = again
    raise failed.task_error(node, tried)
