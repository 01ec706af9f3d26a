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
(ir/dynamic.py); a `reference` combinator calls as the BAMAS reference's engine
does (ir/reference.py);
`converse` gives every instance of each speaker a turn per round, speakers in
the order written and each slot's instances in order, every turn reading the
transcript so far.
Every call carries the condition under which it runs, or None if it always does.

A new combinator is one method here, `_<node type>`, that yields its calls and
decisions; its worst-case bound then follows in the unroller, and its run in
the interpreter, with nothing else to change.
"""

from __future__ import annotations

from bamasc.ir.dynamic import walk_dynamic
from bamasc.ir import reference
from bamasc.ir.requests import (  # the records, used from here by every driver of the walk
    EVERY, TASK, CallGroup, CallRequest, Card, Decision, FlowValue, Seats, Walk, call_id, one, seat_decision,
)
from bamasc.program import Topology
from bamasc.syntax import ast

__all__ = [
    "EVERY", "PADDED", "TASK", "CallGroup", "CallRequest", "Card", "Decision", "FlowValue", "Seats", "Walk",
    "call_id", "one", "seat_decision", "walk",
]

# Combinators whose calls at any count of their slot are the calls they make at
# the largest count, less those of the instances that do not exist (and the
# reads of those calls): the binder prices them from their largest unroll
# alone instead of comparing every count's unroll with it. A combinator not
# named here is compared (correct, only slower); naming one here that is not
# padded cannot produce a wrong plan, because every chosen binding's bound is
# recomputed from its own unroll (optimize/exact.py), but it would refuse plans
# (BAM504). tests/optimize/test_padded.py checks each one named here.
PADDED = frozenset({"Ref", "SlotCall", "Chain", "Parallel", "Vote"})


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

    # ------------------------------------------------------------ combinators

    def expression(self, node) -> Walk:
        return getattr(self, "_" + type(node).__name__.lower())(node)

    def _ref(self, node: ast.Ref) -> Walk:
        return self.values.get(node.name, FlowValue())
        yield  # a generator that makes no call

    def _slotcall(self, node: ast.SlotCall) -> Walk:
        if not self.count(node.slot):
            return FlowValue()
        made = self.call(node.slot, 0, "call", self.args(node), None, "call")
        yield made
        return one(made.id)

    def _chain(self, node: ast.Chain) -> Walk:
        if node.reference:
            return (yield from reference.reference_chain(self, node))
        base = self.args(node.call)
        previous: tuple = ()
        value = FlowValue()
        for position, instance in enumerate(reversed(range(self.count(node.call.slot)))):
            made = self.call(node.call.slot, instance, f"chain{position}", base + previous, None, "chain")
            yield made
            value = one(made.id)
            previous = (("previous", value),)
        return value

    def _parallel(self, node: ast.Parallel) -> Walk:
        if node.reference:
            return (yield from reference.reference_parallel(self, node))
        base = self.args(node.call)
        calls = tuple(
            self.call(node.call.slot, k, f"parallel{k}", base, None, "parallel") for k in range(self.count(node.call.slot))
        )
        yield CallGroup(calls)
        return FlowValue(nodes=tuple(c.id for c in calls), many=True)

    def _vote(self, node: ast.Vote) -> Walk:
        if node.reference:
            return (yield from reference.reference_vote(self, node))
        drafts = self.values.get(node.drafts.name, FlowValue())
        nodes = drafts.nodes
        if drafts.many and nodes:
            winner = yield Decision("majority", among=nodes)
            nodes = nodes if winner is EVERY else (winner,)
        return FlowValue(task=drafts.task, nodes=nodes, one_of=True)

    def _refine(self, node: ast.Refine) -> Walk:
        if node.reference:
            return (yield from reference.reference_refine(self, node))
        slot, critic = node.call.slot, node.critic.name
        writers = self.count(slot)
        if not writers:
            return FlowValue()
        base = self.args(node.call)
        draft = self.call(slot, 0, "draft", base, None, "refine")
        yield draft
        ends = []  # the drafts the loop may end on
        for round_ in range(self.count(critic)):
            reached = None if round_ == 0 else f"critic {round_ - 1} rejected the draft"
            audit = self.call(critic, round_, f"audit{round_}", base + (("solution", one(draft.id)),), reached, "refine")
            yield audit
            approved = yield Decision("approved", of=audit.id)
            if approved is not False:
                ends.append(draft.id)
            if approved:
                break
            draft = self.call(
                slot,
                min(round_ + 1, writers - 1),
                f"revise{round_}",
                base + (("solution", one(draft.id)), ("feedback", one(audit.id))),
                f"critic {round_} rejected the draft",
                "refine",
            )
            yield draft
        else:
            ends.append(draft.id)
        return FlowValue(nodes=tuple(ends), one_of=True)

    def _plan(self, node: ast.Plan) -> Walk:
        planner, executor = node.call.slot, node.executor.name
        critic = node.critic.name if node.critic else None
        planners, executors = self.count(planner), self.count(executor)
        critics = self.count(critic) if critic else 0
        if not planners:
            return FlowValue()
        max_steps = int(node.max_steps.value)
        base = self.args(node.call)
        feedback: tuple = ()
        steps: tuple[str, ...] = ()
        for round_ in range(critics + 1):
            replan = None if round_ == 0 else f"critic {round_ - 1} rejected the plan"
            plan = self.call(planner, round_ % planners, f"plan{round_}", base + feedback, replan, "plan")
            yield plan
            cards = yield Decision("steps", of=plan.id, limit=max_steps)
            steps = ()
            previous: tuple = ()
            for step in range((max_steps if cards is EVERY else cards) if executors else 0):
                condition = f"the plan has more than {step} steps" + (f" and {replan}" if replan else "")
                inputs = base + (("plan", one(plan.id)), ("step", Card(plan.id, step))) + previous
                made = self.call(executor, step % executors, f"step{round_}.{step}", inputs, condition, "plan")
                yield made
                steps += (made.id,)
                previous = (("previous", one(made.id)),)
            if round_ < critics:
                review = self.call(critic, round_, f"review{round_}", base + (("solution", FlowValue(nodes=steps, many=True)),), replan, "plan")
                yield review
                approved = yield Decision("approved", of=review.id)
                if approved:
                    break
                feedback = (("feedback", one(review.id)),)
        return FlowValue(nodes=steps, many=True)

    def _converse(self, node: ast.Converse) -> Walk:
        approver = node.approver.name if node.approver else None
        marker = node.marker.value if node.marker else None
        if approver:
            stop = f"{approver} has not approved yet"
        else:
            stop = f"no turn has said {marker!r} yet" if marker is not None else None
        rounds = int(node.max_rounds.value) if node.max_rounds else 0
        turns: tuple[str, ...] = ()
        checked = False  # some earlier turn, at the largest counts, may have ended the conversation
        for round_ in range(rounds):
            for call in node.calls:
                base = self.args(call)
                for instance in range(self.count(call.slot)):
                    transcript = (("transcript", FlowValue(nodes=turns, many=True)),) if turns else ()
                    made = self.call(call.slot, instance, f"turn{round_}", base + transcript, stop if checked else None, "converse")
                    yield made
                    turns += (made.id,)
                    if approver == call.slot:
                        ended = yield Decision("approved", of=made.id)
                    elif marker is not None:
                        ended = yield Decision("mentions", of=made.id, marker=marker)
                    else:
                        continue
                    checked = True
                    if ended:
                        return FlowValue(nodes=turns, many=True)
                # Whether a turn is conditional must not depend on the counts (a
                # speaker at count 0 still comes before the next), so that at a
                # smaller count the turns are the largest count's minus the
                # missing instances, and the binder prices the conversation from
                # its largest unroll (it is a padded statement).
                checked = checked or approver == call.slot or marker is not None
        return FlowValue(nodes=turns, many=True)
    # `reference` forms (ast.ReferenceChain, ...) are subclasses; the methods above read `node.reference`.
    _referencechain, _referenceparallel, _referencevote, _referencerefine = _chain, _parallel, _vote, _refine

    def _referencedynamic(self, node: ast.Dynamic) -> Walk:
        return reference.reference_dynamic(self, node)

    def _dynamic(self, node: ast.Dynamic) -> Walk:
        return walk_dynamic(self, node)

    # ------------------------------------------------------------ route

    def _route(self, node: ast.Route) -> Walk:
        """The router once (instance 0), then the branch its output names; the unroller walks every
        branch, each under its own alternative, and the value is one of the branches' values.
        Without a router instance (a count the binder tries when it relaxes rules) it calls nothing."""
        if not self.count(node.call.slot):
            return FlowValue()
        router = self.call(node.call.slot, 0, "route", self.args(node.call), None, "route")
        yield router
        fallback = node.fallback.name if node.fallback else None
        names = tuple(branch.name for branch in node.branches)
        chosen = yield Decision("branch", of=router.id, among=names, fallback=fallback, within=self.alternative)
        outer = self.alternative
        values, options = [], []
        for branch in node.branches:
            if chosen is not EVERY and chosen != branch.name:
                continue
            self.alternative = outer + ((router.id, branch.name),)
            try:
                values.append((yield from self.expression(branch.expr)))
                options.append((self.alternative, values[-1]))
            finally:
                self.alternative = outer
        if chosen is not EVERY:
            return values[0] if values else FlowValue()
        nodes = tuple(dict.fromkeys(n for value in values for n in value.nodes))
        return FlowValue(
            task=any(v.task for v in values), nodes=nodes, one_of=True, many=any(v.many for v in values),
            options=tuple(options),
        )
