"""What a running task offers the combinators when they answer their decisions.

A combinator (bamasc/combinators/) says which output answers each decision it asks
and how (`Combinator.decisions`); this reads the run's outputs for it: the text
of a call's output, whether a verdict approves, what a plan's cards say, which
branch a router named, which draft wins a vote, and the reference's tests.
"""

from __future__ import annotations

from bamasc.runtime import reference_mode
from bamasc.combinators.route_names import chosen_branch
from bamasc.runtime.extract import MalformedPlan, approved, card_choice, majority
from bamasc.metering.refusals import BudgetExhausted
from bamasc.runtime.outcomes import TaskError


class Answers:
    def __init__(self, run):
        self.run = run  # a runtime.interpreter.TaskRun

    def text(self, node: str) -> str:
        """The text of call `node`'s output."""
        return self.run.outputs[node].text

    def verdict(self, node: str) -> bool:
        """Does the verdict of call `node` approve?"""
        return approved(self.text(node))

    def cards(self, decision):
        """"steps" (how many; the cards are kept for the steps' prompts), "seat" or "reads" of a plan's
        cards. A malformed plan fails the task."""
        plan = self.run.outputs[decision.of]
        try:
            found = card_choice(decision, plan.text)
        except MalformedPlan as problem:
            raise TaskError(f"malformed plan from {plan.node}: {problem}") from None
        if decision.kind == "steps":
            self.run.cards[plan.node] = found
            return len(found)
        return found

    def branch(self, decision) -> str:
        """The branch the router's output names; none and no `otherwise` fails the task (the walker
        would read None as every branch)."""
        branch = chosen_branch(self.text(decision.of), decision.among, decision.fallback)
        if branch is None:
            raise TaskError(f"router {decision.of} named none of {', '.join(decision.among)}, and the route has no 'otherwise'")
        return branch

    def majority(self, among: tuple[str, ...]) -> str:
        """The call among `among` whose extracted answer most share."""
        return majority(self.run.system.answer, [self.run.outputs[node] for node in among]).node

    def reference(self, decision):
        """A `reference` combinator's task test or vote; past the budget the task stops instead."""
        if (found := reference_mode.decide(self.run, decision)) is None:
            raise BudgetExhausted(decision.kind)
        return found
