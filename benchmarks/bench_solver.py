"""Seat-ILP solve time: HiGHS against PuLP/CBC (the BAMAS paper's solver) on the same ILPs.

Run from the repository root: `python benchmarks/bench_solver.py [--quick]`.
Every time is model build + solve, what a user waits for: `formulate`, loading
the rows into the solver, solving and reading the binding back (for CBC that
includes PuLP writing the model and starting the CBC process). Each cell is the
median of several runs in this one process; a cell that runs past the time limit
is shown as "> limit". Problems are random but seeded, so reruns see the same
ILPs.
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bamasc.optimize.formulation import formulate
from bamasc.optimize.highs import solve
from bamasc.optimize.problem import SeatProblem
from bamasc.optimize.pulp_model import solve_with_cbc
from bamasc.optimize.relax import cheapest_seats_cost
from bamasc.records import replace

SIZES = ((5, 3), (10, 5), (20, 10), (50, 20))  # (models, slots), after the paper's 2 x 1 pool
PRICE_BAND = {1: (1000.0, 2000.0), 2: (300.0, 1000.0), 3: (10.0, 300.0)}  # µ$ per call, by tier
BUDGET_SHARE = 0.3  # budget = cheapest + this share of (most expensive - cheapest): it binds
MAX_RUNS = 5
STOP_REPEATING_AFTER_S = 20.0  # a cell stops repeating once its runs add up to this


def paper_pool() -> SeatProblem:
    """The paper's pool: one executor slot of 1..5 seats, 557.4 and 203.6 µ$ a seat, 1625 µ$."""
    return SeatProblem(
        slot_names=("executor",),
        lo=(1,),
        hi=(5,),
        model_names=("tier-1", "tier-2"),
        tiers=(1, 2),
        cost=(((557.4, 203.6),) * 5,),
        budget=1625.0,
    )


def random_problem(models: int, slots: int, seed: int = 0) -> SeatProblem:
    """Tiers 1..3 in turn, prices by tier, slots of 1..3 seats, a budget that binds."""
    rng = random.Random(f"{models}x{slots}/{seed}")
    tiers = tuple(1 + m % 3 for m in range(models))
    price = [rng.uniform(*PRICE_BAND[t]) for t in tiers]
    calls = [rng.randint(1, 4) for _ in range(slots)]
    # Later instances make 10% more calls each (a refine round reuses the last one).
    cost = tuple(
        tuple(tuple(round(price[m] * calls[s] * (1 + 0.1 * k), 1) for m in range(models)) for k in range(3))
        for s in range(slots)
    )
    quality = tuple(tuple(round(rng.uniform(0.5, 1.0), 2) for _ in range(models)) for _ in range(slots))
    unbudgeted = SeatProblem(
        slot_names=tuple(f"slot{s}" for s in range(slots)),
        lo=(1,) * slots,
        hi=(3,) * slots,
        model_names=tuple(f"model{m}" for m in range(models)),
        tiers=tiers,
        quality=quality,
        cost=cost,
        budget=math.inf,
    )
    cheapest = cheapest_seats_cost(unbudgeted)
    dearest = sum(max(row) for rows in cost for row in rows)
    return replace(unbudgeted, budget=round(cheapest + BUDGET_SHARE * (dearest - cheapest)))


def timed(run, limit: float):
    """Median seconds over up to MAX_RUNS runs and the last result; (None, None) past the limit."""
    times, result = [], None
    while len(times) < MAX_RUNS and sum(times) < STOP_REPEATING_AFTER_S:
        start = time.perf_counter()
        try:
            result = run(limit)
        except TimeoutError:
            return None, None
        times.append(time.perf_counter() - start)
    return statistics.median(times), result


def show(seconds: float | None, limit: float) -> str:
    if seconds is None:
        return f"> {limit:.0f} s"
    if seconds < 0.01:
        return f"{seconds * 1000:.1f} ms"
    return f"{seconds * 1000:.0f} ms" if seconds < 10 else f"{seconds:.1f} s"


