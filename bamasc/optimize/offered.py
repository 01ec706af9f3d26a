"""Which models the template MILP offers each slot: the rest are covered by one it keeps."""

from __future__ import annotations

from bamasc.optimize.dominance import covers
from bamasc.optimize.problem import SeatProblem


def offered_exactly(problem: SeatProblem, pool, roles) -> tuple[tuple[int, ...], ...]:
    """Per slot, the models worth offering, strongest first.

    A model is left out when one kept before it covers it for the slot's role
    (`dominance.covers`: its tier, no lower quality, no larger output cap, no
    higher rate, no slower): giving its seats to the kept one keeps tier counts
    and order, does not lower quality (as the problem's objective sees it), and lowers every cost the seat pays or
    makes others pay (a smaller output is a smaller input downstream).
    """
    offered = []
    for s, role in enumerate(roles):
        kept: list[int] = []
        for m in problem.strength_order(s):
            if not problem.excluded and any(_covers(problem, s, k, m, pool, role) for k in kept):
                continue
            kept.append(m)
        offered.append(tuple(kept))
    return tuple(offered)


def _covers(problem: SeatProblem, slot: int, k: int, m: int, pool, role) -> bool:
    # Quality as the seat problem holds it: by value, the slot's weight x quality (optimize/value.py).
    return problem.quality[slot][k] >= problem.quality[slot][m] and covers(pool[k], pool[m], [role], _no_quality)


def _no_quality(model, role: str) -> float:
    return 0.0
