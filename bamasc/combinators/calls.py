"""A plain slot call, `solver(task, notes)`, and a flow value read by name, `drafts`."""

from __future__ import annotations

from bamasc.combinators.requests import FlowValue, Walk, one
from bamasc.combinators.base import Combinator, Name, call_names, register, site
from bamasc.diagnostics import error
from bamasc.syntax import ast


class SlotCall(Combinator):
    """One call of instance 0 of the slot; a slot that may have more instances is BAM307."""

    node = ast.SlotCall
    name = "call"
    padded = True

    def check(self, node: ast.SlotCall, flow) -> str:
        flow.call(node)
        slot = flow.slot(node.slot)
        if slot is not None and slot.hi > 1:
            flow.diagnostics.append(
                error(
                    "BAM307",
                    f"'{node.slot}(...)' calls one instance, but slot '{node.slot}' may have up to {slot.hi}",
                    node.span,
                    hint=f"use `chain {node.slot}(...)` or `parallel {node.slot}(...)`, or give the slot range [1..1]",
                )
            )
        return "single"

    def walk(self, walker, node: ast.SlotCall) -> Walk:
        if not walker.count(node.slot):
            return FlowValue()
        made = walker.call(node.slot, 0, "call", walker.args(node), None, "call")
        yield made
        return one(made.id)

    def calls(self, node: ast.SlotCall) -> list[ast.SlotCall]:
        return [node]

    def sites(self, node: ast.SlotCall, optional):
        return [site(node, node.slot, node.span)]

    def occurrences(self, node: ast.SlotCall) -> list[Name]:
        return call_names(node)


class Ref(Combinator):
    """A value bound earlier in the flow; it makes no call."""

    node = ast.Ref
    name = "ref"
    padded = True

    def check(self, node: ast.Ref, flow) -> str:
        return flow.value_ref(node.name, node.span) or "single"

    def walk(self, walker, node: ast.Ref) -> Walk:
        return walker.values.get(node.name, FlowValue())
        yield  # a generator that makes no call

    def calls(self, node: ast.Ref) -> list[ast.SlotCall]:
        return []

    def sites(self, node: ast.Ref, optional):
        return []

    def occurrences(self, node: ast.Ref) -> list[Name]:
        return [Name("flow", node.name, node.span)]


register(SlotCall())
register(Ref())