def ratio(slow: float | None, fast: float | None, limit: float) -> str:
    if fast is None:
        return "n/a"
    if slow is None:
        return f"> {limit / fast:.0f}x"
    return f"{slow / fast:.1f}x"


COLUMNS = (
    "models x slots",
    "seat columns (offered / all)",
    "HiGHS lex",
    "CBC lex",
    "CBC / HiGHS, lex",
    "HiGHS weights",
    "CBC weights",
    "CBC / HiGHS, weights",
    "CBC weights, all models",
    "HiGHS lex, native mode",
    "same tier counts",
)


def markdown_row(cells) -> str:
    return "| " + " | ".join(str(cell) for cell in cells) + " |"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=float, default=60.0, help="seconds before a run counts as too slow")
    parser.add_argument("--quick", action="store_true", help="stop at 20 x 10")
    args = parser.parse_args()
    limit = args.limit

    import highspy
    import pulp

    cases = [("2 x 1 (paper pool)", paper_pool())]
    cases += [(f"{m} x {s}", random_problem(m, s)) for m, s in SIZES if not (args.quick and m * s > 200)]

    version = f"{highspy.HIGHS_VERSION_MAJOR}.{highspy.HIGHS_VERSION_MINOR}.{highspy.HIGHS_VERSION_PATCH}"
    python = platform.python_version()
    print(f"Python {python}, highspy {version}, PuLP {pulp.__version__}, {os.cpu_count()} CPUs.")
    print(f"Times are model build + solve, median of up to {MAX_RUNS} runs in this process.")
    print("lex: the lexicographic ILPs bamasc solves by default (tiers, then quality, then cost,")
    print("     one ILP per objective); CBC solves the same sequence through PuLP.")
    print("weights: the paper's single weighted tier objective, no tie-break, on both solvers.")
    print("All models: CBC on the full formulation, dominated models kept (the paper's ILP).\n")
    print(markdown_row(COLUMNS))
    print(markdown_row(["---"] * len(COLUMNS)))
    for label, problem in cases:
        offered = len(formulate(problem).seats)
        everything = len(formulate(problem, drop_dominated=False).seats)
        runs = {
            "lex": lambda t, p=problem: solve(p, time_limit=t),
            "cbc lex": lambda t, p=problem: solve_with_cbc(p, "lexicographic", tie_break=True, time_limit=t),
            "weights": lambda t, p=problem: solve(p, "weights", tie_break=False, time_limit=t),
            "cbc weights": lambda t, p=problem: solve_with_cbc(p, time_limit=t),
            "cbc all": lambda t, p=problem: solve_with_cbc(p, drop_dominated=False, time_limit=t),
            "native": lambda t, p=problem: solve(p, native=True, time_limit=t),
        }
        seconds, bindings = {}, {}
        for name, run in runs.items():
            seconds[name], bindings[name] = timed(run, limit)
        tiers = {b.tier_counts for b in bindings.values() if b is not None}
        agree = "yes" if len(tiers) == 1 else "NO"
        timed_out = [name for name, b in bindings.items() if b is None]
        if timed_out:
            agree += f" (without {', '.join(timed_out)}: timed out)"
        lex, cbc_lex = bindings["lex"], bindings["cbc lex"]
        if lex and cbc_lex and not math.isclose(cbc_lex.cost, lex.cost, rel_tol=1e-9, abs_tol=1e-6):
            agree += " (lex cost differs)"
        cells = [
            label,
            f"{offered} / {everything}",
            show(seconds["lex"], limit),
            show(seconds["cbc lex"], limit),
            ratio(seconds["cbc lex"], seconds["lex"], limit),
            show(seconds["weights"], limit),
            show(seconds["cbc weights"], limit),
            ratio(seconds["cbc weights"], seconds["weights"], limit),
            show(seconds["cbc all"], limit),
            show(seconds["native"], limit),
            f"{agree} {lex.tier_counts if lex else ''}",
        ]
        print(markdown_row(cells), flush=True)


if __name__ == "__main__":
    main()
