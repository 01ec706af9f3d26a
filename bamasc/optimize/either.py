"""The template MILP's columns for reads of calls that exclude each other (a dynamic plan's step).

A step of a dynamic plan has one call per seat it may run on, and only one of
them runs; a later step that reads it reads one output, so its prompt holds at
most the largest of their caps, not their sum. `E[i,g]` stands for that
maximum: a row per seat of group g keeps it at least that seat's output tokens,
and it only adds to what seats read (the R rows), so at any solution it can be
lowered to the maximum itself, and the budget row stays the exact bound.
"""

from __future__ import annotations

import math


class ExclusiveReads:
    """Mixed into the template MILP's builder (optimize/template.py), whose columns it uses."""

    largest_of: dict

    def largest(self, statement: int, group) -> int:
        """E[statement, group]: the largest output of the seats of `group`, made on first use."""
        key = (statement, group)
        if key not in self.largest_of:
            column = self.largest_of[key] = self.new(f"E[{statement},{group}]")
            for seat in group:
                known = self.known_tokens(seat)
                terms = [] if known is not None else [(j, -c) for j, c in self.tokens(seat)]
                self.row("either", [(column, 1.0), *terms], known or 0.0, math.inf)
        return self.largest_of[key]
