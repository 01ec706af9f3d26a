"""The arithmetic of money, the same for every surface: how large a call fits, and what its bill says.

`afford` sizes a reservation: the prompt's worst cost in full, then as many
output tokens (on each choice) as what is left pays for, never more than the
cap asked for, and nothing below a useful minimum. `bill` reads a reported
usage against what was reserved: its charge at the rates of the tier the
prompt reached, and, when the usage passes the reservation (more output than
the cap, more prompt than the bound, a charge above the amount held), the
words that close a task or a scope as `overbilled`.

`exec`'s budget guard (metering/guard.py) and the proxy's ledgers
(metering/ledger.py, metering/redis_ledger.py) both reserve with `afford`
and settle with `bill`. `worst_case` prices a call at a model's dearest rates
for its prompt, and `within` says whether the whole of such a call fits in an
amount already held: a fallback model is tried only where it does
(runtime/fallbacks.py).
"""

from __future__ import annotations

import math

from bamasc.prices import Pricing, Rates, Usage
from bamasc.records import record, replace

# A call that could emit fewer tokens than this is not worth making.
MIN_USEFUL_TOKENS = 16


@record
class Cost:
    """What one call may cost: its input side in full, and each output token on each of its choices."""

    input_cost: float  # µ$: the prompt bound at the dearest rate it could be billed, plus any per-request price
    output_rate: float  # µ$ per output token
    choices: int
    requested: int  # the output cap wanted
    min_tokens: int = MIN_USEFUL_TOKENS


def afford(left: float, cost: Cost) -> tuple[int, float] | None:
    """(output tokens, µ$ held) of the largest call that fits in `left`, or None below a useful one."""
    room = left - cost.input_cost
    if room < 0:
        return None
    per_token = cost.output_rate * cost.choices
    tokens = cost.requested if per_token <= 0 else min(cost.requested, math.floor(room / per_token + 1e-9))
    if tokens < min(cost.min_tokens, cost.requested):
        return None
    return tokens, cost.input_cost + per_token * tokens


def worst_case(pricing: Pricing, prompt_tokens: int, max_tokens: int, min_tokens: int = MIN_USEFUL_TOKENS) -> Cost:
    """The `Cost` of one call of at most `prompt_tokens` prompt tokens and `max_tokens` output tokens at the dearest
    rates `pricing` could bill that prompt (the tier above when it could cross a threshold)."""
    rates = pricing.worst_rates(prompt_tokens)
    input_cost, _ = pricing.worst_cost(prompt_tokens, 0)
    return Cost(input_cost, rates.output, 1, max_tokens, min_tokens)


def within(held: float, cost: Cost) -> bool:
    """Whether the whole of `cost`, its full output cap on every choice, fits in `held` µ$."""
    return afford(held, replace(cost, min_tokens=cost.requested)) is not None


@record
class Bill:
    """A reported usage read against its reservation."""

    charge: float  # µ$, at the rates of the tier the prompt reached; cached reads credited only as reported
    rates: Rates
    overbilled: str | None  # how the usage passed the reservation (None: it did not)


def bill(pricing: Pricing, usage: Usage, model: str, prompt_bound: int, output_cap: int, held: float) -> Bill:
    """`usage` charged by `pricing`, against a reservation of `prompt_bound` prompt tokens, `output_cap` output
    tokens (every choice's together) and `held` µ$."""
    charge, rates = pricing.charge(usage)
    excess = []
    if usage.completion_tokens > output_cap:
        excess.append(f"{usage.completion_tokens} completion tokens for a cap of {output_cap}")
    if usage.prompt_tokens > prompt_bound:
        excess.append(f"{usage.prompt_tokens} prompt tokens where {prompt_bound} were reserved")
    if not excess and charge > held * (1 + 1e-9) + 1e-9:
        excess.append(f"{usage.cache_write_tokens} cache-write tokens, {charge:.4f} µ$ where {held:.4f} were reserved")
    return Bill(charge, rates, f"{model} billed " + " and ".join(excess) if excess else None)
