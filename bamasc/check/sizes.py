"""Templates the exact binder would refuse for size: lint says so, so compile never has to."""

from __future__ import annotations

import math

from bamasc.diagnostics import Diagnostic, error
from bamasc.limits import MAX_STATEMENT_UNITS
from bamasc.program import Program, Topology
from bamasc.source import Span
from bamasc.syntax import ast


def statement_slots(topology: Topology, expression) -> set[str]:
    """The slots a flow statement names (its call, and a critic or executor), whose counts shape it."""
    names = {slot.name for slot in topology.slots}
    found: set[str] = set()

    def visit(node) -> None:
        if isinstance(node, ast.SlotCall):
            found.add(node.slot)
        for field in getattr(node, "__record_fields__", ()):
            value = getattr(node, field)
            if isinstance(value, ast.Ident) and value.name in names and field != "drafts":
                found.add(value.name)
            elif hasattr(value, "__record_fields__") and not isinstance(value, ast.Ident):
                visit(value)

    visit(expression)
    return found & names


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
