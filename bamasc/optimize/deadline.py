"""The template MILP's deadline row: the worst-case latency of the unrolled graph (ir/latency.py).

Mixed into the template MILP's builder (optimize/template.py), whose columns it uses.
"""

from __future__ import annotations

import math
from collections import defaultdict

from bamasc.optimize.either import label as _label


class DeadlineRows:
    """Σ over steps of the step's slowest call, held under the system's deadline."""

    latency: list  # [slot][model]: one attempt of a call, seconds
    unit_column: dict

    def deadline(self, statements, seconds: float) -> None:
        """Σ over steps of the step's slowest call ≤ the deadline (ir/latency.py's bound, exactly).

        A step of one seat adds that seat's latency, linear in x; a step of
        several (a `parallel`) gets a column at least each seat's latency. A
        rotating statement's steps count only for the unit in force (big-M on y).
        """
        total: dict[tuple, list] = defaultdict(list)  # per alternative, as the cost is
        for statement in statements:
            if statement.padded:
                (unit,) = statement.units
                for path, terms in self.step_terms(unit).items():
                    total[path] += terms
                continue
            spans: dict[tuple, int] = {}
            for unit in statement.units:
                y = self.unit_column[statement.index, unit.vector]
                for path, terms in {(): [], **self.step_terms(unit)}.items():
                    if path not in spans:
                        spans[path] = self.new(f"T[{statement.index}{_label(path)}]")
                        total[path].append((spans[path], 1.0))
                    most = sum(
                        max((self.latency[s][m] for (s, k) in step for _, m in self.models((s, k))), default=0.0)
                        for step, at in zip(unit.steps, unit.step_paths) if at == path
                    )
                    self.row("deadline", [(spans[path], 1.0), *((j, -v) for j, v in terms), (y, -most)], -most, math.inf)
        self.row("deadline", self.fold("D", total), -math.inf, float(seconds))

    def step_terms(self, unit) -> dict[tuple, list[tuple[int, float]]]:
        terms: dict[tuple, list] = defaultdict(list)
        for step, path in zip(unit.steps, unit.step_paths):
            if len(step) == 1:
                terms[path] += [(j, self.latency[step[0][0]][m]) for j, m in self.models(step[0])]
                continue
            slowest = self.new("L")
            for seat in step:
                seat_terms = [(j, -self.latency[seat[0]][m]) for j, m in self.models(seat)]
                self.row("deadline", [(slowest, 1.0), *seat_terms], 0.0, math.inf)
            terms[path].append((slowest, 1.0))
        return terms
