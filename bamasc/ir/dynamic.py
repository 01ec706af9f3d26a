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

from bamasc.ir.requests import EVERY, Card, Decision, FlowValue, steps_value, Seats, Walk, one, seat_decision
from bamasc.syntax import ast


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
    outer = walker.alternative
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
            walker.alternative = outer + ((seat_decision(plan.id, step), slot),)
            try:
                call = walker.call(slot, step % walker.count(slot), f"step{step}", inputs, condition, "dynamic")
            finally:
                walker.alternative = outer
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



def seat_step(decision: str) -> tuple[str, int] | None:
    """(planner call id, step) of a `seat_decision` id; None for a route's (a router call id)."""
    plan, dot, step = decision.rpartition(".seat")
    return (plan, int(step)) if dot and step.isdigit() else None


def same_plan(*decisions: str) -> bool:
    """Are these all step-seat decisions of one dynamic plan?"""
    plans = {at[0] if at else None for at in map(seat_step, decisions)}
    return len(plans) == 1 and None not in plans
