"""Worst-case latency of unrolled calls: one attempt's bound, and a task's along its critical path.

What runs at the same time follows the interpreter: it makes the walker's
requests one after another, and only the calls of one request (a `CallGroup`,
from `parallel`) together. So the calls of one step overlap, and the steps
add up: a task's worst case is the sum over its steps of the slowest call of
each. The monotone decisions (ir/unroll.py) make a run take a subset of the
unrolled steps, in their order; of a route's branches a run takes one, so
the steps of a branch count only for the slowest branch (ir/alternatives.py).

The bound covers each call's first attempt only; retries, their backoff and
the time spent between calls (rendering prompts, waiting for a concurrency
slot) are outside it. At run time the deadline guard counts them all.

Pure functions over the checked Program's records; nothing heavy is imported.
"""

from __future__ import annotations

from bamasc.ir.alternatives import worst_case
from bamasc.ir.tokens import output_cap
from bamasc.ir.unroll import CallNode
from bamasc.program import Latency, Model, Role
from bamasc.records import record


@record
class LatencyBound:
    """A task's worst-case latency and the calls that make it up."""

    seconds: float | None  # None when a model of the binding declares no latency
    path: tuple[str, ...]  # the slowest call of each step, in flow order (empty when seconds is None)


def attempt_latency_s(latency: Latency, max_tokens: int) -> float:
    """The longest one attempt that may emit `max_tokens` tokens takes."""
    return latency.first_token_s + latency.per_output_token_s * max_tokens


def call_latency_s(role: Role, model: Model) -> float | None:
    """One attempt's worst case for a call of `role` on `model`: first token, then every token of its output cap;
    for a tool-using role, every round of its loop and the tool calls between them (combinators/tools.py)."""
    if model.latency is None:
        return None
    attempt = attempt_latency_s(model.latency, output_cap(role, model))
    return attempt if role.loop is None else role.loop.latency_s(attempt)


def steps(calls: tuple[CallNode, ...]) -> tuple[tuple[CallNode, ...], ...]:
    """The calls grouped by step, steps in order (the calls of one step run together)."""
    grouped: dict[int, list[CallNode]] = {}
    for call in calls:
        grouped.setdefault(call.step, []).append(call)
    return tuple(tuple(grouped[step]) for step in sorted(grouped))


def worst_case_latency(
    calls: tuple[CallNode, ...], model_of: dict[tuple[str, int], Model], roles: dict[str, Role]
) -> LatencyBound:
    """The sum over steps of each step's slowest call (the first in flow order on a tie), each
    route counting its slowest branch."""
    slowest_of = []
    for group in steps(calls):
        slowest, seconds = None, -1.0
        for call in group:
            latency = call_latency_s(roles[call.role], model_of[(call.slot, call.instance)])
            if latency is None:
                return LatencyBound(None, ())
            if latency > seconds:
                slowest, seconds = call, latency
        slowest_of.append((slowest, seconds))
    return slowest_path(slowest_of)


def slowest_path(slowest_of) -> LatencyBound:
    """The bound from each step's slowest (call, seconds): the steps outside routes, and those of
    each route's slowest branch. A step's calls share one alternative (one walker request)."""
    worst = worst_case((call.alternative, seconds) for call, seconds in slowest_of)
    path = tuple(call.id for call, _ in slowest_of if worst.on_path(call.alternative))
    return LatencyBound(worst.total, path)
