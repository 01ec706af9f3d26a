"""Worst cases over alternatives: where a decision runs exactly one of several sub-walks.

A call made inside a branch of a `route` carries its *alternative*: the path of
(decision, branch) pairs from the outermost decision in, so nested decisions
are allowed (ir/walk.py). Calls outside every decision always may run and
add up; of a decision's branches only one runs, so it adds the largest of
its branches' totals, each branch summing its own calls and the decisions
nested in it. Every worst case the compiler proves (cost, latency, the
cheapest floor, the MILP's epigraph rows) goes through `worst_case`, or
through `decisions` for the same tree, so none re-derives it.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable

from bamasc.records import record

Path = tuple[tuple[str, str], ...]
"""(decision id, branch name) pairs, outermost first; () outside every decision."""


@record
class Choice:
    """One decision of an unrolled flow: where it is, and every branch it may take."""

    id: str  # the router call's id
    within: Path  # the alternative the decision itself runs in
    branches: tuple[str, ...]  # in source order
    fallback: str | None  # the branch taken when the router names none; None: the task fails then


@record
class Worst:
    """A worst case over alternatives and the branch each decision takes in it."""

    total: float
    chosen: dict[str, str]  # decision id -> its costliest branch (the first declared on a tie)
    branch_totals: dict[str, dict[str, float]]  # decision id -> branch -> that branch's worst case

    def on_path(self, path: Path) -> bool:
        """Does the worst case run the calls of `path`?"""
        return all(self.chosen.get(decision) == branch for decision, branch in path)


def decisions(paths: Iterable[Path], choices: Iterable[Choice] = ()) -> list[tuple[Path, str, tuple[str, ...]]]:
    """Every decision as (within, id, branches), innermost first, from the paths calls carry
    and the `choices` an unroll recorded (which also name branches that make no call)."""
    found: dict[str, tuple[Path, list[str]]] = {}
    for choice in choices:
        found.setdefault(choice.id, (choice.within, []))[1].extend(choice.branches)
    for path in paths:
        for depth, (decision, branch) in enumerate(path):
            found.setdefault(decision, (path[:depth], []))[1].append(branch)
    ordered = [(within, decision, tuple(dict.fromkeys(branches))) for decision, (within, branches) in found.items()]
    return sorted(ordered, key=lambda entry: -len(entry[0]))


@record
class Both:
    """Where an amount is paid only when two decisions taken side by side (under one path) take
    these branches: a step of a dynamic plan on one seat reading an earlier step made on another,
    paying `rate` µ$ a token for the `tokens` it reads."""

    reader: Path
    writer: Path
    rate: float
    tokens: float


def worst_case(amounts: Iterable[tuple[Path | Both, float]], choices: Iterable[Choice] = (), joint: bool = True) -> Worst:
    """The sum of `amounts` outside decisions, plus for each decision its costliest branch. Amounts
    paid under two decisions at once (`Both`) make those decisions one block whose branches are
    chosen together (`_joint`); with `joint` False each reader is charged at the costliest branch
    of each decision it reads, instead: safe, and what the template MILP prices."""
    at: dict[Path, float] = defaultdict(float)
    both: list[tuple[Both, float]] = []
    for key, amount in amounts:
        if isinstance(key, Both):
            both.append((key, amount))
        else:
            at[key] += amount
    if not joint:
        _fold(at, both)
        both = []
    chosen: dict[str, str] = {}
    totals: dict[str, dict[str, float]] = {}
    found = decisions([*at, *(path for key, _ in both for path in (key.reader, key.writer))], choices)
    for within, decision, branches in found:
        if decision in chosen:
            continue
        block = _block(decision, within, found, both)
        paired = [(key, amount) for key, amount in both if key.reader[:-1] == within]
        joint_total = _joint(block, within, at, paired, chosen, totals) if len(block) > 1 else None
        if joint_total is not None:
            at[within] += joint_total
            continue
        _fold(at, paired)  # not of the form `_joint` needs: each decision alone, which is safe
        for member, member_branches in block:
            totals[member] = {branch: at.get(within + ((member, branch),), 0.0) for branch in member_branches}
            best = max(member_branches, key=lambda branch: totals[member][branch])  # max keeps the first of equals
            chosen[member] = best
            at[within] += totals[member][best]
    return Worst(at.get((), 0.0), chosen, totals)


def _fold(at: dict[Path, float], both) -> None:
    """Charge each reader the most any branch of each decision it reads could make it pay."""
    most: dict[tuple[Path, str], float] = defaultdict(float)
    for key, amount in both:
        most[key.reader, key.writer[-1][0]] = max(most[key.reader, key.writer[-1][0]], amount)
    for (reader, _), amount in most.items():
        at[reader] += amount


def _block(decision: str, within: Path, found, both) -> list[tuple[str, tuple[str, ...]]]:
    """The decisions under `within` tied to `decision` by amounts paid under both, in flow order."""
    linked: dict[str, set[str]] = defaultdict(set)
    for key, _ in both:
        if key.reader[:-1] == within and key.writer[:-1] == within:
            linked[key.reader[-1][0]].add(key.writer[-1][0])
            linked[key.writer[-1][0]].add(key.reader[-1][0])
    seen, todo = {decision}, [decision]
    while todo:
        for other in linked[todo.pop()] - seen:
            seen.add(other)
            todo.append(other)
    order = {entry[1]: n for n, entry in enumerate(found)}
    return sorted(((d, b) for w, d, b in found if w == within and d in seen), key=lambda entry: order[entry[0]])


def _joint(block, within: Path, at, both, chosen, totals) -> float | None:
    """The block's worst case over every combination of its branches: a dynamic plan's steps, each
    reading every earlier one, so what step i pays to read them is its rate times the tokens they
    wrote together. Steps in order, each kept combination carries (tokens written so far, total):
    one that has written no more and costs no more than another cannot end dearer, so only the
    others are kept (exact, and few). Records each decision's branch in the dearest combination,
    and per branch its total with the other decisions as they are there. None, recording nothing,
    where the amounts are not of that form."""
    size = len(block)
    index = {decision: i for i, (decision, _) in enumerate(block)}
    unary = [[at.get(within + ((d, b),), 0.0) for b in branches] for d, branches in block]
    rate = [[None] * len(branches) for _, branches in block]
    written: list[dict[int, float]] = [{} for _ in block]  # step j, branch l -> tokens read of it
    offset = [0.0] * size  # what step i reads beyond those tokens (the list's numbering)
    pairs = []
    for key, amount in both:
        i, k = index[key.reader[-1][0]], block[index[key.reader[-1][0]]][1].index(key.reader[-1][1])
        j, l = index[key.writer[-1][0]], block[index[key.writer[-1][0]]][1].index(key.writer[-1][1])
        pairs.append((i, k, j, l, key.rate, key.tokens, amount))
    if not _product_form(pairs, size, [len(b) for _, b in block], rate, written, offset):
        return None
    front = [(0.0, 0.0, ())]  # (tokens written, total, branches so far)
    for i in range(size):
        grown = []
        for tokens, total, picks in front:
            for k in range(len(unary[i])):
                paid = unary[i][k] + (rate[i][k] or 0.0) * (tokens + offset[i])
                grown.append((tokens + written[i].get(k, 0.0), total + paid, picks + (k,)))
        front = _undominated(grown)
    total, picks = max(((t, p) for _, t, p in front), key=lambda entry: (entry[0], [-k for k in entry[1]]))
    _record(block, unary, pairs, picks, chosen, totals)
    return total


def _product_form(pairs, size: int, widths: list[int], rate, written, offset) -> bool:
    """Fill each reading branch's rate, each written branch's tokens and each step's numbering
    from the pair amounts; False unless every seat that reads earlier steps reads all of them, at
    one rate, and each written branch shows the same tokens to every reader (up to its numbering)."""
    seen: dict[tuple[int, int, int], dict[int, float]] = defaultdict(dict)  # (i, k, j) -> l -> tokens
    for i, k, j, l, paid_rate, tokens, _ in pairs:
        if j >= i or (rate[i][k] is not None and rate[i][k] != paid_rate):
            return False
        rate[i][k] = paid_rate
        seen[i, k, j][l] = tokens
    for i in range(1, size):
        shift: dict[int, float] = {}
        for k in range(widths[i]):
            if rate[i][k] is None:
                continue  # this seat's prompt shows no earlier step
            for j in range(i):
                read = seen.get((i, k, j), {})
                if len(read) != widths[j]:
                    return False
                for l, tokens in read.items():
                    written[j].setdefault(l, tokens)
                    if shift.setdefault(j, tokens - written[j][l]) != tokens - written[j][l]:
                        return False
        offset[i] = sum(shift.values())
    return True


def _undominated(states):
    """The states no other state beats in both tokens written and total: only they can end dearest."""
    kept, most = [], -math.inf
    for state in sorted(states, key=lambda s: (-s[0], -s[1], s[2])):
        if state[1] > most:
            kept.append(state)
            most = state[1]
    return kept


def _record(block, unary, pairs, picks, chosen, totals) -> None:
    """Each decision's branch in the dearest combination, and per branch its total there: its own
    amounts and those it pays or is paid by the other decisions as they are."""
    for i, (decision, branches) in enumerate(block):
        chosen[decision] = branches[picks[i]]
        totals[decision] = {b: unary[i][k] for k, b in enumerate(branches)}
    for i, k, j, l, _, _, amount in pairs:
        if picks[j] == l:
            totals[block[i][0]][block[i][1][k]] += amount
        if picks[i] == k:
            totals[block[j][0]][block[j][1][l]] += amount
