"""Checks of flow statements that need their slots' roles (a conversation's marker against the
speakers' stop strings, say): each statement's combinator says what (combinators.Combinator.lint)."""

from __future__ import annotations

from bamasc.combinators import combinator_of
from bamasc.diagnostics import Diagnostic
from bamasc.program import Program


def check_flow_roles(program: Program) -> list[Diagnostic]:
    diagnostics = []
    for topology in program.topologies.values():
        roles = {slot.name: program.roles.get(slot.role) for slot in topology.slots}
        for statement in topology.flow:
            diagnostics.extend(combinator_of(statement.expr).lint(statement.expr, roles))
    return diagnostics
