"""Templates the exact binder would refuse for size: lint says so, so compile never has to."""

from __future__ import annotations

import math

from bamasc.combinators import combinator_of
from bamasc.diagnostics import Diagnostic, error
from bamasc.limits import MAX_STATEMENT_UNITS
from bamasc.program import Program, Topology
from bamasc.source import Span


def statement_slots(topology: Topology, expression) -> set[str]:
    """The slots a flow statement names (its calls, and a critic, executor, seat or formatter),
    whose counts shape it (its combinator's `occurrences`)."""
    names = {slot.name for slot in topology.slots}
    return {name.name for name in combinator_of(expression).occurrences(expression) if name.kind == "slot"} & names


def too_many_units(topology: Topology) -> tuple[str, Span] | None:
    """Why the binder cannot model this template and the statement at fault, or None when it can.

    The binder unrolls each flow statement at every count vector of the slots
    that statement names, so the product of those ranges is what must stay small;
    the product over the whole template does not matter.
    """
    ranges = {slot.name: slot.hi - slot.lo + 1 for slot in topology.slots}
    for number, statement in enumerate(topology.flow, 1):
        slots = sorted(statement_slots(topology, statement.expr))
        units = math.prod(ranges[name] for name in slots)
        if units > MAX_STATEMENT_UNITS:
            why = (
                f"statement {number} of template '{topology.name}' calls {', '.join(slots)}, whose slot counts "
                f"combine in {units} ways; the exact binder models at most {MAX_STATEMENT_UNITS} per statement. "
                "Narrow those slot ranges."
            )
            return why, statement.expr.span
    return None


def check_sizes(program: Program) -> list[Diagnostic]:
    """BAM503 for each template a system would bind whose statements combine too many slot counts."""
    bound = dict.fromkeys(name for system in program.systems.values() for name in system.topologies)
    diagnostics = []
    for name in bound:
        topology = program.topologies.get(name)
        found = topology and too_many_units(topology)
        if found:
            why, span = found
            diagnostics.append(error("BAM503", why, span))
    return diagnostics
