"""Which models the template MILP offers each slot: the rest are covered by one it keeps."""

from __future__ import annotations

from bamasc.optimize.dominance import covers
from bamasc.optimize.problem import SeatProblem


def offered_exactly(problem: SeatProblem, pool, roles) -> tuple[tuple[int, ...], ...]:
    """Per slot, the models worth offering, strongest first.

    A model is left out when one kept before it covers it for the slot's role
    (`dominance.covers`: its tier, no lower quality, no larger output cap, no
    higher rate, no slower): giving its seats to the kept one keeps tier counts
    and order, does not lower quality, and lowers every cost the seat pays or
    makes others pay (a smaller output is a smaller input downstream).
    """
    offered = []
    for s, role in enumerate(roles):
        kept: list[int] = []
        for m in problem.strength_order(s):
            if not problem.excluded and any(covers(pool[k], pool[m], [role]) for k in kept):
                continue
            kept.append(m)
        offered.append(tuple(kept))
    return tuple(offered)
