"""Worst-case token and cost bounds of unrolled calls, for a given model per seat."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from bamasc.combinators.tools import ToolLoop
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
    # A tool-using call (combinators/tools.py): its tool calls' µ$, and each round's prompt bound; 0, ()
    # without tools, whose input_tokens is then the one prompt it sends.
    tool_cost: float = 0.0
    round_inputs: tuple[int, ...] = ()

    @property
    def cost(self) -> float:
        return self.input_cost + self.output_cost + self.tool_cost


def call_bounds(
    calls: tuple[CallNode, ...],
    model_of: dict[tuple[str, int], Model],
    roles: dict[str, Role],
    task_tokens: int,
) -> list[CallBound]:
    """Bounds per call: prompt text + task + the output caps of every call it reads (each round of a
    tool-using call's loop re-sends them all: combinators/tools.py)."""
    caps: dict[str, int] = {}
    bounds = []
    for call in calls:
        model = model_of[(call.slot, call.instance)]
        role = roles[call.role]
        tokens_in = template_tokens(role) + (task_tokens if call.reads_task else 0)
        tokens_in += call.framing
        tokens_in += call.tokens_read(caps, task_tokens)
        tokens_out = caps[call.id] = output_cap(role, model)
        bounds.append(call_bound(call, model, tokens_in, tokens_out, caps, task_tokens, role.loop))
    return bounds


def call_bound(
    call: CallNode, model: Model, tokens_in: int, tokens_out: int, tokens, task_tokens: int, loop: ToolLoop | None = None
) -> CallBound:
    """A call's bound from its prompt and output tokens, at the dearest rates a prompt this long
    could be billed (tiers it may cross included), with its reads of branches' outputs priced
    apart (`tokens`: each call's output tokens). With a tool `loop`, `tokens_in` is the call's own
    prompt and the bound is that of every round (ToolLoop.cost), its tool calls' price included."""
    pricing = model.prices()
    if loop is None:
        input_cost, output_cost = pricing.worst_cost(tokens_in, tokens_out)
        tooled = {}
    else:
        input_cost, output_cost, per_token = loop.cost(pricing, tokens_in, tokens_out)
        tooled = {"tool_cost": loop.tool_cost, "round_inputs": loop.prompts(tokens_in, tokens_out)}
    largest, shares = call.branch_reads(tokens, task_tokens)
    beside, pairs = call.sibling_reads(tokens, task_tokens)
    if not shares and not call.cards and not pairs:
        return CallBound(call.id, model.name, tokens_in, tokens_out, input_cost, output_cost, **tooled)
    # What a token it reads costs: once at its prompt's rate, or once per round of its loop.
    rate = pricing.worst_rates(tokens_in).input if loop is None else per_token
    priced = tuple((path, rate * share) for path, share in shares)
    cards = tuple((plan, rate * tokens[plan]) for plan in call.cards)
    return CallBound(
        call.id, model.name, tokens_in, tokens_out, input_cost, output_cost, priced, rate * largest, cards, pairs, rate,
        rate * beside, **tooled,
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


def cheapest_cost(
    calls: tuple[CallNode, ...],
    pool: list[Model],
    program: Program,
    task_tokens: int,
    seat_pools: Mapping[tuple[str, int], Sequence[Model]] | None = None,
) -> float:
    """A lower bound on any binding's cost for these calls: each call on its cheapest model,
    reading the smallest outputs any model could give its inputs. `seat_pools` narrows the
    models of some seats ((slot, instance) -> models): a bound on the bindings that keep to them."""
    def models(call):
        return seat_pools.get((call.slot, call.instance), pool) if seat_pools else pool

    parts = floor_parts(calls, models, program, task_tokens)
    return floor_total(calls, [part.priced(models(call)) for call, part in zip(calls, parts)])


@record
class CallFloor:
    """A call's tokens as `cheapest_cost` counts them, before a model prices them: those billed
    whatever runs, the reads of a branch's output (priced under that branch) and of a step made
    beside it (under both decisions), and per plan the tokens of its step cards."""

    alternative: Path
    role: Role
    own: float
    shares: tuple[tuple[Path, float], ...]
    pairs: tuple[tuple[Path, float], ...]
    cards: tuple[tuple[str, float], ...]

    def priced(self, models: Sequence[Model]) -> tuple[list, list[tuple[str, float]]]:
        """(amounts for `worst_case`, (plan, floor of its cards)) on the cheapest of `models`; a tool-using
        call's every round (combinators/tools.py), each re-sending what it reads."""
        role, loop = self.role, self.role.loop
        rounds = 1 if loop is None else loop.rounds + 1
        rate = min(m.price_input for m in models) * rounds

        def least(m: Model) -> float:
            cap = output_cap(role, m)
            own = rounds * (m.price_input * self.own + m.price_output * cap)
            return own if loop is None else own + m.price_input * loop.extra_tokens(cap) + loop.tool_cost

        amounts = [(self.alternative, min(least(m) for m in models))]
        amounts += [(path, rate * share) for path, share in self.shares]
        amounts += [(Both(self.alternative, path, rate, share), rate * share) for path, share in self.pairs]
        return amounts, [(plan, rate * tokens) for plan, tokens in self.cards]


def floor_parts(calls: tuple[CallNode, ...], models_of, program: Program, task_tokens: int) -> list[CallFloor]:
    """Each call's `CallFloor`, reading the smallest outputs the models `models_of(call)` may give."""
    smallest: dict[str, int] = {}
    parts = []
    for call in calls:
        role = program.roles[call.role]
        tokens_in = template_tokens(role) + (task_tokens if call.reads_task else 0)
        tokens_in += call.framing
        tokens_in += call.tokens_read(smallest, task_tokens)
        smallest[call.id] = min(output_cap(role, m) for m in models_of(call))
        largest, shares = call.branch_reads(smallest, task_tokens)
        beside, pairs = call.sibling_reads(smallest, task_tokens)
        cards = tuple((plan, smallest[plan]) for plan in call.cards)
        own = tokens_in - largest - beside - sum(tokens for _, tokens in cards)
        parts.append(CallFloor(call.alternative, role, own, tuple(shares), tuple(pairs), cards))
    return parts


def floor_total(calls: tuple[CallNode, ...], priced) -> float:
    """The worst case of the calls' priced floors (`CallFloor.priced`, in the calls' order): reads
    of a branch's output count under that branch, and a plan's cards once under the plan
    (`cost_amounts`), at the largest floor any call that shows them gives."""
    amounts = []
    card_floor: dict[str, float] = {}
    for own, cards in priced:
        amounts += own
        for plan, floor in cards:
            card_floor[plan] = max(card_floor.get(plan, 0.0), floor)
    where = {call.id: call.alternative for call in calls}
    amounts += [(where[plan], floor) for plan, floor in card_floor.items()]
    # Each branch's floor is below its cost in any binding, so their maximum is below the maximum
    # (and a dynamic plan's steps read what the seats of that same choice of cards write).
    return worst_case(amounts).total
