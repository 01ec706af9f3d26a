"""What each statement of a flow calls, at every count of the slots it uses: the template MILP's input.

A flow is a sequence of statements, and what statement i calls depends only on
the counts of the slots it calls (its *slots*) and on the values earlier
statements hand it. So instead of unrolling the flow at every count vector of
the template (their number is the product of all slot ranges), each statement
is unrolled at every count vector of its own slots (a product over one to
three slots), and a value read from an earlier statement is summarised by the
output caps of the calls that make it up.

A statement is *padded* when its calls at any count are those it makes at the
largest counts, minus the calls of instances that do not exist then, with reads
of missing calls dropped (`chain`, `parallel` and plain calls are). The MILP
then prices it from its largest unroll alone: a missing seat has no model, so
its calls cost nothing. The combinators `ir/walk.padded` says are padded are taken as
padded at once; any other statement's unrolls are compared to find out.
Statements that are not padded (`refine`, `plan`, whose instances rotate with
the counts) keep one unroll per count vector.

`NotDecomposable` is raised when a call reads part of an earlier value: the
summary would be wrong, and the caller binds by enumeration instead.
"""

from __future__ import annotations

import itertools
from collections import Counter

from bamasc.ir.tokens import template_tokens
from bamasc.ir.unroll import CallNode, by_branch, unroll
from bamasc.ir.walk import padded
from bamasc.program import Program, System, Topology
from bamasc.records import record, replace

SeatKey = tuple[int, int]
"""(slot index, instance)."""

Option = tuple[tuple[tuple[SeatKey, int], ...], int, tuple[tuple[str, str], ...]]
"""One option of an exclusive read: the seats whose outputs it shows (with multiplicity, sorted),
the tokens of numbering around them, and the alternative they ran under."""

Group = tuple[Option, ...]
"""Options of which a prompt shows exactly one: it costs the largest (ir/unroll.py `Option`)."""


class NotDecomposable(Exception):
    """A call reads part of an earlier statement's value, so values cannot be summarised."""


@record
class SeatCalls:
    """What one seat's calls in one statement cost, summed over the calls.

    A call's input is `fixed` tokens plus the outputs it reads: the calls at
    `reads` seats of the same statement (with multiplicity) and the whole values
    of the earlier statements in `values`.
    """

    calls: int
    fixed: int  # Σ prompt-text and task tokens
    reads: tuple[tuple[SeatKey, int], ...]  # (seat, how many reads of its calls), sorted
    values: tuple[tuple[int, int], ...]  # (statement, how many reads of its value), sorted
    # The route branches these calls run under (ir/alternatives.py): a seat called in two branches
    # of a route has one SeatCalls per branch, since only one of them runs.
    alternative: tuple[tuple[str, str], ...] = ()
    # Reads of groups of options of which the prompt shows one (a dynamic plan's step, a route's
    # answer read in the statement that made it): each (group, how many reads) costs its largest option.
    either: tuple[tuple[Group, int], ...] = ()
    # Reads whose options are the branches of one decision inside these calls' alternative (ir/unroll.py
    # `by_branch`): each branch pays for reading its own options, so a route's worst branch includes
    # what is read of it. Groups of this statement's calls, and (statement, reads) of earlier values.
    branch_either: tuple[tuple[Group, int], ...] = ()
    branch_values: tuple[tuple[int, int], ...] = ()
    # Step cards shown, ((plan call, its seat, its alternative), how many): the steps of one plan
    # share its output (optimize/cards.py).
    cards: tuple[tuple[tuple[str, SeatKey, tuple[tuple[str, str], ...]], int], ...] = ()


@record
class Unit:
    """A statement at one count vector of its slots."""

    vector: tuple[int, ...]  # counts of the statement's slots, in `Statement.slots` order
    seats: tuple[tuple[SeatKey, SeatCalls], ...]  # sorted by seat, then alternative
    value: tuple[tuple[SeatKey, int], ...]  # seats of the calls later statements read, with multiplicity
    # When the value is one of several (a route's answer): the options a reader sees one of, whose
    # largest is what it reads, instead of every seat of `value`. () when it is all of `value`.
    value_options: Group = ()
    steps: tuple[tuple[SeatKey, ...], ...] = ()  # per step of the walk, the seats whose calls run together
    step_paths: tuple[tuple[tuple[str, str], ...], ...] = ()  # per step, the alternative it runs under


