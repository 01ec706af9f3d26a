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
    value_column: dict  # statement -> its W column, or its tokens when known
    value_most: dict
    branch_value: dict  # statement -> branch path -> W column of that branch's answer, or its tokens
    branch_value_most: dict

    def largest(self, statement: int, group) -> int:
        """E[statement, group]: the tokens of the largest option of `group` (statements.Group),
        made on first use."""
        key = (statement, group)
        if key not in self.largest_of:
            column = self.largest_of[key] = self.new(f"E[{statement},{len(self.largest_of)}]")
            for seats, extra, _ in group:
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
        return max(sum(n * self.most_tokens(seat) for seat, n in seats) + extra for seats, extra, _ in group)

    def known_of(self, group) -> float | None:
        """The tokens of an exclusive read's largest option when they are the same in every binding."""
        known = [[self.known_tokens(seat) for seat, _ in seats] for seats, _, _ in group]
        if any(None in option for option in known):
            return None
        return max(sum(t * n for t, (_, n) in zip(tokens, seats)) + extra for tokens, (seats, extra, _) in zip(known, group))

    def option_terms(self, option) -> list[tuple[int, float]]:
        """An option's output tokens as (column, coefficient) terms."""
        return [(j, c) for seat, n in option[0] for j, c in self.tokens(seat, n)]

    @staticmethod
    def options(unit) -> tuple:
        """What a reader of the unit's value sees one of: its options, or the whole value."""
        return unit.value_options or ((unit.value, 0, ()),)

    def value_rows(self, index: int, units) -> None:
        """W[index], the tokens a later reader sees of statement `index`'s value: at least each
        option of each unit in force (y), or a known number where that is the same in every binding.
        For a value that is one of several branches' answers, also W[index, path] per branch."""
        options = [(option, y) for unit, y in units for option in self.options(unit)]
        self.value_column[index] = self.at_least(f"W[{index}]", options, units)
        self.value_most[index] = max(self.most_of((option,)) for option, _ in options)
        for path in dict.fromkeys(option[2] for option, _ in options if option[2]):
            mine = [(option, y) for option, y in options if option[2] == path]
            self.branch_value[index][path] = self.at_least(f"W[{index}{label(path)}]", mine, units)
            self.branch_value_most[index, path] = max(self.most_of((option,)) for option, _ in mine)

    def at_least(self, name: str, options, units) -> int | float:
        """A column at least each (option, y) when its unit y is in force, or the number it would
        be when that is the same in every binding (one unit, every seat known)."""
        if len(units) == 1 and units[0][1] is None:
            known = self.known_of(tuple(option for option, _ in options))
            if known is not None:
                return float(known)
        column = self.new(name)
        for option, y in options:
            value = [(j, -c) for j, c in self.option_terms(option)]
            if y is None:
                self.row("value", [(column, 1.0), *value], float(option[1]), math.inf)
            else:  # W >= the option's tokens when unit y is the one in force
                most = self.most_of((option,))
                self.row("value", [(column, 1.0), *value, (y, -most)], option[1] - most, math.inf)
        return column

    def branch_parts(self, statement: int, calls) -> dict:
        """What a seat's calls read of branches' outputs, per branch: {path: (known tokens, terms,
        most tokens)}, the terms over E and W columns (a branch pays for what is read of it)."""
        parts: dict = {}

        def add(path, known, terms, most):
            k, t, m = parts.get(path, (0.0, [], 0.0))
            parts[path] = (k + known, t + terms, m + most)

        for group, n in calls.branch_either:
            for path in dict.fromkeys(option[2] for option in group):
                mine = tuple(option for option in group if option[2] == path)
                add(path, 0.0, [(self.largest(statement, mine), float(n))], n * self.most_of(mine))
        for j, n in calls.branch_values:
            for path, column in self.branch_value[j].items():
                most = n * self.branch_value_most[j, path]
                if isinstance(column, float):
                    add(path, n * column, [], most)
                else:
                    add(path, 0.0, [(column, float(n))], most)
        return parts


def label(path: tuple) -> str:
    """How a column's name shows the route branch it prices: `O[0@billing]`; nothing outside routes."""
    return "".join(f"@{branch}" for _, branch in path)
