"""`refine S(args) with C until approved`: a draft, then rounds of a critic's audit and a revision.

Executor 0 drafts; in round k critic k audits the draft (`{{solution}}`) and,
unless it approves, executor min(k + 1, count - 1) revises it reading the
audit (`{{feedback}}`). The answer is the draft the loop ends on.
"""

from __future__ import annotations

from bamasc.combinators.requests import Decision, FlowValue, Walk, one
from bamasc.combinators.base import Combinator, call_names, register, site, slot_name, verdict
from bamasc.diagnostics import error
from bamasc.syntax import ast


class Refine(Combinator):
    node = ast.Refine
    name = "refine"
    decisions = {"approved": verdict}

    def check(self, node: ast.Refine, flow) -> str:
        flow.call(node.call)
        flow.slot_ref(node.critic.name, node.critic.span)
        if node.critic.name == node.call.slot:
            flow.diagnostics.append(
                error(
                    "BAM307",
                    f"slot '{node.critic.name}' cannot audit its own drafts",
                    node.critic.span,
                    hint="declare a separate critic slot, e.g. `slot critic : Critic [1..2]`",
                )
            )
        return "single"

    def walk(self, walker, node: ast.Refine) -> Walk:
        slot, critic = node.call.slot, node.critic.name
        writers = walker.count(slot)
        if not writers:
            return FlowValue()
        base = walker.args(node.call)
        draft = walker.call(slot, 0, "draft", base, None, "refine")
        yield draft
        ends = []  # the drafts the loop may end on
        for round_ in range(walker.count(critic)):
            reached = None if round_ == 0 else f"critic {round_ - 1} rejected the draft"
            audit = walker.call(critic, round_, f"audit{round_}", base + (("solution", one(draft.id)),), reached, "refine")
            yield audit
            approved = yield Decision("approved", of=audit.id)
            if approved is not False:
                ends.append(draft.id)
            if approved:
                break
            draft = walker.call(
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

    def sites(self, node: ast.Refine, optional):
        return [
            site(node.call, node.call.slot, node.call.span, sometimes=("solution", "feedback")),
            site(node.call, node.critic.name, node.critic.span, always=("solution",)),
        ]

    def occurrences(self, node: ast.Refine):
        return [*call_names(node.call), slot_name(node.critic)]


register(Refine())
