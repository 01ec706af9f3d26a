"""What `objective = value` binds against the default `objective = tiers`: cost, value and seats per tier.

    python benchmarks/bench_objective.py [--random 20] [--seed 0]

For each system of the examples (at each budget of its `budgets`, else at its
`budget`; not the one-model `*_nano` ablations) and for random templates
(tests/test_template_milp.py's generator: every combinator, random pools,
qualities and budgets; those with no binding within their budget are drawn
again, and counted), binds every template
twice, once per objective, picks the strongest template of each (by that
objective's own ranking) and prints one Markdown row: the worst-case cost,
the value (the sum over seats of role weight x quality, optimize/value.py,
the same measure for both bindings) and the seats per tier, strongest first.
"""

from __future__ import annotations

import argparse
import glob
import os
import random
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from bamasc.optimize.bind import bind_template, select_template  # noqa: E402
from bamasc.optimize.value import SeatWorth  # noqa: E402
from bamasc.ir.unroll import unroll  # noqa: E402
from bamasc.plan.compile import check_file  # noqa: E402
from bamasc.records import replace  # noqa: E402


def worth(program, binding) -> float:
    """The binding's value: the sum over its seats of role weight x the model's quality for the role."""
    topology = program.topologies[binding.template]
    largest = unroll(topology, {slot.name: slot.hi for slot in topology.slots})
    seat_worth = SeatWorth(program, topology, largest.calls)
    role = {slot.name: slot.role for slot in topology.slots}
    return sum(seat_worth.weight(role[s.slot]) * seat_worth.quality(program.models[s.model], role[s.slot])
               for s in binding.seats)


def best(program, system, budget: float):
    """The strongest feasible template binding of `system` at `budget`, by the system's objective, or None."""
    return select_template([bind_template(program, system, name, budget) for name in system.topologies], "strongest")


def row(label: str, program, system, budget: float) -> tuple[str, tuple | None]:
    """The Markdown row, and (cost, value) under tiers then under value; None when neither binds."""
    cells = [label, f"{budget:g}"]
    scores = []
    for objective in ("tiers", "value"):
        found = best(program, replace(system, objective=objective), budget)
        if found is None:
            cells += ["-", "infeasible", "-", "-"]
            continue
        tiers = "/".join(str(n) for n in found.tier_seats)
        value = worth(program, found)
        cells += [found.template, f"{found.worst_case_cost:.1f}", f"{value:.3f}", tiers]
        scores.append((found.worst_case_cost, value))
    return "| " + " | ".join(cells) + " |", tuple(scores) if len(scores) == 2 else None


def examples() -> list[tuple]:
    rows = []
    for path in sorted(glob.glob(os.path.join(ROOT, "examples", "*.bam"))):
        program, _, _ = check_file(path, budgets=False)
        if program is None:
            continue
        for system in program.systems.values():
            if system.name.endswith("_nano"):
                continue  # one-model ablations: both objectives bind them alike
            for budget in system.budgets or (system.budget,):
                rows.append(row(f"{os.path.basename(path)} {system.name}", program, system, budget))
    return rows


def random_templates(count: int, seed: int) -> tuple[list[tuple], int]:
    """`count` rows of random templates that bind, and how many drawn did not."""
    from tests.test_template_milp import random_source

    rows = []
    skipped = 0
    i = -1
    with tempfile.TemporaryDirectory() as folder:
        while len(rows) < count:
            i += 1
            name, source = random_source(random.Random(seed + i))
            path = os.path.join(folder, f"random{i}.bam")
            with open(path, "w", encoding="utf-8") as out:
                out.write(source)
            program, diagnostics, _ = check_file(path, budgets=False)
            if program is None:
                sys.exit(f"random template {i} does not check: {[d.message for d in diagnostics]}")
            system = program.systems["s"]
            found = row(f"random {seed + i} ({name})", program, system, system.budget)
            if found[1] is None:
                skipped += 1
                continue
            rows.append(found)
    return rows, skipped


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--random", type=int, default=20, help="random templates to bind")
    parser.add_argument("--seed", type=int, default=0, help="the first random template's seed")
    args = parser.parse_args()
    print("| program | budget µ$ | tiers: template | cost µ$ | value | seats per tier "
          "| value: template | cost µ$ | value | seats per tier |")
    print("|---|---:|---|---:|---:|---|---|---:|---:|---|")
    shown = examples()
    for line, _ in shown:
        print(line, flush=True)
    drawn, skipped = random_templates(args.random, args.seed)
    for line, _ in drawn:
        print(line, flush=True)
    print()
    for label, rows in (("examples", shown), ("random templates", drawn)):
        pairs = [scores for _, scores in rows if scores is not None]
        cheaper = sum(v[0] < t[0] - 1e-6 for t, v in pairs)
        dearer = sum(v[0] > t[0] + 1e-6 for t, v in pairs)
        worth_more = sum(v[1] > t[1] + 1e-9 for t, v in pairs)
        cost = sum(v[0] for _, v in pairs) / sum(t[0] for t, _ in pairs)
        value = sum(v[1] for _, v in pairs) / sum(t[1] for t, _ in pairs)
        print(f"{label}: {len(pairs)} rows bound by both; by value {cheaper} cheaper, {dearer} dearer, "
              f"{worth_more} worth more; total cost x{cost:.3f}, total value x{value:.3f} against tiers")
    print(f"random templates with no binding within their budget, drawn again: {skipped}")


if __name__ == "__main__":
    main()