@record
class Statement:
    index: int
    slots: tuple[int, ...]  # slot indices whose counts change what it calls
    padded: bool
    units: tuple[Unit, ...]  # one per count vector; only the largest when padded
    read_later: bool  # some later statement reads its value


def statement_of(call_id: str) -> int:
    """The flow statement a call id belongs to (`executor[1]@0.revise0` → 0; see ir/walk.call_id)."""
    return int(call_id.rsplit("@", 1)[1].split(".", 1)[0])


class Flow:
    """A template's flow statements, unrolled on demand and remembered, for any slot ranges.

    What statement i calls at the counts v of its slots does not depend on the
    other slots' counts, so each (i, v) is unrolled once, with every other slot
    at its largest count (so that every later reader of i's value exists), and
    reused for every set of ranges the binder asks about.
    """

    def __init__(self, program: Program, system: System, topology: Topology, unroller=None, trust_padded: bool = True):
        self.program, self.system, self.topology = program, system, topology
        self.unroller = unroller or (lambda counts: unroll(topology, counts))
        self.names = [slot.name for slot in topology.slots]
        self.index = {name: s for s, name in enumerate(self.names)}
        self.widest = {slot.name: slot.hi for slot in topology.slots}
        top = _units_by_statement(self.unroller, self.widest)
        self.slots = [
            tuple(sorted({s for s, _ in _seats_called(top.get(i, ()), self.index)})) for i in range(len(topology.flow))
        ]
        # Statements whose combinator is known to be padded (ir/walk.padded) need no comparison.
        self.known_padded = [trust_padded and padded(st.expr) for st in topology.flow]
        self._units: dict = {}
        self._statements: dict = {}
        self._splits: dict = {}

    def unit(self, i: int, vector: tuple[int, ...]) -> Unit:
        key = (i, vector)
        if key not in self._units:
            counts = dict(self.widest)
            counts.update({self.names[s]: n for s, n in zip(self.slots[i], vector)})
            calls, every, where = _units_by_statement(self.unroller, counts, only=i, splits=self._splits)
            self._units[key] = _unit(vector, i, calls, every, self.index, self.program, self.system, where)
        return self._units[key]

    def statement(self, i: int, ranges: tuple[range, ...]) -> Statement:
        slots = self.slots[i]
        key = (i, tuple((ranges[s].start, ranges[s].stop) for s in slots))
        if key not in self._statements and self.known_padded[i]:
            largest = self.unit(i, tuple(ranges[s][-1] for s in slots))
            self._statements[key] = Statement(i, slots, True, (largest,), False)
        if key not in self._statements:
            built = {v: self.unit(i, v) for v in itertools.product(*(ranges[s] for s in slots))}
            largest = list(built)[-1]
            padded = all(_restricted(built[largest], slots, v) == unit for v, unit in built.items())
            units = (built[largest],) if padded else tuple(built.values())
            self._statements[key] = Statement(i, slots, padded, units, False)
        return self._statements[key]

    def rotating(self, ranges: tuple[range, ...]) -> list[int]:
        """The slots of the statements that are not padded at these ranges, sorted.

        A statement is found not padded at the first count vector whose unroll is not its largest
        one's restricted (smallest counts first, where they differ most): an enumerating binder
        then needs the others only at the counts it solves."""
        slots: set[int] = set()
        for i, own in enumerate(self.slots):
            key = (i, tuple((ranges[s].start, ranges[s].stop) for s in own))
            if key in self._statements:
                padded = self._statements[key].padded
            elif self.known_padded[i]:
                padded = True
            else:
                largest = self.unit(i, tuple(ranges[s][-1] for s in own))
                vectors = itertools.product(*(ranges[s] for s in own))
                padded = all(_restricted(largest, own, v) == self.unit(i, v) for v in vectors)
            if not padded:
                slots.update(own)
        return sorted(slots)

    def statements(self, ranges: tuple[range, ...]) -> tuple[Statement, ...]:
        """Every statement's units at the slot counts `ranges` allow (one range per slot)."""
        statements = [self.statement(i, ranges) for i in range(len(self.topology.flow))]
        later = {
            j for st in statements for unit in st.units for _, calls in unit.seats for j, _ in calls.values + calls.branch_values
        }
        return tuple(replace(st, read_later=st.index in later) for st in statements)


