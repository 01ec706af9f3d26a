"""`parallel S(args)`: every instance of the slot at once, on the same inputs; a list of drafts."""

from __future__ import annotations

from bamasc.combinators.requests import CallGroup, FlowValue, Walk
from bamasc.combinators.base import Combinator, register
from bamasc.syntax import ast


class Parallel(Combinator):
    node = ast.Parallel
    name = "parallel"
    padded = True

    def check(self, node: ast.Parallel, flow) -> str:
        flow.call(node.call)
        return "list"

    def walk(self, walker, node: ast.Parallel) -> Walk:
        base = walker.args(node.call)
        calls = tuple(
            walker.call(node.call.slot, k, f"parallel{k}", base, None, "parallel")
            for k in range(walker.count(node.call.slot))
        )
        yield CallGroup(calls)
        return FlowValue(nodes=tuple(c.id for c in calls), many=True)


register(Parallel())
