"""The budget guard: reserve the worst case before every call, settle to reported usage after.

Spent never exceeds the budget by construction: a call starts only when its
reservation (prompt tokens, exactly counted or safely bounded, times the input
price, plus max_tokens times the output price) fits in what is left; when it
does not, max_tokens is lowered to what fits, and below a useful minimum the
call is not made. A call whose outcome is unknown (timeout, dropped
connection) keeps its whole reservation. Retries reserve again from the same
budget.

The reservation pays the dearest rates the prompt could be billed at (the
tier above when the prompt could cross a threshold; a cached read never
assumed cheaper); settling charges the tier the reported prompt reached and
credits cached reads only as reported (`bamasc.prices`). The promise holds for
every provider that bills no more than the prompt it was given and the
`max_tokens` it was sent. A reply that reports more (more
completion tokens than the cap, more prompt tokens than the reservation
counted, a cache write bamasc never asked for that takes the charge past the
reservation) is charged as billed and marks the guard `overbilled`: no further
call of the task is reserved, and the task ends with that status.

A resumed task starts from what the trace holds for it (`spent`): a crash
never resets its ledger.

A run's attempts reach the guard as one link of their admission
(metering/admission.py, `BudgetLink`): reserve to admit, `settle_usage` to
settle, `keep` for an outcome unknown, `release` for an attempt surely not
processed.

`PosthocGuard` is the BAMAS paper's monitor (stop once spent >= budget,
checked only after spending): the baseline of the overrun benchmark, and the
check of a system that says `budget_check = after` (the reference-mode rows
of the paper kit, docs/paper.md). It is never the default.
"""

from __future__ import annotations

from bamasc.metering.afford import MIN_USEFUL_TOKENS, afford, bill, worst_case
from bamasc.prices import Pricing, Rates, Usage
from bamasc.records import record


@record
class Reservation:
    """Money held for one call attempt before it is made."""

    model: str
    prompt_tokens: int  # exact count or safe upper bound
    max_tokens: int  # after clamping
    requested_tokens: int  # the cap the call wanted
    amount: float  # µ$ held
    price_input: float  # the rates held: the dearest the prompt could be billed at
    price_output: float
    pricing: Pricing | None = None  # what settling charges by


    @property
    def clamped(self) -> bool:
        return self.max_tokens < self.requested_tokens


class BudgetGuard:
    """One task's ledger. All amounts in µ$."""

    kind = "reserve"

    def __init__(self, budget: float, min_useful_tokens: int = MIN_USEFUL_TOKENS, spent: float = 0.0):
        self.budget = budget
        self.min_useful_tokens = min_useful_tokens
        self.charged = spent  # settled: reported usage, kept reservations, and earlier runs' charges
        self.held = 0.0  # reservations of calls in flight
        self.overbilled: str | None = None  # why the provider's bill broke the promise, once it has

    @property
    def remaining(self) -> float:
        return self.budget - self.charged - self.held

    def reserve(self, model, prompt_tokens: int, max_tokens: int) -> Reservation | None:
        """Hold the worst case of a call, clamping max_tokens to fit; None means: do not call."""
        if self.overbilled:
            return None
        pricing = model.prices()
        rates = pricing.worst_rates(prompt_tokens)
        fit = afford(self.remaining, worst_case(pricing, prompt_tokens, max_tokens, self.min_useful_tokens))
        if fit is None:
            return None
        tokens, amount = fit
        self.held += amount
        return Reservation(model.name, prompt_tokens, tokens, max_tokens, amount, rates.input, rates.output, pricing)

    def settle(self, reservation: Reservation, prompt_tokens: int, completion_tokens: int,
               cached_tokens: int = 0, cache_write_tokens: int = 0) -> float:
        """Charge the usage the provider reported; returns the charge."""
        usage = Usage(prompt_tokens, completion_tokens, cached_tokens, cache_write_tokens)
        return self.settle_usage(reservation, usage)[0]

    def settle_usage(self, reservation: Reservation, usage: Usage) -> tuple[float, Rates]:
        """Charge `usage` at the rates of the tier its prompt reached; returns the charge and those rates.

        Usage beyond what the reservation allowed is charged as billed and
        marks the guard overbilled.
        """
        self.held -= reservation.amount
        pricing = reservation.pricing or Pricing(reservation.price_input, reservation.price_output)
        found = bill(pricing, usage, reservation.model, reservation.prompt_tokens, reservation.max_tokens,
                     reservation.amount)
        self.charged += found.charge
        if found.overbilled and not self.overbilled:
            self.overbilled = found.overbilled
        return found.charge, found.rates

    def keep(self, reservation: Reservation) -> float:
        """The outcome is unknown (the provider may have billed it): charge the whole reservation."""
        self.held -= reservation.amount
        self.charged += reservation.amount
        return reservation.amount

    def release(self, reservation: Reservation) -> float:
        """The request surely was not processed (e.g. 429, refused): charge nothing."""
        self.held -= reservation.amount
        return 0.0

    def hold(self, amount: float) -> bool:
        """Hold `amount` µ$ (a tool call's price) before it is spent; False when the budget has no room for it."""
        if self.overbilled or amount > self.remaining + 1e-9:
            return False
        self.held += amount
        return True

    def settle_held(self, held: float, charge: float) -> float:
        """Charge `charge` µ$ for what `hold` held (`held`): the tool's price once it ran, 0 when it did not."""
        self.held -= held
        self.charged += charge
        return charge

    @property
    def overran(self) -> bool:
        return self.charged > self.budget * (1 + 1e-9)


def guard_class(option: str = "reserve", budget_check: str = "before"):
    """The guard of a run's tasks: the after-the-fact check when the run asks for it (`exec --guard
    posthoc`) or the system declares it (`budget_check = after`); no check at all where the system says
    `budget_check = none` (a baseline's real cost, recorded); else the reserve-before-call guard."""
    if budget_check == "none":
        return RecordingGuard
    return PosthocGuard if option == "posthoc" or budget_check == "after" else BudgetGuard


class PosthocGuard(BudgetGuard):
    """The paper's check, for the overrun benchmark only: spend first, compare afterwards."""

    kind = "posthoc"

    def reserve(self, model, prompt_tokens: int, max_tokens: int, checked: bool = True) -> Reservation | None:
        # Only what was already spent is compared with the budget; the call
        # about to be made is neither bounded nor clamped. A call that is not
        # `checked` (the reference's planner-driven calls) is never stopped.
        if checked and self.charged >= self.budget:
            return None
        pricing = model.prices()
        amount = sum(pricing.worst_cost(prompt_tokens, max_tokens))
        rates = pricing.worst_rates(prompt_tokens)
        self.held += amount
        return Reservation(model.name, prompt_tokens, max_tokens, max_tokens, amount, rates.input, rates.output, pricing)

    def hold(self, amount: float, checked: bool = True) -> bool:
        if checked and self.charged >= self.budget:
            return False
        self.held += amount
        return True


class RecordingGuard(PosthocGuard):
    """No check at all: every call is made and charged as billed (`budget_check = none`), so a baseline
    framework's real cost shows beside the guarded rows. Only its template's bound limits it."""

    kind = "none"

    def reserve(self, model, prompt_tokens: int, max_tokens: int, checked: bool = True) -> Reservation | None:
        return super().reserve(model, prompt_tokens, max_tokens, checked=False)

    def hold(self, amount: float, checked: bool = True) -> bool:
        return super().hold(amount, checked=False)
