"""`plan P(args) using E [review C] max_steps n`: a planner's step cards, run in order by executors.

Step i runs on executor i mod count, reading the plan, its card and the step
before; each critic may reject the steps once, forcing one re-plan on planner
r mod count that reads the review (`{{feedback}}`).
"""

from __future__ import annotations

from bamasc.combinators.requests import EVERY, Card, Decision, FlowValue, Walk, one
from bamasc.combinators.base import Combinator, call_names, read_cards, register, site, slot_name, verdict
from bamasc.diagnostics import error
from bamasc.limits import MAX_STEPS
from bamasc.syntax import ast


class Plan(Combinator):
    node = ast.Plan
    name = "plan"
    decisions = {"approved": verdict, "steps": read_cards}

    def check(self, node: ast.Plan, flow) -> str:
        flow.call(node.call)
        flow.slot_ref(node.executor.name, node.executor.span)
        if node.critic is not None:
            flow.slot_ref(node.critic.name, node.critic.span)
        if not node.max_steps.is_integer or not 1 <= node.max_steps.value <= MAX_STEPS:
            flow.diagnostics.append(
                error(
                    "BAM207",
                    f"max_steps must be a whole number from 1 to {MAX_STEPS}, not {node.max_steps.text}",
                    node.max_steps.span,
                )
            )
        return "list"

    def walk(self, walker, node: ast.Plan) -> Walk:
        planner, executor = node.call.slot, node.executor.name
        critic = node.critic.name if node.critic else None
        planners, executors = walker.count(planner), walker.count(executor)
        critics = walker.count(critic) if critic else 0
        if not planners:
            return FlowValue()
        max_steps = int(node.max_steps.value)
        base = walker.args(node.call)
        feedback: tuple = ()
        steps: tuple[str, ...] = ()
        for round_ in range(critics + 1):
            replan = None if round_ == 0 else f"critic {round_ - 1} rejected the plan"
            plan = walker.call(planner, round_ % planners, f"plan{round_}", base + feedback, replan, "plan")
            yield plan
            cards = yield Decision("steps", of=plan.id, limit=max_steps)
            steps = ()
            previous: tuple = ()
            for step in range((max_steps if cards is EVERY else cards) if executors else 0):
                condition = f"the plan has more than {step} steps" + (f" and {replan}" if replan else "")
                inputs = base + (("plan", one(plan.id)), ("step", Card(plan.id, step))) + previous
                made = walker.call(executor, step % executors, f"step{round_}.{step}", inputs, condition, "plan")
                yield made
                steps += (made.id,)
                previous = (("previous", one(made.id)),)
            if round_ < critics:
                solution = FlowValue(nodes=steps, many=True)
                review = walker.call(critic, round_, f"review{round_}", base + (("solution", solution),), replan, "plan")
                yield review
                approved = yield Decision("approved", of=review.id)
                if approved:
                    break
                feedback = (("feedback", one(review.id)),)
        return FlowValue(nodes=steps, many=True)

    def sites(self, node: ast.Plan, optional):
        found = [
            site(node.call, node.call.slot, node.call.span, sometimes=("feedback",)),
            site(node.call, node.executor.name, node.executor.span, always=("plan", "step"), sometimes=("previous",)),
        ]
        if node.critic is not None:
            found.append(site(node.call, node.critic.name, node.critic.span, always=("solution",)))
        return found

    def occurrences(self, node: ast.Plan):
        found = [*call_names(node.call), slot_name(node.executor)]
        return found + ([slot_name(node.critic)] if node.critic is not None else [])


register(Plan())
