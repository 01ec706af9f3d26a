"""Models no optimal binding needs: each is dominated by another model of the same tier.

Model d dominates model m for a template when, for every role its slots play,
d is of m's tier, its quality is at least m's, its output cap is at most m's
(a smaller output costs less to emit and less for every later call to read),
every rate the bound may bill it at any prompt length is at most the lowest
rate the bound bills m at, and
it is no slower. Then putting d wherever a binding has m keeps the tier
counts and every `require` row, does not lower the quality, and raises neither
the worst-case cost nor the worst-case latency of any call: the best binding
is still there after m is removed from the pool, and the template MILP has
one column fewer per seat. Rates are compared worst against least so that
tiered and cached prices need no case of their own.

Only strict domination removes a model from the pool (d covers m and m does not
cover d), so two identical models both stay. `template.offered_exactly` uses
`covers` per slot, where the first of two identical models is offered. In catalogues of tens of models most are dominated: the binder
benchmark's 50 random models shrink to 5.
"""

from __future__ import annotations

from bamasc.ir.tokens import output_cap
from bamasc.program import Model, Role

# A prompt longer than any the limits allow: every price tier applies below it.
_ANY_PROMPT = 10**12


def undominated(pool: list[Model], roles: list[Role], quality=Model.quality_for) -> list[Model]:
    """`pool` without the models another model of the pool strictly dominates, in pool order.

    `quality(model, role name)` is the quality the objective sees (by value, `value.model_quality`)."""
    profiles = [_profile(model, roles, quality) for model in pool]
    return [
        model
        for model, mine in zip(pool, profiles)
        if not any(_covers(other, mine) and not _covers(mine, other) for other in profiles)
    ]


def covers(d: Model, m: Model, roles: list[Role], quality=Model.quality_for) -> bool:
    """Is `d` at least as good as `m` for these roles in everything the bound and the objective see?"""
    return _covers(_profile(d, roles, quality), _profile(m, roles, quality))


def _profile(model: Model, roles: list[Role], quality) -> tuple:
    prices = model.prices()
    # The bound bills each call at its worst rates for its prompt length (cached reads at the
    # dearer of the two): the least that ever is, is the rate of the shortest prompt.
    highest, lowest = prices.worst_rates(_ANY_PROMPT), prices.worst_rates(0)
    latency = model.latency
    return (
        model.tier,
        tuple(quality(model, role.name) for role in roles),
        tuple(output_cap(role, model) for role in roles),
        # the most the bound may bill it, and the least: per input, output and cache-write token, per request
        (highest.input, highest.output, highest.cache_write, prices.per_request),
        (lowest.input, lowest.output, lowest.cache_write, prices.per_request),
        None if latency is None else (latency.first_token_s, latency.per_output_token_s),
    )


def _covers(d: tuple, m: tuple) -> bool:
    tier, quality, caps, highest, _, latency = d
    m_tier, m_quality, m_caps, _, m_lowest, m_latency = m
    return (
        tier == m_tier
        and (latency is None) == (m_latency is None)
        and all(a >= b for a, b in zip(quality, m_quality))
        and all(a <= b for a, b in zip(caps, m_caps))
        and all(a <= b for a, b in zip(highest, m_lowest))
        and (latency is None or all(a <= b for a, b in zip(latency, m_latency)))
    )
