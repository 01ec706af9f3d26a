"""The template MILP's columns for reads of calls that exclude each other (a dynamic plan's step).

A step of a dynamic plan has one call per seat it may run on, and only one of
them runs; a later step that reads it reads one output, so its prompt holds at
most the largest of their caps, not their sum. A route's answer read in the
statement that made it is one branch's value, a list or one output. `E[i,g]`
stands for the largest option of such a group: a row per option keeps it at
least that option's output tokens and numbering,
and it only adds to what seats read (the R rows), so at any solution it can be
lowered to the maximum itself, and the budget row stays the exact bound.
"""

from __future__ import annotations

import math


class ExclusiveReads:
    """Mixed into the template MILP's builder (optimize/template.py), whose columns it uses."""

    largest_of: dict
    value_column: dict
    value_most: dict
    value_known: dict

    def largest(self, statement: int, group) -> int:
        """E[statement, group]: the tokens of the largest option of `group` (statements.Group),
        made on first use."""
        key = (statement, group)
        if key not in self.largest_of:
            column = self.largest_of[key] = self.new(f"E[{statement},{len(self.largest_of)}]")
            for seats, extra in group:
                known, terms = float(extra), []
                for seat, n in seats:
                    tokens = self.known_tokens(seat)
                    if tokens is None:
                        terms += [(j, -c) for j, c in self.tokens(seat, n)]
                    else:
                        known += n * tokens
                self.row("either", [(column, 1.0), *terms], known, math.inf)
        return self.largest_of[key]

    def most_of(self, group) -> float:
        """The most tokens the largest option of an exclusive read (statements.Group) can show."""
        return max(sum(n * self.most_tokens(seat) for seat, n in seats) + extra for seats, extra in group)

    def known_of(self, group) -> float | None:
        """The tokens of an exclusive read's largest option when they are the same in every binding."""
        known = [[self.known_tokens(seat) for seat, _ in seats] for seats, _ in group]
        if any(None in option for option in known):
            return None
        return max(sum(t * n for t, (_, n) in zip(tokens, seats)) + extra for tokens, (seats, extra) in zip(known, group))

    def option_terms(self, option) -> list[tuple[int, float]]:
        """An option's output tokens as (column, coefficient) terms."""
        seats, _ = option
        return [(j, c) for seat, n in seats for j, c in self.tokens(seat, n)]

    @staticmethod
    def options(unit) -> tuple:
        """What a reader of the unit's value sees one of: its options, or the whole value."""
        return unit.value_options or ((unit.value, 0),)

    def value_rows(self, index: int, units) -> None:
        """W[index], the tokens a later reader sees of statement `index`'s value: at least each
        option of each unit in force (y), or a known number where that is the same in every binding."""
        options = [(option, y) for unit, y in units for option in self.options(unit)]
        self.value_most[index] = max(self.most_of((option,)) for option, _ in options)
        if len(units) == 1 and units[0][1] is None:
            known = self.known_of(tuple(option for option, _ in options))
            if known is not None:
                self.value_known[index] = known
                return
        column = self.value_column[index] = self.new(f"W[{index}]")
        for (seats, extra), y in options:
            value = [(j, -c) for j, c in self.option_terms((seats, extra))]
            if y is None:
                self.row("value", [(column, 1.0), *value], float(extra), math.inf)
            else:  # W >= the option's tokens when unit y is the one in force
                most = self.most_of(((seats, extra),))
                self.row("value", [(column, 1.0), *value, (y, -most)], extra - most, math.inf)
