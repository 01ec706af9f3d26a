"""The template MILP's reads of other seats' outputs as products of seat choices (the coupled form).

A seat σ that reads the output of seat τ pays p_in(model at σ) · cap(model at
τ): a product of two assignments. `template._Builder.reads` prices a seat's
whole read as one column R split by the reader's model (Q[σ,m] ≤ Rmax·x[σ,m]);
its LP relaxation lets a fractional reader put the whole read on its cheapest
model, at any source, and an optional reader read up to Rmax·(1 − Σx) tokens
for free. Here each pair (σ, τ) gets z[m, m'] = x[σ,m]·x[τ,m'] instead (m, m' models):

    Σ_m' z[m, m'] ≤ x[σ,m]                 Σ_m z[m, m'] ≤ x[τ,m']
    Σ_m  z[m, m'] ≥ x[τ,m'] + a[σ] − 1     Σ_m' z[m, m'] ≥ x[σ,m] + a[τ] − 1

with a the seat's fill (Σ of its x). At 0/1 seats these leave z the product
exactly, so the budget row stays the exact bound; with fractional seats the LP
has to couple the reader's models with the source's in proportion. Together
with the seat rows that fill the first `lo` instances (formulation.py), this
is what lets HiGHS settle the tier objectives of 20 slots x 50 models at the
root instead of after thousands of nodes. Only the reader's input rate and the
source's output cap enter a pair's cost, so z is indexed by those (at most
|models at σ| x |models at τ| columns a pair), and it is used where a seat
reads few seats (`COUPLE_UP_TO`).
"""

from __future__ import annotations

import math
from collections import defaultdict

COUPLE_UP_TO = 128
"""Product columns a reading seat may take; a seat that reads more is priced through R and Q."""


class CoupledReads:
    """Mixed into the template MILP's builder (optimize/template.py), whose columns it uses."""

    value_seats: dict
    value_column: dict
    couple_up_to: float  # COUPLE_UP_TO; 0 where every read takes the R/Q form, inf where none does
    input_rates: dict  # (seat, model) -> the input rate its reads are billed at
    products: list  # (z column, reader's x columns, source's x columns): z is their product

    def coupled(self, seat, calls):
        """Price what `seat` reads of seats, directly or through padded values, as products.

        Returns the reads left for the R/Q form, as (seat reads, value reads, either reads):
        the values of rotating statements and the reads of exclusive groups, or all of them
        when the seat reads more than `COUPLE_UP_TO` product columns' worth.
        """
        sources: dict = defaultdict(int)
        known = 0.0
        values_left = []
        for source, n in calls.reads:
            sources[source] += n
        for j, n in calls.values:
            if isinstance(self.value_column.get(j), float):  # the value's tokens, the same in every binding
                known += n * self.value_column[j]
            elif j in self.value_seats:
                for source, times in self.value_seats[j]:
                    sources[source] += n * times
            else:
                values_left.append((j, n))
        pairs = {}
        for source, n in sources.items():
            tokens = self.known_tokens(source)
            if tokens is not None:
                known += n * tokens
            elif self.models(source):  # a seat past the slot's largest count makes no call
                pairs[source] = n
        width = len(self.models(seat)) * sum(len(self.models(source)) for source in pairs if source != seat)
        if width > self.couple_up_to:
            return calls.reads, calls.values, calls.either
        path = calls.alternative
        for j, m in self.models(seat):
            # Known tokens, and a seat's reads of its own output, are linear in its x.
            own = pairs.get(seat, 0) * self.cap[seat[0]][m]
            self.costs[path][j] += self.input_rate(seat, m) * (known + own)
        for source, n in pairs.items():
            if source != seat:
                self.product(seat, source, n, path)
        return (), tuple(values_left), calls.either

    def input_rate(self, seat, m: int) -> float:
        key = (seat, m)
        if key not in self.input_rates:
            self.input_rates[key] = self.rates(seat, m, None)[0]
        return self.input_rates[key]

    def product(self, seat, source, n: int, path) -> None:
        """z columns for `seat` reading `source`'s output n times, with their rows and cost.

        A pair's cost depends only on the reader's input rate and the source's output cap, so
        models are grouped by those: one z per (rate, cap), its rows over the sums of their x.
        """
        by_rate: dict = defaultdict(list)
        for j, m in self.models(seat):
            by_rate[self.input_rate(seat, m)].append((j, 1.0))
        by_cap: dict = defaultdict(list)
        for i, m2 in self.models(source):
            by_cap[self.cap[source[0]][m2]].append((i, 1.0))
        z = {}
        for rate in by_rate:
            for cap in by_cap:
                column = z[rate, cap] = self.new(f"z[{seat};{source}]", 1.0)
                self.costs[path][column] += rate * n * cap
                self.products.append((column, tuple(j for j, _ in by_rate[rate]), tuple(i for i, _ in by_cap[cap])))
        filled = [t for terms in by_rate.values() for t in terms]
        source_filled = [t for terms in by_cap.values() for t in terms]
        for rate, chosen in by_rate.items():
            row = [(z[rate, cap], 1.0) for cap in by_cap]
            self.row("couple", [*row, *((j, -1.0) for j, _ in chosen)], -math.inf, 0.0)
            self.row("couple", [*row, *((j, -1.0) for j, _ in chosen), *((i, -1.0) for i, _ in source_filled)], -1.0, math.inf)
        for cap, chosen in by_cap.items():
            row = [(z[rate, cap], 1.0) for rate in by_rate]
            self.row("couple", [*row, *((i, -1.0) for i, _ in chosen)], -math.inf, 0.0)
            self.row("couple", [*row, *((i, -1.0) for i, _ in chosen), *((j, -1.0) for j, _ in filled)], -1.0, math.inf)
