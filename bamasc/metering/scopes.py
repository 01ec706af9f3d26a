"""A scope of a ledger of many (metering/ledger.py, metering/redis_ledger.py) as one link of an attempt's admission.

The proxy forwards each call through the same chain as `exec`
(metering/admission.py): this link reserves the call's worst case in what is
left of its scope and of the total (`afford`), lowers the output cap to what
that leaves, and at the end settles to the reported usage (`bill`: charged at
the rates of the tier the prompt reached; past the reservation it is charged
as billed and closes the scope as `overbilled`), keeps the whole hold when the
outcome is unknown, or releases it when the upstream surely did not bill.
What the upstream answered is on the attempt (`attempt.reply.status`).
"""

from __future__ import annotations

from bamasc.metering.admission import Admission, Attempt, model_names
from bamasc.metering.afford import Cost, bill
from bamasc.prices import Pricing, Usage
from bamasc.provider_registry import endpoint, server_address


class ScopeLink(Admission):
    def __init__(self, ledger, scope: str, budget: float, cost: Cost, pricing: Pricing, levels: tuple = ()) -> None:
        self.ledger = ledger
        self.levels = levels  # the key's and its team's windows (metering/keys.py), held with the scope
        self.scope = scope
        self.budget = budget  # the budget the request names for its scope (a ledger never raises one)
        self.cost = cost
        self.pricing = pricing

    async def admit(self, attempt: Attempt) -> None:
        hold = await self.ledger.reserve(self.scope, self.budget, attempt.model.name, self.cost, self.levels)
        attempt.reservation = hold
        attempt.max_tokens = hold.tokens

    async def settle(self, attempt: Attempt, usage: Usage | None) -> None:
        hold = attempt.reservation
        status = _status(attempt)
        if usage is None:  # the outcome is unknown: the upstream may have billed it all
            attempt.charged = hold.amount
            await self.ledger.close(hold, hold.amount, {"status": status, "outcome": "kept", "error": attempt.error,
                                                        **_sent_to(attempt)})
            return
        found = bill(self.pricing, usage, hold.model, attempt.prompt_tokens, hold.tokens * attempt.choices,
                     hold.amount)
        attempt.usage, attempt.charged, attempt.rates = usage, found.charge, found.rates
        record = {"status": status, "prompt_tokens": usage.prompt_tokens, "completion_tokens": usage.completion_tokens,
                  "cached_tokens": usage.cached_tokens, "outcome": "settled", **_sent_to(attempt)}
        if found.overbilled:
            attempt.error = record["error"] = f"overbilled: {found.overbilled}"
        await self.ledger.close(hold, found.charge, record, found.overbilled)

    async def release(self, attempt: Attempt) -> None:
        attempt.charged = 0.0
        await self.ledger.close(attempt.reservation, 0.0, {"status": _status(attempt), "outcome": "released",
                                                           **_sent_to(attempt)})


def _sent_to(attempt: Attempt) -> dict:
    """The call line's names of the model (`provider`, `model_id`) and of the upstream it was forwarded to."""
    found = model_names(attempt.model)
    server = server_address(endpoint(attempt.model))
    if server is not None:
        found.update(server_address=server[0], server_port=server[1])
    return found


def _status(attempt: Attempt) -> int | None:
    """The HTTP status the upstream answered with (None: no answer came)."""
    return getattr(attempt.reply, "status", None)


class RefusalLines:
    """The trace's line for a call its scope's chain refused (the chain's `refused` event): nothing was reserved,
    sent or charged, and `error` says which limit ran out, so an operator can count how often scopes hit a cap."""

    def __init__(self, ledger, scope: str) -> None:
        self.ledger, self.scope = ledger, scope

    def __call__(self, event: str, attempt: Attempt) -> None:
        if event == "refused":
            epoch = getattr(self.ledger, "epoch", None)  # a shared ledger's lines name the ledger they were under
            self.ledger.trace.call({"task_id": self.scope, "model": attempt.model.name, **model_names(attempt.model),
                                    "prompt_tokens": attempt.prompt_tokens, "completion_tokens": 0, "reserved": 0.0,
                                    "charged": 0.0, "skipped": True, "outcome": "refused", "error": attempt.error,
                                    **({"epoch": epoch} if epoch else {})})
