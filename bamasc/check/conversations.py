"""Checks that a conversation's marker is one some speaker can write."""

from __future__ import annotations

from bamasc.diagnostics import Diagnostic, Note, error
from bamasc.program import Program
from bamasc.syntax import ast


def check_conversations(program: Program) -> list[Diagnostic]:
    """A marker every speaker's `stop` cuts off can never appear: generation ends before any stop
    string, so an output never holds one, nor any marker that contains one."""
    diagnostics = []
    for topology in program.topologies.values():
        roles = {slot.name: program.roles.get(slot.role) for slot in topology.slots}
        for statement in topology.flow:
            node = statement.expr
            if not isinstance(node, ast.Converse) or not node.marker or not node.marker.value:
                continue
            cut = [(call, _cutting(roles.get(call.slot), node.marker.value)) for call in node.calls]
            if cut and all(stop is not None for _, stop in cut):
                call, stop = cut[0]
                role = roles[call.slot]
                diagnostics.append(
                    error(
                        "BAM312",
                        f"no speaker can ever write {node.marker.raw}: every speaker's role stops before {stop!r}, which it contains",
                        node.marker.span,
                        Note(f"role '{role.name}' stops at {stop!r}", role.spans.get("stop", role.span)),
                        hint="choose a marker without the roles' stop strings in it, or drop those stop strings",
                    )
                )
    return diagnostics


def _cutting(role, marker: str) -> str | None:
    """The stop string of `role` that the marker contains, if any (a role's `stop` overrides its model's)."""
    stops = role.decoding.stop if role is not None else None
    return next((stop for stop in stops or () if stop in marker), None)
