"""The flow walk of a dynamic plan: the planner's cards say who does each step and what it reads.

`plan planner(task) using a, b max_steps n dynamic [format f]` calls the
planner once (instance 0), its prompt listing the seats that exist (`{{seats}}`:
the slots named after `using` that have instances). Each of its step cards may
name the slot that does the step (`"by"`, else the first seat) and the earlier
steps it reads (`"reads"`, numbered from 1, else the step before). Step i runs on
instance i mod count of its slot, so a step has one alternative per slot: the
choice of seat is a decision (ir/alternatives.py) and the bound takes the
steps' seats at their costliest combination (`Both` there: a step pays to read
what the seats before it wrote). Its reads are the worst case over every card:
every earlier step, as its seat in that combination wrote it. The answer is the formatter's, reading
every step, when the formatter slot has an instance; otherwise the last step's.
"""

from __future__ import annotations

from bamasc.combinators.requests import EVERY, Card, Decision, FlowValue, steps_value, Seats, Walk, one, seat_decision
from bamasc.combinators.base import Combinator, call_names, read_cards, register, site, slot_name
from bamasc.diagnostics import Note, error
from bamasc.limits import MAX_STEPS
from bamasc.syntax import ast


class Dynamic(Combinator):
    node = ast.Dynamic
    name = "dynamic"
    decisions = {"steps": read_cards, "seat": read_cards, "reads": read_cards}

    def check(self, node: ast.Dynamic, flow) -> str:
        """The planner makes one call; seats once each and none the planner; a step limit; a
        formatter apart from them that makes at most one call. One value: the formatter's answer,
        or the last step's."""
        return check_dynamic(node, flow)

    def walk(self, walker, node: ast.Dynamic) -> Walk:
        return walk_dynamic(walker, node)

    def sites(self, node: ast.Dynamic, optional):
        # Every seat may get any step: the first reads no earlier step, later ones may.
        call = node.call
        found = [site(call, call.slot, call.span, always=("seats",))]
        found += [site(call, seat.name, seat.span, always=("plan", "step"), sometimes=("previous",)) for seat in node.seats]
        if node.formatter is not None:
            found.append(site(call, node.formatter.name, node.formatter.span, always=("steps",)))
        return found

    def occurrences(self, node: ast.Dynamic):
        found = [*call_names(node.call), *map(slot_name, node.seats)]
        return found + ([slot_name(node.formatter)] if node.formatter is not None else [])


def walk_dynamic(walker, node: ast.Dynamic) -> Walk:
    planner = node.call.slot
    if not walker.count(planner) or node.max_steps is None:
        return FlowValue()
    seats = tuple(seat.name for seat in node.seats if walker.count(seat.name))
    roles = tuple(walker.topology.slot(name).role for name in seats)
    base = walker.args(node.call)
    plan = walker.call(planner, 0, "plan", base + (("seats", Seats(seats, roles)),), None, "dynamic")
    yield plan
    limit = int(node.max_steps.value)
    cards = yield Decision("steps", of=plan.id, limit=limit)
    outer = walker.alternative  # the branches the plan is inside (read only: `within` enters one)
    ran: list[tuple[str, ...]] = []  # per step, the calls that may have made it (one per seat)
    for step in range((limit if cards is EVERY else cards) if seats else 0):
        by = yield Decision("seat", of=plan.id, limit=step, among=seats, within=outer)
        reads = yield Decision("reads", of=plan.id, limit=step)
        read = [ran[j] for j in (range(step) if reads is EVERY else reads)]
        inputs = base + (("plan", one(plan.id)), ("step", Card(plan.id, step)))
        if read:
            inputs += (("previous", steps_value(read)),)
        condition = f"the plan has more than {step} steps"
        made = []
        for slot in seats if by is EVERY else (by,):
            with walker.within(seat_decision(plan.id, step), slot):
                call = walker.call(slot, step % walker.count(slot), f"step{step}", inputs, condition, "dynamic")
            yield call
            made.append(call.id)
        ran.append(tuple(made))
    steps = tuple(node_ for made in ran for node_ in made)
    formatter = node.formatter.name if node.formatter else None
    if formatter and walker.count(formatter) and steps:
        call = walker.call(formatter, 0, "format", base + (("steps", steps_value(ran)),), None, "dynamic")
        yield call
        return one(call.id)
    if cards is EVERY:
        return FlowValue(nodes=steps, one_of=True)
    return FlowValue(nodes=ran[-1] if ran else ())



def check_dynamic(node: ast.Dynamic, flow) -> str:
    diagnostics = flow.diagnostics
    flow.call(node.call)
    planner = flow.slot(node.call.slot)
    if planner is not None and (planner.lo < 1 or planner.hi > 1):
        diagnostics.append(error(
            "BAM307",
            f"the planner '{node.call.slot}' of a dynamic plan makes exactly one call, but its slot has range [{planner.lo}..{planner.hi}]",
            node.call.span,
            hint=f"give slot '{node.call.slot}' the range [1..1]",
        ))
    seen: dict[str, ast.Ident] = {}
    for seat in node.seats:
        flow.slot_ref(seat.name, seat.span)
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
    elif not node.max_steps.is_integer or not 1 <= node.max_steps.value <= MAX_STEPS:
        diagnostics.append(error(
            "BAM207", f"max_steps must be a whole number from 1 to {MAX_STEPS}, not {node.max_steps.text}", node.max_steps.span
        ))
    if node.formatter is not None:
        flow.slot_ref(node.formatter.name, node.formatter.span)
        formatter = flow.slot(node.formatter.name)
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


def seat_step(decision: str) -> tuple[str, int] | None:
    """(planner call id, step) of a `seat_decision` id; None for a route's (a router call id)."""
    plan, dot, step = decision.rpartition(".seat")
    return (plan, int(step)) if dot and step.isdigit() else None


def same_plan(*decisions: str) -> bool:
    """Are these all step-seat decisions of one dynamic plan?"""
    plans = {at[0] if at else None for at in map(seat_step, decisions)}
    return len(plans) == 1 and None not in plans


register(Dynamic())
