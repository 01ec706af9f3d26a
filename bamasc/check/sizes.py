"""Templates the exact binder would refuse for size: lint says so, so compile never has to."""

from __future__ import annotations

import math

from bamasc.diagnostics import Diagnostic, error
from bamasc.limits import MAX_COUNT_VECTORS
from bamasc.program import Program, Topology


def too_many_vectors(topology: Topology) -> str | None:
    """Why the binder cannot enumerate this template's slot counts, or None when it can."""
    vectors = math.prod(slot.hi - slot.lo + 1 for slot in topology.slots)
    if vectors <= MAX_COUNT_VECTORS:
        return None
    return (
        f"template '{topology.name}' allows {vectors} slot-count combinations; the exact binder enumerates "
        f"at most {MAX_COUNT_VECTORS}. Narrow the slot ranges."
    )


def check_sizes(program: Program) -> list[Diagnostic]:
    """BAM503 for each template a system would bind that has too many slot-count combinations."""
    bound = dict.fromkeys(name for system in program.systems.values() for name in system.topologies)
    diagnostics = []
    for name in bound:
        topology = program.topologies.get(name)
        why = topology and too_many_vectors(topology)
        if why:
            diagnostics.append(error("BAM503", why, topology.span))
    return diagnostics