def analyse_fixed(
    program: Program, system: System, topology: Topology, vector: tuple[int, ...], unroller=None
) -> tuple[Statement, ...]:
    """The flow at one count vector as a single unit: every read is a read of a known seat."""
    index = {slot.name: s for s, slot in enumerate(topology.slots)}
    counts = dict(zip(index, vector))
    calls = (unroller(counts) if unroller else unroll(topology, counts)).calls
    unit = _unit(vector, None, calls, calls, index, program, system)
    return (Statement(0, (), True, (unit,), False),)


def _seats_called(calls, index) -> set[SeatKey]:
    return {(index[call.slot], call.instance) for call in calls}


def _units_by_statement(unroller, counts, only: int | None = None, splits: dict | None = None):
    """The calls of each statement (or of statement `only`, with every call and each call's
    statement), checking that values are read whole. `splits` remembers this per count vector."""
    key = tuple(sorted(counts.items()))
    split = splits.get(key) if splits is not None else None
    if split is None:
        calls = unroller(counts).calls
        where = {call.id: statement_of(call.id) for call in calls}
        by_statement: dict[int, list[CallNode]] = {}
        for call in calls:
            by_statement.setdefault(where[call.id], []).append(call)
        _check_whole_reads(calls, where)
        split = (calls, by_statement, where)
        if splits is not None:
            splits[key] = split
    calls, by_statement, where = split
    if only is not None:
        return (by_statement.get(only, []), calls, where)
    return by_statement


def _check_whole_reads(calls, where: dict[str, int]) -> None:
    """Every later call that reads some of a statement's calls reads the same set of them."""
    read_sets: dict[int, set[frozenset[str]]] = {}
    seen: set[tuple[int, tuple[str, ...]]] = set()
    for call in calls:
        own = where[call.id]
        if (own, call.inputs) in seen:
            continue  # the instances of a `parallel` read the same inputs
        seen.add((own, call.inputs))
        outside: dict[int, set[str]] = {}
        for source in call.inputs:
            j = where[source]
            if j != own:
                outside.setdefault(j, set()).add(source)
        for j, ids in outside.items():
            read_sets.setdefault(j, set()).add(frozenset(ids))
    for j, sets in read_sets.items():
        if len(sets) > 1:
            raise NotDecomposable(f"calls read different parts of statement {j + 1}'s value")


def _unit(vector, i, calls, every, index, program, system, where: dict[str, int] | None = None) -> Unit:
    where = where if where is not None else {call.id: statement_of(call.id) for call in every}
    seat_of = {call.id: (index[call.slot], call.instance) for call in every}
    path_of = {call.id: call.alternative for call in every}
    per_seat: dict[tuple, list] = {}
    for call in calls:
        seat = seat_of[call.id]
        entry = per_seat.setdefault((seat, call.alternative), [0, 0, *(Counter() for _ in range(6))])
        for plan in call.cards:
            entry[7][(plan, seat_of[plan], path_of[plan])] += 1
        entry[0] += 1
        entry[1] += _prompt_tokens(program.roles[call.role]) + (system.task_tokens if call.reads_task else 0)
        entry[1] += call.framing
        outside: set[int] = set()
        grouped = set()
        for group in call.either:
            made_in = {where[node] for option in group for node in option.nodes}
            nodes = {node for option in group for node in option.nodes}
            branched = bool(by_branch(group, call.alternative))
            if i is None or made_in <= {i}:
                entry[5 if branched else 4][_group(group, seat_of, system.task_tokens)] += 1
                grouped.update(nodes)
            elif len(made_in) > 1:
                # Options made by several statements are read as the sum of their values, which
                # holds every option; only the numbering is not in any value's tokens.
                entry[1] += max(option.extra + (system.task_tokens if option.task else 0) for option in group)
            elif branched:
                (j,) = made_in
                entry[6][j] += 1
                grouped.update(nodes)
            # Other options all made by one earlier statement are its value (`_value_options`).
        for source in call.inputs + call.again:
            if source in grouped:
                continue
            j = where[source]
            if i is None or j == i:
                entry[2][seat_of[source]] += 1
            else:
                outside.add(j)
        entry[3].update(outside)
    ids = {call.id for call in calls}
    value: Counter = Counter()
    read = set()
    options: Group = ()
    for call in every if i is not None else ():
        if where[call.id] > i:
            read.update(source for source in call.inputs if source in ids)
            options = options or _value_options(call, ids, seat_of, system.task_tokens)
    value.update(seat_of[source] for source in read)
    seats = tuple(
        (seat, SeatCalls(
            n, fixed, tuple(sorted(reads.items())), tuple(sorted(values.items())), path, tuple(sorted(either.items())),
            tuple(sorted(branch_either.items())), tuple(sorted(branch_values.items())), tuple(sorted(cards.items())),
        ))
        for (seat, path), (n, fixed, reads, values, either, branch_either, branch_values, cards) in sorted(per_seat.items())
    )
    grouped: dict[int, set] = {}
    paths: dict[int, tuple] = {}
    for call in calls:
        grouped.setdefault(call.step, set()).add(seat_of[call.id])
        paths[call.step] = call.alternative  # one walker request: one alternative
    steps = tuple(tuple(sorted(grouped[step])) for step in sorted(grouped))
    steps_paths = tuple(paths[step] for step in sorted(grouped))
    return Unit(vector, seats, tuple(sorted(value.items())), options, steps, steps_paths)


