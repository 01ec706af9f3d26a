"""The binder's strategy: every threshold that picks the binder's path, and the record of the path a bind took.

The path is how the slot counts are searched (one MILP or a vector at a time)
and how each MILP is answered (the dynamic program, one solve, objectives in
turn or in steps, with or without presolve). What stays with the formulation
is not here: which reads the MILP prices as products (`coupled.COUPLE_UP_TO`)
and how large a problem the dynamic program takes on before it leaves it to
the MILP (`pareto.MOST_CONFIGURATIONS`, `pareto.MOST_LABELS`).

The thresholds decide how the best binding is searched for, and so how fast
it is found, not what is best: tests/test_template_milp.py and
tests/optimize/test_pareto.py bind the same templates along each path
(enumerated and in one MILP, in one solve and in steps, by the dynamic program
and by HiGHS) and compare what each finds with the others and with brute
force. `max_cuts` only bounds how often an answer may be cut before the bind
fails. `DEFAULT_STRATEGY` is what every bind uses unless given another
(`bind_template(..., strategy=...)`).
"""

from __future__ import annotations

from bamasc.records import record


@record
class BindStrategy:
    """How the binder searches a template's slot counts and solves each MILP (optimize/bind.py, exact.py)."""

    # Rotating slots (a `refine` or `plan` statement's) whose counts combine in at most this many ways are
    # enumerated, each vector an MILP over the other slots. Count indicators for rotating slots need big-M
    # rows as large as a unit's whole cost; at the extreme prices and token counts the limits allow, their
    # spread defeats the solver's tolerances (a test file that binds by enumeration came back wrongly
    # infeasible). Enumerating keeps every MILP free of them; beyond this many combinations the indicators
    # are the only way left.
    enumerate_up_to: float = 4096

    # HiGHS's MIP presolve (which also finds the symmetries of seats that differ only in their instance
    # number) runs on MILPs of at most this many columns. It pays on small and mid-sized template MILPs: it
    # took gsm8k's compile from 93 to 36 ms while count indicators were used, and a `chain` of two [0..63]
    # slots (753 columns, medium budget) from 648 to 146 ms. On large ones it costs far more than it saves:
    # 20 slots x 50 models (3,000 seat columns) at a tight budget took 52 s with it and 4.4 s without (each
    # objective's presolve ran 6-7 s).
    presolve_up_to_columns: float = 1000

    # Lexicographic MILPs above this many columns are solved an objective at a time, each on a MILP narrowed
    # to the tier counts found before it (`TemplateSolver._in_steps`).
    split_from_columns: float = 1000

    # Presolve on the MILP of the last objectives (quality, cost) after the tiers were found in steps, with no
    # sub-MIP heuristics (RINS, RENS, root reduced cost): the cost objective starts near its optimum there. On
    # 20 slots x 50 models (about 600 columns left) the cost objective of the medium parallel row took 0.67 s
    # so, against 1.75 s with the heuristics and 9.4 s without presolve. The tier objectives keep presolve off
    # above `presolve_up_to_columns`: with it on their narrowed MILPs (and the counts held by equalities),
    # the medium parallel bind took 348 s.
    narrow_presolve_up_to_columns: float = 1500

    # Lexicographic MILPs above this many columns are first offered to the dynamic program over slots
    # (optimize/pareto.py), which binds pipelines without a MILP where it applies: on 20 slots x 50 models it
    # took the medium and tight binds from 0.4-7 s to 60-150 ms (docs/benchmarks.md), the same bindings; the
    # loose ones, which HiGHS solves at the root, went from 90-130 to 120-180 ms. Smaller MILPs keep HiGHS,
    # whose answers the example plans were made with. Above it, too, a MILP solved tier by tier is offered
    # again without the tiers found empty (`TemplateSolver._sweep_narrowed`). Infinite: never.
    sweep_from_columns: float = 1000

    # MILPs up to this many columns solve all objectives at once (`exact._combined`): two slots of [0..63]
    # (500 to 630 columns) bind in one solve about twice as fast as in three. On 20 slots x 50 models (2,900
    # columns) the one weighted objective took 10x longer than the tier objectives in turn.
    combine_up_to_columns: float = 1000

    # Bindings the solver may return just over the budget or the deadline (its feasibility tolerance), each
    # then ruled out and the MILP solved again, before the bind fails.
    max_cuts: int = 50


DEFAULT_STRATEGY = BindStrategy()
"""The strategy of every bind not given one."""


SEARCHES = {
    "padded": "one MILP over every slot count, with no count indicators (every statement is padded)",
    "indicators": "one MILP over every slot count, with count indicators (the rotating slots' counts combine "
                  "in too many ways to enumerate)",
    "enumerate": "the rotating slots' count vectors one at a time, each an MILP over the other slots",
    "every-vector": "every count vector one at a time (the flow reads parts of earlier values)",
    "paper": "the reference's per-seat estimate over every model count (--cost-model paper)",
    "greedy": "seats filled one at a time, each on the strongest model the budget still allows (--method greedy)",
}
"""How a bind searched the template's slot counts, by the name a `BindPath` records."""

WAYS = {
    "sweep": "the dynamic program over slots, with no MILP solved",
    "combined": "one MILP solve, its objectives weighted into one",
    "in-turn": "one MILP, its objectives solved in turn",
    "in-steps": "the tier objectives in turn, each on an MILP narrowed to the tier counts found before it",
    "in-steps-sweep": "the tier objectives in turn, then the dynamic program on the MILP narrowed to them",
    "cheapest": "the cost alone",
}
"""How an MILP's best binding was found, by the name a `BindPath` records."""


@record
class BindPath:
    """The path a bind took: how it searched the slot counts, and how each MILP was answered and checked.

    It covers the search for a binding within the budget; the searches an
    infeasible bind then makes for the cheapest binding and for the rules that
    stop it are not in it."""

    search: str  # a key of SEARCHES
    vectors: int = 0  # count vectors searched one at a time (enumerate, every-vector); 0 for one MILP
    solved: int = 0  # those of them solved; the rest were skipped unsolved (optimize/prune.py: none could win)
    ways: tuple[tuple[str, int], ...] = ()  # (a key of WAYS, MILPs answered that way), in the order first taken
    cuts: int = 0  # answers ruled out by the exact re-check, just over the budget or the deadline

    @property
    def steps(self) -> tuple[str, ...]:
        """The path in short: the search, each way an MILP was answered, and the exact re-check of the answers."""
        checked = ("exact-recheck",) if self.ways else ()
        return (self.search, *(way for way, _ in self.ways), *checked)

    def lines(self) -> list[str]:
        """The path in words, for `bamasc explain`: the steps, then a line on each."""
        counted = ""
        if self.vectors:
            skipped = self.vectors - self.solved
            counted = f" ({self.solved} of {self.vectors} count vectors solved"
            counted += f", {skipped} skipped unsolved)" if skipped else ")"
        lines = [" > ".join(self.steps), f"{self.search}{counted}: {SEARCHES[self.search]}"]
        lines += [f"{way} x {count}: {WAYS[way]}" for way, count in self.ways]
        if "exact-recheck" in self.steps:
            cut = f"{self.cuts} cut (just over the budget or the deadline) and solved again"
            cut = cut if self.cuts else "none cut"
            lines.append(f"exact-recheck: every answer's bound recomputed on its unrolled calls; {cut}")
        return lines
