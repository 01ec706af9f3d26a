"""Which models the template MILP offers each slot: the rest are dominated by one it keeps."""

from __future__ import annotations

from bamasc.ir.tokens import output_cap
from bamasc.optimize.problem import SeatProblem


def offered_exactly(problem: SeatProblem, pool, roles) -> tuple[tuple[int, ...], ...]:
    """Per slot, the models worth offering, strongest first.

    A model is left out when the last one kept has its tier, no lower input or
    output price, and no larger output cap for the slot's role: giving its
    seats to the kept one keeps tier counts and order, does not lower quality
    (the strength order puts higher quality first within a tier), and lowers
    every cost the seat pays or makes others pay (a smaller output is a smaller
    input downstream).
    """
    offered = []
    for s, role in enumerate(roles):
        kept: list[int] = []
        for m in problem.strength_order(s):
            if kept and not problem.excluded and _dominates(pool[kept[-1]], pool[m], role):
                continue
            kept.append(m)
        offered.append(tuple(kept))
    return tuple(offered)


def _dominates(kept, model, role) -> bool:
    mine, theirs = _flat_rates(kept), _flat_rates(model)
    return (
        kept.tier == model.tier
        and mine is not None
        and theirs is not None
        and all(a <= b for a, b in zip(mine, theirs))
        and output_cap(role, kept) <= output_cap(role, model)
        and (kept.latency is None) == (model.latency is None)
        and (kept.latency is None or _slower_or_equal(model.latency, kept.latency))
    )


def _flat_rates(model) -> tuple[float, float, float] | None:
    """(input, output, per-request) a bound pays on a model without prompt tiers; None with tiers."""
    pricing = model.prices()
    if pricing.tiers:
        return None
    rates = pricing.worst_rates(0)
    return rates.input, rates.output, pricing.per_request


def _slower_or_equal(a, b) -> bool:
    return a.first_token_s >= b.first_token_s and a.per_output_token_s >= b.per_output_token_s
