"""Worst-case token and cost bounds of unrolled calls, for a given model per seat."""

from __future__ import annotations

from bamasc.program import Model, Program, Role
from bamasc.ir.alternatives import Both, Choice, Path, worst_case
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
    # The parts of `input_cost` paid only if a branch ran (CallNode.branch_reads): µ$ under each
    # branch's alternative, of which `branch_most` is the largest the cost holds.
    shares: tuple[tuple[Path, float], ...] = ()
    branch_most: float = 0.0
    # The part of `input_cost` for the step cards it shows, per plan call: µ$ at this call's rate.
    cards: tuple[tuple[str, float], ...] = ()
    # What it reads of steps made beside its own (CallNode.sibling_reads): tokens under each branch
    # of that decision, at `pair_rate` µ$ a token, of which the cost holds `pair_most` µ$.
    pairs: tuple[tuple[Path, float], ...] = ()
    pair_rate: float = 0.0
    pair_most: float = 0.0

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
        tokens_in += call.tokens_read(caps, task_tokens)
        tokens_out = caps[call.id] = output_cap(role, model)
        bounds.append(call_bound(call, model, tokens_in, tokens_out, caps, task_tokens))
    return bounds


def call_bound(call: CallNode, model: Model, tokens_in: int, tokens_out: int, tokens, task_tokens: int) -> CallBound:
    """A call's bound from its prompt and output tokens, at the dearest rates a prompt this long
    could be billed (tiers it may cross included), with its reads of branches' outputs priced
    apart (`tokens`: each call's output tokens)."""
    pricing = model.prices()
    input_cost, output_cost = pricing.worst_cost(tokens_in, tokens_out)
    largest, shares = call.branch_reads(tokens, task_tokens)
    beside, pairs = call.sibling_reads(tokens, task_tokens)
    if not shares and not call.cards and not pairs:
        return CallBound(call.id, model.name, tokens_in, tokens_out, input_cost, output_cost)
    rate = pricing.worst_rates(tokens_in).input
    priced = tuple((path, rate * share) for path, share in shares)
    cards = tuple((plan, rate * tokens[plan]) for plan in call.cards)
    return CallBound(
        call.id, model.name, tokens_in, tokens_out, input_cost, output_cost, priced, rate * largest, cards, pairs, rate, rate * beside
    )


def cost_amounts(calls, bounds) -> list[tuple[Path, float]]:
    """(alternative, µ$) of every part of the calls' bounds (in the same order): a call's own cost
    under its alternative, what it pays to read a branch's output under that branch, and per plan
    its step cards once, at the dearest rate among the calls that show one: the cards of a plan
    are cut from its output, so together they are at most as long as it is."""
    amounts = []
    cards: dict[str, float] = {}
    for call, bound in zip(calls, bounds, strict=True):
        own = bound.cost - bound.branch_most - bound.pair_most - sum(c for _, c in bound.cards)
        amounts.append((call.alternative, own))
        amounts.extend(bound.shares)
        rate = bound.pair_rate
        amounts += [(Both(call.alternative, path, rate, tokens), rate * tokens) for path, tokens in bound.pairs]
        for plan, cost in bound.cards:
            cards[plan] = max(cards.get(plan, 0.0), cost)
    where = {call.id: call.alternative for call in calls}
    amounts += [(where[plan], cost) for plan, cost in cards.items()]
    return amounts


def worst_case_cost(calls: tuple[CallNode, ...], bounds, choices: tuple[Choice, ...] = (), joint: bool = True) -> float:
    """The flow's worst-case cost from its calls' bounds (in the same order): every call outside a
    route, plus each route's costliest branch (ir/alternatives.py), which includes what later calls
    pay to read its answer, and a dynamic plan's costliest cards, its steps' seats chosen together.
    With `joint` False, each step's seat is taken alone, reading the largest output of every
    earlier step: the price the template MILP puts on a binding (safe, possibly above)."""
    return worst_case(cost_amounts(calls, bounds), choices, joint).total


def cheapest_cost(calls: tuple[CallNode, ...], pool: list[Model], program: Program, task_tokens: int) -> float:
    """A lower bound on any binding's cost for these calls: each call on its cheapest model,
    reading the smallest outputs any model could give its inputs."""
    smallest: dict[str, int] = {}
    amounts = []
    card_floor: dict[str, float] = {}
    for call in calls:
        role = program.roles[call.role]
        tokens_in = template_tokens(role) + (task_tokens if call.reads_task else 0)
        tokens_in += call.framing
        tokens_in += call.tokens_read(smallest, task_tokens)
        smallest[call.id] = min(output_cap(role, m) for m in pool)
        # Reads of a branch's output count under that branch, and a plan's cards once under the
        # plan (`cost_amounts`), each part at its cheapest model.
        largest, shares = call.branch_reads(smallest, task_tokens)
        beside, pairs = call.sibling_reads(smallest, task_tokens)
        own = tokens_in - largest - beside - sum(smallest[plan] for plan in call.cards)
        least_rate = min(m.price_input for m in pool)
        amounts.append((call.alternative, min(m.price_input * own + m.price_output * output_cap(role, m) for m in pool)))
        amounts += [(path, least_rate * share) for path, share in shares]
        amounts += [(Both(call.alternative, path, least_rate, share), least_rate * share) for path, share in pairs]
        for plan in call.cards:
            card_floor[plan] = least_rate * smallest[plan]
    where = {call.id: call.alternative for call in calls}
    amounts += [(where[plan], floor) for plan, floor in card_floor.items()]
    # Each branch's floor is below its cost in any binding, so their maximum is below the maximum
    # (and a dynamic plan's steps read what the seats of that same choice of cards write).
    return worst_case(amounts).total
