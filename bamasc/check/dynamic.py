"""Checks a dynamic plan of a flow: its planner, its seats, its step limit and its formatter."""

from __future__ import annotations

from bamasc.diagnostics import Diagnostic, Note, error
from bamasc.syntax import ast


def check_dynamic(node: ast.Dynamic, call, slot_ref, slot_by_name, most_steps: int, diagnostics: list[Diagnostic]) -> str:
    """Diagnostics for `node`; `call` checks the planner's slot call, `slot_ref` a slot name.
    Returns the plan's kind: one value (the formatter's answer, or the last step's)."""
    call(node.call)
    planner = slot_by_name.get(node.call.slot)
    if planner is not None and (planner.lo < 1 or planner.hi > 1):
        diagnostics.append(error(
            "BAM307",
            f"the planner '{node.call.slot}' of a dynamic plan makes exactly one call, but its slot has range [{planner.lo}..{planner.hi}]",
            node.call.span,
            hint=f"give slot '{node.call.slot}' the range [1..1]",
        ))
    seen: dict[str, ast.Ident] = {}
    for seat in node.seats:
        slot_ref(seat.name, seat.span)
        if seat.name in seen:
            diagnostics.append(error("BAM101", f"seat '{seat.name}' is named twice in this plan", seat.span, Note("the first", seen[seat.name].span)))
        elif seat.name == node.call.slot:
            diagnostics.append(error("BAM307", f"the planner '{seat.name}' cannot do steps of its own plan", seat.span,
                                     hint="declare a separate slot for the steps"))
        seen.setdefault(seat.name, seat)
    if node.max_steps is None:
        diagnostics.append(error(
            "BAM313",
            f"dynamic plan on '{node.call.slot}' has no max_steps, so its cost has no bound",
            node.span,
            hint="add a step limit before `dynamic`, as in `max_steps 6 dynamic`",
        ))
    elif not node.max_steps.is_integer or not 1 <= node.max_steps.value <= most_steps:
        diagnostics.append(error(
            "BAM207", f"max_steps must be a whole number from 1 to {most_steps}, not {node.max_steps.text}", node.max_steps.span
        ))
    if node.formatter is not None:
        slot_ref(node.formatter.name, node.formatter.span)
        formatter = slot_by_name.get(node.formatter.name)
        if node.formatter.name in seen or node.formatter.name == node.call.slot:
            diagnostics.append(error("BAM307", f"the formatter '{node.formatter.name}' is also the planner or a seat of this plan",
                                     node.formatter.span, hint="declare a separate slot for the formatter"))
        elif formatter is not None and formatter.hi > 1:
            diagnostics.append(error(
                "BAM307",
                f"the formatter '{node.formatter.name}' makes at most one call, but its slot may have up to {formatter.hi}",
                node.formatter.span,
                hint=f"give slot '{node.formatter.name}' the range [0..1] (none: the answer is the last step's) or [1..1]",
            ))
    return "single"