def _group(group, seat_of, task_tokens: int) -> Group:
    """An exclusive read's options (ir/unroll.py `Option`) by the seats that make their calls."""
    return tuple(sorted(
        (
            tuple(sorted(Counter(seat_of[node] for node in option.nodes).items())),
            option.extra + (task_tokens if option.task else 0),
            option.path,
        )
        for option in group
    ))


def _value_options(call: CallNode, ids: set[str], seat_of, task_tokens: int) -> Group:
    """The options of `call`'s exclusive read whose calls all belong to the statement made of
    `ids` (its value is one of several, a route's answer), or () if it reads none such."""
    for group in call.either:
        nodes = {node for option in group for node in option.nodes}
        if nodes and nodes <= ids:
            return _group(group, seat_of, task_tokens)
    return ()


_PROMPT_TOKENS: dict[tuple[str, str | None], int] = {}


def _prompt_tokens(role) -> int:
    """`template_tokens`, remembered by the role's text (a long-running editor server makes new
    Role records on every edit, so the cache is keyed by value and kept small)."""
    if role.output_schema is not None:  # its schema counts too (ir/tokens.py), and is no key
        return template_tokens(role)
    key = (role.prompt, role.system)
    found = _PROMPT_TOKENS.get(key)
    if found is None:
        if len(_PROMPT_TOKENS) > 1024:
            _PROMPT_TOKENS.clear()
        found = _PROMPT_TOKENS[key] = template_tokens(role)
    return found


def _restricted(unit: Unit, slots: tuple[int, ...], vector: tuple[int, ...]) -> Unit:
    """`unit` (at the largest counts) with the instances that `vector` does not have taken out."""
    count = dict(zip(slots, vector))

    def exists(seat: SeatKey) -> bool:
        s, k = seat
        return k < count.get(s, k + 1)

    def kept(group: Group) -> Group:
        options = ((tuple((seat, n) for seat, n in seats if exists(seat)), extra, path) for seats, extra, path in group)
        return tuple(option for option in options if option[:2] != ((), 0))

    seats = tuple(
        (seat, SeatCalls(
            c.calls, c.fixed, tuple((r, n) for r, n in c.reads if exists(r)), c.values, c.alternative,
            tuple((kept(g), n) for g, n in c.either if kept(g)),
            tuple((kept(g), n) for g, n in c.branch_either if kept(g)), c.branch_values,
            tuple((card, n) for card, n in c.cards if exists(card[1])),
        ))
        for seat, c in unit.seats
        if exists(seat)
    )
    running = [(tuple(seat for seat in step if exists(seat)), path) for step, path in zip(unit.steps, unit.step_paths)]
    steps = tuple(step for step, _ in running if step)
    paths = tuple(path for step, path in running if step)
    value = tuple((seat, n) for seat, n in unit.value if exists(seat))
    return Unit(vector, seats, value, kept(unit.value_options), steps, paths)
