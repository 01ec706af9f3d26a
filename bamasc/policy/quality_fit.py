"""Estimates each model's quality for each role from offline rows, as `quality` blocks for the user to review.

An offline row (`bamasc collect`) says whether one task was solved by one
template at one budget. The binding that ran is the one the compiler makes for
that template and budget, so binding it again names the model of every seat.
A model's estimated quality for a role is the share of tasks solved by the
runs in which it held a seat of that role, smoothed as
(solved + 1) / (runs + 2) so that a pair seen once is not 0 or 1.

What this deliberately does not do: separate one seat's effect from the other
seats of the same run (a strong executor makes its critic look good too), or
weigh a row by how the logging policy picked it. The counts are written
beside each estimate so the user can judge it before pasting it in.
"""

from __future__ import annotations

from bamasc.optimize.bind import bind_template
from bamasc.records import record


@record
class RoleQuality:
    """What the runs in which `model` held a seat of `role` show."""

    model: str
    role: str
    runs: int
    solved: int

    @property
    def quality(self) -> float:
        """The share of those tasks solved, smoothed: (solved + 1) / (runs + 2)."""
        return (self.solved + 1) / (self.runs + 2)


@record
class QualityFit:
    """The estimates, and which rows were used."""

    estimates: tuple[RoleQuality, ...]  # by model in pool order, then role in declaration order
    rows: int  # rows used: feasible, of a template of the system, bound again now
    ignored: int  # rows of another template, infeasible ones, and those with no binding today


def fit_quality(program, system, rows) -> QualityFit:
    """Estimate the pool's qualities per role from offline `rows` of `system` (policy/data.OfflineRow)."""
    seats_of: dict[tuple[str, float], frozenset[tuple[str, str]] | None] = {}
    counts: dict[tuple[str, str], list[int]] = {}
    used = ignored = 0
    for row in rows:
        if not row.feasible or row.template not in system.topologies:
            ignored += 1
            continue
        key = (row.template, row.budget)
        if key not in seats_of:
            seats_of[key] = _pairs(program, system, row.template, row.budget)
        pairs = seats_of[key]
        if pairs is None:
            ignored += 1
            continue
        used += 1
        for pair in pairs:
            tally = counts.setdefault(pair, [0, 0])
            tally[0] += 1
            tally[1] += row.success
    order = {name: i for i, name in enumerate(system.models)}
    roles = {name: i for i, name in enumerate(program.roles)}
    estimates = sorted(
        (RoleQuality(model, role, runs, solved) for (model, role), (runs, solved) in counts.items()),
        key=lambda e: (order.get(e.model, len(order)), roles.get(e.role, len(roles))),
    )
    return QualityFit(tuple(estimates), used, ignored)


def _pairs(program, system, template: str, budget: float) -> frozenset[tuple[str, str]] | None:
    """The (model, role) pairs of the seats the compiler binds for `template` at `budget`; None: none fits."""
    binding = bind_template(program, system, template, budget)
    if not binding.feasible:
        return None
    topology = program.topologies[template]
    return frozenset((seat.model, topology.slot(seat.slot).role) for seat in binding.seats)


def quality_text(fit: QualityFit, system_name: str, data: str) -> str:
    """The estimates as `.bam` text: per model, its counts in a comment and a `quality { Role = q ... }` block."""
    lines = [
        f"// Qualities fitted by `bamasc fit-weights` for system {system_name} from {data}:",
        f"// {fit.rows} rows used ({fit.ignored} ignored: infeasible, of another template, or not bound now).",
        "// Each is the share of tasks solved by the runs in which the model held a seat of",
        "// the role, smoothed as (solved + 1) / (runs + 2); it does not separate one seat's",
        "// effect from the other seats of the same run. Review the counts, then put each",
        "// block into the model it names (a role left out keeps the model's quality).",
    ]
    by_model: dict[str, list[RoleQuality]] = {}
    for estimate in fit.estimates:
        by_model.setdefault(estimate.model, []).append(estimate)
    for model, estimates in by_model.items():
        counts = "; ".join(f"{e.role} {e.runs} runs, {e.solved} solved" for e in estimates)
        entries = "  ".join(f"{e.role} = {e.quality:.3f}" for e in estimates)
        lines += ["", f"// model {model}: {counts}", f"quality {{ {entries} }}"]
    return "\n".join(lines) + "\n"
