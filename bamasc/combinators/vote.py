"""`vote(drafts)`: the draft whose extracted answer most drafts share. It makes no call."""

from __future__ import annotations

from bamasc.combinators.requests import EVERY, Decision, FlowValue, Walk
from bamasc.combinators.base import Combinator, Name, register
from bamasc.diagnostics import error
from bamasc.syntax import ast


def _majority(decision: Decision, run):
    """"majority": which of the outputs `among` wins the vote (a call id)."""
    return run.majority(decision.among)


class Vote(Combinator):
    node = ast.Vote
    name = "vote"
    padded = True
    decisions = {"majority": _majority}

    def check(self, node: ast.Vote, flow) -> str:
        kind = flow.value_ref(node.drafts.name, node.drafts.span)
        if kind is not None and kind != "list":
            flow.diagnostics.append(
                error(
                    "BAM307",
                    f"vote needs a list of drafts, and '{node.drafts.name}' is a single value",
                    node.drafts.span,
                    hint="vote over the result of `parallel`",
                )
            )
        return "single"

    def walk(self, walker, node: ast.Vote) -> Walk:
        drafts = walker.values.get(node.drafts.name, FlowValue())
        nodes = drafts.nodes
        if drafts.many and nodes:
            winner = yield Decision("majority", among=nodes)
            nodes = nodes if winner is EVERY else (winner,)
        return FlowValue(task=drafts.task, nodes=nodes, one_of=True)

    def calls(self, node: ast.Vote):
        return []

    def sites(self, node: ast.Vote, optional):
        return []

    def occurrences(self, node: ast.Vote) -> list[Name]:
        return [Name("flow", node.drafts.name, node.drafts.span)]


register(Vote())
