"""The routes of a bound template as the plan records them: each branch's worst case and calls."""

from __future__ import annotations

from bamasc.ir.alternatives import Choice, worst_case
from bamasc.plan.schema import PlanBranch, PlanDecision, PlanNode


def plan_decisions(nodes: tuple[PlanNode, ...], choices: tuple[Choice, ...], amounts) -> tuple[PlanDecision, ...]:
    """One record per route, from the plan's nodes (their latencies and alternatives) and the parts
    of their costs (`amounts`, ir/bounds.py `cost_amounts`: a branch also pays what is read of it)."""
    if not choices:
        return ()
    cost = worst_case(amounts, choices)
    latency = _latency(nodes, choices)
    decisions = []
    for choice in choices:
        branches = tuple(
            PlanBranch(
                name,
                cost.branch_totals[choice.id][name],
                None if latency is None else latency.branch_totals[choice.id][name],
                tuple(node.id for node in nodes if (choice.id, name) in node.alternative),
            )
            for name in choice.branches
        )
        decisions.append(PlanDecision(choice.id, choice.within, choice.fallback, cost.chosen[choice.id], branches))
    return tuple(decisions)


def _latency(nodes, choices):
    """Each step's slowest call, over alternatives (ir/latency.py); None if a model declares no latency."""
    slowest: dict[int, PlanNode] = {}
    for node in nodes:
        if node.latency_s is None:
            return None
        if node.step not in slowest or node.latency_s > slowest[node.step].latency_s:
            slowest[node.step] = node
    return worst_case(((node.alternative, node.latency_s) for node in slowest.values()), choices)
