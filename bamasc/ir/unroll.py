"""Unrolls a topology's flow, for given slot counts, into the finite list of calls it may make.

The flow walker (`ir/walk.py`) knows what each combinator calls; this drives
it with every decision left open (`EVERY`), so the walk visits each call that
any run can make, with the condition under which it runs. The result is the
call list in flow order, which the static budget check and the binder price,
and from which `ir/graph.py` builds the bound template's graph.

`EVERY` suffices for the monotone decisions (approval, steps, majority): the
worst answer (reject, the most steps) makes a superset of the calls of any
other. A router's answers make different calls: `EVERY` walks each branch in
turn, and each call of a branch carries its alternative (ir/alternatives.py),
so every bound takes the costliest branch rather than the sum of them.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping

from bamasc.ir.tokens import list_tokens
from bamasc.ir.alternatives import Choice, Path
from bamasc.combinators.dynamic import same_plan
from bamasc.combinators.requests import Note
from bamasc.ir.walk import EVERY, CallGroup, CallRequest, Card, Decision, FlowValue, Seats, seat_decision, walk
from bamasc.program import Topology
from bamasc.records import record, replace


@record
class Option:
    """One of the values a prompt input may turn out to be: these calls' outputs, and `extra`
    tokens of numbering around them when it is a list."""

    nodes: tuple[str, ...]
    extra: int = 0
    path: Path = ()  # the alternative its calls ran under (a route's branch, a dynamic step's seat)
    task: bool = False  # it shows the task too (a branch answering `task`), which the call does not read otherwise


@record
class CallNode:
    """One possible call: which seat makes it, and whose outputs it reads."""

    id: str
    slot: str
    instance: int
    role: str
    reads_task: bool
    inputs: tuple[str, ...]  # ids of calls whose outputs are part of this call's prompt
    condition: str | None  # why it might not run; None when it always runs
    combinator: str
    # The walker request that made it, counted from 0: the interpreter makes one request
    # after another, and the calls of one request (a `parallel`) together, so calls share
    # a step exactly when they may run at the same time. No default: a wrong one would
    # make the latency bound unsound.
    step: int
    # Tokens of the numbering around the lists the prompt shows (`[1] ` before each output, a
    # blank line between: runtime/interpreter.py, `text_of`), exact for these counts. No
    # default either: a missing one under-prices the call.
    framing: int
    # Outputs the prompt shows once more than `inputs` says (a value passed twice). Counted in
    # every bound like an input.
    again: tuple[str, ...]
    alternative: Path = ()  # the (decision, branch) pairs it runs under; () when it may always run
    # Groups of options of which the prompt shows exactly one (a dynamic plan's step, one call per
    # seat; a route's answer, one branch's value): each group counts as its largest option.
    either: tuple[tuple[Option, ...], ...] = ()
    # Plan calls one of whose step cards the prompt shows. A card is cut from the plan, so this
    # call's prompt holds at most the plan's output once more; and the cards of one plan share
    # its output, so all its steps together read it once (ir/bounds.py `cost_amounts`).
    cards: tuple[str, ...] = ()

    def tokens_read(self, tokens: Mapping[str, float], task_tokens: int, again: bool = True) -> float:
        """The tokens of the outputs its prompt shows, given each call's output `tokens`: every input,
        each group of exclusive options once at its largest, and (with `again`) the outputs shown twice
        and the step cards.
        (The task, when the call reads it whatever runs, is not among them: `reads_task`.)"""
        grouped = {node for group in self.either for option in group for node in option.nodes}
        total = sum(tokens[source] for source in self.inputs if source not in grouped)
        total += sum(largest_option(group, tokens, task_tokens) for group in self.either)
        return total + (sum(tokens[source] for source in self.again + self.cards) if again else 0)

    def branch_reads(self, tokens: Mapping[str, float], task_tokens: int) -> tuple[float, tuple[tuple[Path, float], ...]]:
        """What of `tokens_read` depends on which branch ran: the largest of the groups whose options
        belong to the branches of one decision made inside this call's alternative (`by_branch`),
        and per branch, the largest of its options. Only the chosen branch's is read, so a bound
        counts each under its branch (ir/bounds.py): the route's worst branch then pays for what
        later calls read of it."""
        return self._grouped_reads(by_branch, tokens, task_tokens)

    def sibling_reads(self, tokens: Mapping[str, float], task_tokens: int) -> tuple[float, tuple[tuple[Path, float], ...]]:
        """What of `tokens_read` depends on a decision beside this call's own: a dynamic step reading
        an earlier step, each made on one of several seats. As `branch_reads`, the largest of such
        groups, and per branch of the other decision the largest of its options; the pair (this
        call's branch, that branch) pays it, so the worst case weighs both choices together."""
        return self._grouped_reads(beside, tokens, task_tokens)

    def _grouped_reads(self, grouping, tokens, task_tokens: int) -> tuple[float, tuple[tuple[Path, float], ...]]:
        """Of the exclusive groups that `grouping` splits by branch: their largest options' tokens
        together, and per branch the largest of its options."""
        largest, shares = 0.0, []
        for group in self.either:
            branches = grouping(group, self.alternative)
            if branches:
                largest += largest_option(group, tokens, task_tokens)
                shares += [(path, largest_option(options, tokens, task_tokens)) for path, options in branches.items()]
        return largest, tuple(shares)


def by_branch(group: tuple[Option, ...], within: Path) -> dict[Path, tuple[Option, ...]]:
    """The group's options by branch, if they all lie in branches of one decision made inside
    `within` (a route's answers, read after it; a dynamic plan's step, read by its formatter);
    else {} (a vote's drafts, or a step read by a step whose own seat is another decision)."""
    depth = len(within)
    if not all(len(option.path) > depth and option.path[:depth] == within for option in group):
        return {}
    if len({option.path[depth][0] for option in group}) != 1:
        return {}
    branches: dict[Path, list[Option]] = {}
    for option in group:
        branches.setdefault(option.path, []).append(option)
    return {path: tuple(options) for path, options in branches.items()}


def beside(group: tuple[Option, ...], within: Path) -> dict[Path, tuple[Option, ...]]:
    """The group's options by branch, if they all lie in the seats of another step of the dynamic
    plan whose step's seat is the innermost decision of `within`; else {}. (A route read inside
    another route's branch is not paired: its bound takes the largest branch, as the MILP does.)"""
    if not within:
        return {}
    outer, (own, _) = within[:-1], within[-1]
    depth = len(outer)
    if not all(len(option.path) == depth + 1 and option.path[:depth] == outer for option in group):
        return {}
    others = {option.path[depth][0] for option in group}
    if len(others) != 1 or own in others or not same_plan(own, *others):
        return {}
    branches: dict[Path, list[Option]] = {}
    for option in group:
        branches.setdefault(option.path, []).append(option)
    return {path: tuple(options) for path, options in branches.items()}


def largest_option(group: tuple[Option, ...], tokens: Mapping[str, float], task_tokens: int) -> float:
    """The tokens of the largest of the options, given each call's output `tokens`."""
    return max(option_tokens(option, tokens, task_tokens) for option in group)


def option_tokens(option: Option, tokens: Mapping[str, float], task_tokens: int) -> float:
    return sum(tokens[node] for node in option.nodes) + option.extra + (task_tokens if option.task else 0)


@record
class Unrolled:
    calls: tuple[CallNode, ...]
    answer: FlowValue
    choices: tuple[Choice, ...] = ()  # the route decisions, in flow order


def unroll(topology: Topology, counts: dict[str, int]) -> Unrolled:
    """Every call the flow may make with these counts, and what its answer may be."""
    calls: list[CallNode] = []
    choices: list[Choice] = []
    paths: dict[str, Path] = {}  # each call's alternative, for the options that read it
    steps = walk(topology, counts)
    reply = None
    step = 0
    while True:
        try:
            request = steps.send(reply)
        except StopIteration as done:
            return Unrolled(tuple(calls), done.value, tuple(choices))
        if isinstance(request, Decision):
            if request.kind == "branch":
                choices.append(Choice(request.of, request.within, request.among, request.fallback))
            elif request.kind == "seat":
                choices.append(Choice(seat_decision(request.of, request.limit), request.within, request.among, None))
            reply = EVERY
            continue
        if isinstance(request, CallGroup):
            paths.update((call.id, call.alternative) for call in request.calls)
            calls.extend(_node(call, step, paths) for call in request.calls)
            reply = [None] * len(request.calls)
            step += bool(request.calls)  # a parallel of no instances takes no time
        else:
            paths[request.id] = request.alternative
            calls.append(_node(request, step, paths))
            reply = None
            step += 1


def _node(call: CallRequest, step: int, paths: Mapping[str, Path]) -> CallNode:
    # The numbering of the lists it shows; that of a value that is one of several is in its options.
    framing = sum(_numbering(value) for _, value in call.inputs if isinstance(value, FlowValue) and not value.options)
    # The list of seats a dynamic plan's planner sees, and a reference star's part, are text of known
    # length (a byte is at least a token).
    framing += sum(len(value.text.encode("utf-8")) for _, value in call.inputs if isinstance(value, (Seats, Note)))
    shown = Counter(node for _, value in call.inputs if isinstance(value, FlowValue) for node in value.nodes)
    again = tuple(node for node, times in shown.items() for _ in range(times - 1))
    cards = tuple(value.plan for _, value in call.inputs if isinstance(value, Card))
    values = [value for _, value in call.inputs if isinstance(value, FlowValue)]
    groups = tuple(group for value in values for group in _exclusive(value, paths))
    # The task counts once, with the prompt, when the call shows it whatever runs; when only some
    # branches answer it, with those branches' options.
    reads_task = any(value.task for value in values if not value.options) or any(
        all(option.task for option in group) for group in groups if any(option.task for option in group)
    )
    if reads_task:
        groups = tuple(tuple(replace(option, task=False) for option in group) for group in groups)
    return CallNode(
        call.id, call.slot, call.instance, call.role, reads_task, call.reads, call.condition, call.combinator,
        step, framing, again, call.alternative, groups, cards,
    )


def _numbering(value: FlowValue) -> int:
    # A list shows one item per group of exclusive calls (FlowValue.either), one per other call.
    return list_tokens(len(value.nodes) - sum(len(group) - 1 for group in value.either)) if value.many else 0


def _exclusive(value: FlowValue, paths: Mapping[str, Path]) -> tuple[tuple[Option, ...], ...]:
    """Groups of options of which the prompt shows exactly one: for a value that is one of several
    (a route's answer) one group of its options; for a single value that is one of several outputs
    (a refined draft, a vote) one group of those outputs; else the value's `either` groups. Each
    option carries the alternative it ran under."""
    if value.options:
        return (tuple(option for path, branch in value.options for option in _as_options(branch, path, paths)),)
    if value.one_of and not value.many and len(value.nodes) > 1:
        return (tuple(Option((node,), 0, paths[node]) for node in value.nodes),)
    return tuple(tuple(Option((node,), 0, paths[node]) for node in group) for group in value.either)


def _as_options(value: FlowValue, path: Path, paths: Mapping[str, Path]) -> tuple[Option, ...]:
    """The value of the branch `path` as the options it may show: one of its own options (a route
    in the branch), one of its outputs (a vote), or all of it, numbered if it is a list. A list
    with exclusive groups of its own counts all of their calls here: safe, and loose only then."""
    if value.options:
        return tuple(option for inner, branch in value.options for option in _as_options(branch, inner, paths))
    if value.one_of and not value.many and len(value.nodes) > 1:
        return tuple(Option((node,), 0, max(path, paths[node], key=len), value.task) for node in value.nodes)
    return (Option(value.nodes, _numbering(value), path, value.task),)
