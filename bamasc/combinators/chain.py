"""`chain S(args)`: every instance of the slot, weakest first, each reading the one before."""

from __future__ import annotations

from bamasc.combinators.requests import FlowValue, Walk, one
from bamasc.combinators.base import Combinator, register, site
from bamasc.syntax import ast


class Chain(Combinator):
    node = ast.Chain
    name = "chain"
    padded = True

    def walk(self, walker, node: ast.Chain) -> Walk:
        base = walker.args(node.call)
        previous: tuple = ()
        value = FlowValue()
        for position, instance in enumerate(reversed(range(walker.count(node.call.slot)))):
            made = walker.call(node.call.slot, instance, f"chain{position}", base + previous, None, "chain")
            yield made
            value = one(made.id)
            previous = (("previous", value),)
        return value

    def sites(self, node: ast.Chain, optional):
        return [site(node.call, node.call.slot, node.call.span, sometimes=("previous",))]


register(Chain())
