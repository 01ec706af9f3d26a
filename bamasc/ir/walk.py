"""The flow walker: the one place that knows what each combinator calls.

`walk(topology, counts)` is a generator. It yields a `CallRequest` for each call the
flow would make next (a `CallGroup` for calls made together) and receives what
the call returned; it yields a `Decision` where the flow branches on an output
(did the critic approve? how many steps has the plan?) and receives the answer.
It returns the flow's answer as a `FlowValue`.

Two drivers exist. The unroller (`ir/unroll.py`) answers every call with
nothing and every decision with `EVERY`: the walk then takes each loop to its
end, so it visits every call any run can make, and values that depend on a
decision hold every output they could be (`one_of`). The interpreter
(`runtime/interpreter.py`) sends real outputs and real answers. Both get their
call ids from here (`call_id`), so a call made at run time is a node of the
proven graph by construction.

Instance rules (docs/language.md, "Instance order"): instances are numbered
strongest first; `chain` calls them weakest first; `parallel` calls all;
`refine` drafts on executor 0 and in round k audits with critic k and revises
with executor min(k + 1, count - 1); `plan` runs step i on executor i mod count,
and each critic may reject once, forcing one re-plan on planner r mod count;
a dynamic plan runs step i on instance i mod count of the slot its card names
(combinators/dynamic.py); a `reference` combinator calls as the BAMAS reference's engine
does (combinators/reference.py);
`converse` gives every instance of each speaker a turn per round, speakers in
the order written and each slot's instances in order, every turn reading the
transcript so far.
Every call carries the condition under which it runs, or None if it always does.

Each combinator's walk is its class's (bamasc/combinators/): the walker keeps
the flow's values, numbers the calls and composes the combinators' walks. A
new combinator is a new class; its worst-case bound then follows in the unroller,
and its run in the interpreter, with nothing else to change.
"""

from __future__ import annotations

from contextlib import contextmanager

from bamasc.combinators import combinator_of
from bamasc.combinators.requests import (  # the records, used from here by every driver of the walk
    EVERY, TASK, CallGroup, CallRequest, Card, Decision, FlowValue, Seats, Walk, call_id, one, seat_decision,
)
from bamasc.program import Topology
from bamasc.syntax import ast

__all__ = [
    "EVERY", "TASK", "CallGroup", "CallRequest", "Card", "Decision", "FlowValue", "Seats", "Walk",
    "call_id", "one", "padded", "seat_decision", "walk",
]

def padded(node) -> bool:
    """Are the calls of the flow expression `node` at any count of its slots the calls it makes at
    the largest counts, less those of the instances that do not exist (and the reads of those
    calls)? Its combinator says so (`padded`). The binder prices such a statement from its largest
    unroll alone instead of comparing every count's unroll with it. A statement not padded is
    compared (correct, only slower); a combinator marked padded that is not cannot produce a wrong plan,
    because every chosen binding's bound is recomputed from its own unroll (optimize/exact.py), but
    it would refuse plans (BAM504). tests/optimize/test_padded.py checks each padded combinator."""
    return combinator_of(node).padded


def walk(topology: Topology, counts: dict[str, int]) -> Walk:
    """Walk the flow of `topology` with `counts` instances per slot (see the module's docstring)."""
    return _Walker(topology, counts).run()


class _Walker:
    def __init__(self, topology: Topology, counts: dict[str, int]):
        self.topology = topology
        self.counts = counts
        self.values: dict[str, FlowValue] = {"task": TASK}
        self.statement = 0
        self.alternative: tuple[tuple[str, str], ...] = ()  # the branches the walk is inside, outermost first

    def run(self) -> Walk:
        answer = FlowValue()
        for index, statement in enumerate(self.topology.flow):
            self.statement = index
            value = yield from self.expression(statement.expr)
            if isinstance(statement, ast.Bind):
                self.values[statement.name] = value
            else:
                answer = value
        return answer

    # ------------------------------------------------------------ helpers

    def count(self, slot: str) -> int:
        return self.counts.get(slot, 0)

    def args(self, call: ast.SlotCall) -> tuple[tuple[str, FlowValue], ...]:
        return tuple((arg.name, self.values.get(arg.name, FlowValue())) for arg in call.args)

    def call(self, slot: str, instance: int, label: str, inputs, condition: str | None, combinator: str) -> CallRequest:
        # Inside a route's branch, ids name the branch (two branches may call the same seat) and
        # the call runs only when the router chose it.
        prefix = "".join(f"{branch}." for _, branch in self.alternative)
        if self.alternative:
            chosen = " and ".join(f"{decision} chose {branch}" for decision, branch in self.alternative)
            condition = chosen if condition is None else f"{chosen} and {condition}"
        return CallRequest(
            call_id(slot, instance, self.statement, prefix + label),
            slot,
            instance,
            self.topology.slot(slot).role,
            tuple(inputs),
            condition,
            combinator,
            self.alternative,
        )

    @contextmanager
    def within(self, decision: str, branch: str):
        """Calls made inside run only when `decision` chose `branch` (a route's, a dynamic step's seat)."""
        outer = self.alternative
        self.alternative = outer + ((decision, branch),)
        try:
            yield
        finally:
            self.alternative = outer

    def expression(self, node) -> Walk:
        """The walk of one flow expression: its combinator's."""
        return combinator_of(node).walk(self, node)
