"""The template MILP's columns for a plan's step cards: the steps together read the plan once.

A `plan` step's prompt shows its card beside the plan, and a card is cut from
the plan's output, so the cards of one plan together are at most as long as
it is. The worst case puts the whole output in the card of the step with the
dearest input price. `C[p]` stands for that: a row per step keeps it at least
what that step would pay to read the plan's whole output once more (the
product of its price and the planner's cap, split by model as the R columns
of `_Builder.reads` are, `split_by_model`), and C[p] enters the cost once, where the plan runs.
Like every linearised column it only adds to the cost, so at any solution it
can be lowered to that maximum, and the budget row stays the exact bound
(ir/bounds.py `cost_amounts`).
"""

from __future__ import annotations

import math
from collections import defaultdict


class SharedCards:
    """Mixed into the template MILP's builder (optimize/template.py), whose columns it uses."""

    card_column: dict

    def card_reads(self, statement, units) -> None:
        read_of: dict = {}
        most_of: dict = defaultdict(float)
        for unit, y in units:
            for seat, calls in unit.seats:
                # However many of the plan's cards this seat shows, they share the plan's output.
                for (plan, source, path), _ in calls.cards:
                    if plan not in self.card_column:
                        self.card_column[plan] = self.new(f"C[{plan}]")
                        self.costs[path][self.card_column[plan]] += 1.0
                    key = (seat, plan)
                    if key not in read_of:
                        read_of[key] = self.new(f"R[{statement.index},{seat},{plan}]")
                    r = read_of[key]
                    most = self.most_tokens(source)
                    most_of[key] = max(most_of[key], most)
                    known = self.known_tokens(source)
                    terms = [] if known is not None else [(j, -c) for j, c in self.tokens(source)]
                    fixed = known if known is not None else 0.0
                    if y is None:
                        self.row("cards", [(r, 1.0), *terms], fixed, math.inf)
                    else:
                        self.row("cards", [(r, 1.0), *terms, (y, -most)], fixed - most, math.inf)
        for (seat, plan), r in read_of.items():
            priced = self.split_by_model("cards", f"Q[{statement.index},{seat},{plan}", seat, r, most_of[seat, plan])
            # C[plan] >= what this step pays to read the plan's output once more.
            self.row("cards", [(self.card_column[plan], 1.0), *((q, -rate) for q, rate in priced)], 0.0, math.inf)
