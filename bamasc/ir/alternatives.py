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


def worst_case(amounts: Iterable[tuple[Path, float]], choices: Iterable[Choice] = ()) -> Worst:
    """The sum of `amounts` outside decisions, plus for each decision its costliest branch."""
    at: dict[Path, float] = defaultdict(float)
    for path, amount in amounts:
        at[path] += amount
    chosen: dict[str, str] = {}
    totals: dict[str, dict[str, float]] = {}
    for within, decision, branches in decisions(list(at), choices):
        totals[decision] = {branch: at.get(within + ((decision, branch),), 0.0) for branch in branches}
        best = max(branches, key=lambda branch: totals[decision][branch])  # max keeps the first of equals
        chosen[decision] = best
        at[within] += totals[decision][best]
    return Worst(at.get((), 0.0), chosen, totals)
