"""Unrolls a topology's flow, for given slot counts, into the finite list of calls it may make.

Instance rules (docs/language.md, "Instance order"): instances are numbered
strongest first; `chain` calls them weakest first; `parallel` calls all;
`refine` drafts on executor 0 and in round k audits with critic k and revises
with executor min(k + 1, count - 1); `plan` runs step i on executor i mod count,
and each critic may reject once, forcing one re-plan on planner r mod count.
Every call carries the condition under which it runs, or None if it always does.
"""

from __future__ import annotations

from bamasc.program import Topology
from bamasc.records import record
from bamasc.syntax import ast


@record
class CallNode:
    """One possible call: which seat makes it, and whose outputs it reads."""

    id: str
    slot: str
    instance: int
    role: str
    reads_task: bool
    inputs: tuple[str, ...]  # ids of calls whose outputs are part of this call's prompt
    condition: str | None  # why it might not run; None when it always runs
    combinator: str


@record
class FlowValue:
    """What a flow expression yields: outputs of calls (all of them, or one of them)."""

    task: bool = False
    nodes: tuple[str, ...] = ()
    one_of: bool = False  # True: the value is one of `nodes` (a vote, a refined draft)


@record
class Unrolled:
    calls: tuple[CallNode, ...]
    answer: FlowValue


def call_id(slot: str, instance: int, statement: int, label: str) -> str:
    """A call's id says which seat makes it and where in the flow: `executor[1]@0.revise0`.

    The interpreter derives the same ids while it runs, so every call it makes
    is matched to its bound in the plan.
    """
    return f"{slot}[{instance}]@{statement}.{label}"


def unroll(topology: Topology, counts: dict[str, int]) -> Unrolled:
    return _Unroller(topology, counts).run()


class _Unroller:
    def __init__(self, topology: Topology, counts: dict[str, int]):
        self.topology = topology
        self.counts = counts
        self.calls: list[CallNode] = []
        self.values: dict[str, FlowValue] = {"task": FlowValue(task=True)}
        self.statement = 0

    def run(self) -> Unrolled:
        answer = FlowValue()
        for index, statement in enumerate(self.topology.flow):
            self.statement = index
            value = self.expression(statement.expr)
            if isinstance(statement, ast.Bind):
                self.values[statement.name] = value
            else:
                answer = value
        return Unrolled(tuple(self.calls), answer)

    # ------------------------------------------------------------ helpers

    def count(self, slot: str) -> int:
        return self.counts.get(slot, 0)

    def role(self, slot: str) -> str:
        return self.topology.slot(slot).role

    def args(self, call: ast.SlotCall) -> FlowValue:
        reads_task = False
        nodes: list[str] = []
        for arg in call.args:
            value = self.values.get(arg.name, FlowValue())
            reads_task = reads_task or value.task
            nodes.extend(n for n in value.nodes if n not in nodes)
        return FlowValue(task=reads_task, nodes=tuple(nodes))

    def emit(self, slot: str, instance: int, base: FlowValue, extra: tuple[str, ...], condition, combinator, label) -> str:
        node_id = call_id(slot, instance, self.statement, label)
        inputs = tuple(dict.fromkeys(base.nodes + extra))
        self.calls.append(
            CallNode(node_id, slot, instance, self.role(slot), base.task, inputs, condition, combinator)
        )
        return node_id

    # ------------------------------------------------------------ combinators

    def expression(self, node) -> FlowValue:
        method = getattr(self, "_" + type(node).__name__.lower())
        return method(node)

    def _ref(self, node: ast.Ref) -> FlowValue:
        return self.values.get(node.name, FlowValue())

    def _slotcall(self, node: ast.SlotCall) -> FlowValue:
        if not self.count(node.slot):
            return FlowValue()
        return FlowValue(nodes=(self.emit(node.slot, 0, self.args(node), (), None, "call", "call"),))

    def _chain(self, node: ast.Chain) -> FlowValue:
        base = self.args(node.call)
        previous: tuple[str, ...] = ()
        for position, instance in enumerate(reversed(range(self.count(node.call.slot)))):
            previous = (self.emit(node.call.slot, instance, base, previous, None, "chain", f"chain{position}"),)
        return FlowValue(nodes=previous)

    def _parallel(self, node: ast.Parallel) -> FlowValue:
        base = self.args(node.call)
        nodes = tuple(
            self.emit(node.call.slot, k, base, (), None, "parallel", f"parallel{k}") for k in range(self.count(node.call.slot))
        )
        return FlowValue(nodes=nodes)

    def _vote(self, node: ast.Vote) -> FlowValue:
        value = self.values.get(node.drafts.name, FlowValue())
        return FlowValue(task=value.task, nodes=value.nodes, one_of=True)

    def _refine(self, node: ast.Refine) -> FlowValue:
        slot, critic = node.call.slot, node.critic.name
        writers, critics = self.count(slot), self.count(critic)
        if not writers:
            return FlowValue()
        base = self.args(node.call)
        draft = self.emit(slot, 0, base, (), None, "refine", "draft")
        drafts = [draft]
        for round_ in range(critics):
            reached = None if round_ == 0 else f"critic {round_ - 1} rejected the draft"
            verdict = self.emit(critic, round_, base, (draft,), reached, "refine", f"audit{round_}")
            draft = self.emit(
                slot,
                min(round_ + 1, writers - 1),
                base,
                (draft, verdict),
                f"critic {round_} rejected the draft",
                "refine",
                f"revise{round_}",
            )
            drafts.append(draft)
        return FlowValue(nodes=tuple(drafts), one_of=True)

    def _plan(self, node: ast.Plan) -> FlowValue:
        planner, executor = node.call.slot, node.executor.name
        critic = node.critic.name if node.critic else None
        planners, executors = self.count(planner), self.count(executor)
        critics = self.count(critic) if critic else 0
        if not planners:
            return FlowValue()
        max_steps = int(node.max_steps.value)
        base = self.args(node.call)
        feedback: tuple[str, ...] = ()
        steps: tuple[str, ...] = ()
        for round_ in range(critics + 1):
            replan = None if round_ == 0 else f"critic {round_ - 1} rejected the plan"
            plan = self.emit(planner, round_ % planners, base, feedback, replan, "plan", f"plan{round_}")
            steps = ()
            previous: tuple[str, ...] = ()
            for step in range(max_steps if executors else 0):
                condition = f"the plan has more than {step} steps" + (f" and {replan}" if replan else "")
                previous = (
                    self.emit(executor, step % executors, base, (plan,) + previous, condition, "plan", f"step{round_}.{step}"),
                )
                steps += previous
            if round_ < critics:
                review = self.emit(critic, round_, base, steps, replan, "plan", f"review{round_}")
                feedback = (review,)
        return FlowValue(nodes=steps)
