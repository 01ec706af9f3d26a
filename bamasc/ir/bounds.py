"""Worst-case token and cost bounds of unrolled calls, for a given model per seat."""

from __future__ import annotations

from bamasc.program import Model, Program, Role
from bamasc.ir.alternatives import Choice, worst_case
from bamasc.ir.tokens import output_cap, template_tokens
from bamasc.ir.unroll import CallNode
from bamasc.records import record


@record
class CallBound:
    """A call's worst case: tokens in and out, and their cost in µ$."""

    node: str
    model: str
    input_tokens: int
    output_tokens: int
    input_cost: float
    output_cost: float

    @property
    def cost(self) -> float:
        return self.input_cost + self.output_cost


def call_bounds(
    calls: tuple[CallNode, ...],
    model_of: dict[tuple[str, int], Model],
    roles: dict[str, Role],
    task_tokens: int,
) -> list[CallBound]:
    """Bounds per call: prompt text + task + the output caps of every call it reads."""
    caps: dict[str, int] = {}
    bounds = []
    for call in calls:
        model = model_of[(call.slot, call.instance)]
        role = roles[call.role]
        tokens_in = template_tokens(role) + (task_tokens if call.reads_task else 0)
        tokens_in += call.framing
        tokens_in += call.tokens_read(caps)
        tokens_out = caps[call.id] = output_cap(role, model)
        # The dearest rates a prompt this long could be billed at (tiers it may cross included).
        input_cost, output_cost = model.prices().worst_cost(tokens_in, tokens_out)
        bounds.append(CallBound(call.id, model.name, tokens_in, tokens_out, input_cost, output_cost))
    return bounds


def worst_case_cost(calls: tuple[CallNode, ...], bounds, choices: tuple[Choice, ...] = ()) -> float:
    """The flow's worst-case cost from its calls' bounds (in the same order): every call outside a
    route, plus each route's costliest branch (ir/alternatives.py)."""
    return worst_case(((call.alternative, bound.cost) for call, bound in zip(calls, bounds, strict=True)), choices).total


def cheapest_cost(calls: tuple[CallNode, ...], pool: list[Model], program: Program, task_tokens: int) -> float:
    """A lower bound on any binding's cost for these calls: each call on its cheapest model,
    reading the smallest outputs any model could give its inputs."""
    smallest: dict[str, int] = {}
    amounts = []
    for call in calls:
        role = program.roles[call.role]
        tokens_in = template_tokens(role) + (task_tokens if call.reads_task else 0)
        tokens_in += call.framing
        tokens_in += call.tokens_read(smallest)
        smallest[call.id] = min(output_cap(role, m) for m in pool)
        amounts.append((call.alternative, min(m.price_input * tokens_in + m.price_output * output_cap(role, m) for m in pool)))
    # Each branch's floor is below its cost in any binding, so their maximum is below the maximum.
    return worst_case(amounts).total
