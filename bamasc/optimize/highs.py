"""The HiGHS adapter: load the seat ILP into highspy, solve its objectives in order, check the answer.

highspy is imported inside the functions that solve, never at import time, so
that importing the optimize package (or anything on `bamasc lint`'s path)
stays free of it.
"""

from __future__ import annotations

import math
from typing import Literal

from bamasc.optimize.errors import SolverError
from bamasc.optimize.formulation import Objective, SeatIlp, cost_objective, formulate, ordered_objectives
from bamasc.optimize.problem import Binding, Seat, SeatProblem, evaluate, violations
from bamasc.records import replace

PRESOLVE_UP_TO_COLUMNS = 20
"""HiGHS's MIP presolve settles models this small outright (the paper's pool:
0.3 ms a solve with it, 0.6 ms without); from about 20 seat columns on it costs
more than it saves on the lexicographic solves (5 models x 3 slots: 15 ms
against 4 ms)."""

_MAX_BUDGET_RETRIES = 50


def solve(
    problem: SeatProblem,
    method: Literal["lexicographic", "weights"] = "lexicographic",
    *,
    tie_break: bool = True,
    native: bool = False,
    time_limit: float | None = None,
) -> Binding | None:
    """The best binding, or None when none is feasible.

    Best means most tier-1 seats, then most tier-2 seats, ..., then the highest
    total quality, then the lowest cost. "lexicographic" solves that order one
    objective at a time, fixing each optimum with a row before the next, and is
    exact at any scale; native=True hands the same objectives to HiGHS's
    multi-objective mode instead (same bindings; slower on these models).
    "weights" uses the paper's single weighted tier objective (see
    `tier_weights`) and raises ValueError where those weights are not exact.
    tie_break=False stops after the tier objective(s), like the paper's single
    solve: quality and cost are then whatever the solver happened to find.
    time_limit (seconds, per HiGHS run) raises TimeoutError when reached.
    """
    ilp = formulate(problem)
    objectives = ordered_objectives(problem, ilp, method, tie_break)
    for _ in range(_MAX_BUDGET_RETRIES):
        # The weighted objective solves faster with presolve (1.6x and 4.6x on two
        # 50x20 instances); the native mode must run without it (see _run_native).
        presolve = method == "weights" or len(ilp.seats) <= PRESOLVE_UP_TO_COLUMNS
        seats = _optimise(ilp, objectives, native=native, presolve=presolve, time_limit=time_limit)
        if seats is None:
            return None
        broken = violations(problem, seats)
        if not broken:
            return evaluate(problem, seats)
        if broken != ("budget",):
            raise SolverError(f"HiGHS returned seats that break {', '.join(broken)}: {seats}")
        # Over budget only by the solver's feasibility tolerance: rule that binding
        # out and solve again, so the budget holds exactly.
        problem = replace(problem, excluded=(*problem.excluded, seats))
        ilp = formulate(problem)
    raise SolverError("HiGHS kept returning bindings just over the budget")


def cheapest_seats(problem: SeatProblem) -> tuple[Seat, ...] | None:
    """The cheapest binding that meets every row except the budget (excluded bindings stay out)."""
    unbudgeted = replace(problem, budget=math.inf)
    ilp = formulate(unbudgeted)
    return _optimise(ilp, [cost_objective(unbudgeted, ilp)], native=False)


_HIGHS_OPTIONS = (
    ("output_flag", False),
    # One thread: these MIPs take a few milliseconds, and waiting on HiGHS's
    # second worker (root analytic centre, symmetry detection) cost more than it
    # saved, up to 20-40 ms a solve whenever another process held the other core.
    ("threads", 1),
    ("mip_rel_gap", 0.0),
    ("mip_abs_gap", 1e-9),
    ("random_seed", 0),
    ("blend_multi_objectives", False),
    # The feasibility-jump heuristic costs ~8 ms per MIP even on the paper's
    # 10-column pool and did not pay for itself on the benchmark sizes.
    ("mip_heuristic_run_feasibility_jump", False),
)


def _new_highs(time_limit: float | None):
    import highspy

    # highspy.Highs registers callbacks in its constructor, and that makes HiGHS
    # print its banner to stdout before output_flag can be switched off; the
    # core class underneath does not, and has the same solving methods.
    highs = getattr(highspy, "_Highs", highspy.Highs)()
    for name, value in _HIGHS_OPTIONS:
        highs.setOptionValue(name, value)
    if time_limit is not None:
        highs.setOptionValue("time_limit", float(time_limit))
    return highs


def _load(highs, ilp: SeatIlp) -> None:
    import highspy
    import numpy as np

    n = ilp.width
    no_entries = np.zeros(0, dtype=np.int32)
    lower = np.array([0.0] * len(ilp.seats) + [c.lower for c in ilp.extra])
    upper = np.array([1.0] * len(ilp.seats) + [min(c.upper, highspy.kHighsInf) for c in ilp.extra])
    _check(highs.addCols(n, np.zeros(n), lower, upper, 0, no_entries, no_entries, np.zeros(0)), "addCols")
    integer, continuous = int(highspy.HighsVarType.kInteger), int(highspy.HighsVarType.kContinuous)
    kinds = [integer] * len(ilp.seats) + [integer if c.integer else continuous for c in ilp.extra]
    _check(
        highs.changeColsIntegrality(n, np.arange(n, dtype=np.int32), np.array(kinds, dtype=np.uint8)),
        "changeColsIntegrality",
    )
    if not ilp.rows:
        return
    starts = np.cumsum([0] + [len(r.columns) for r in ilp.rows[:-1]]).astype(np.int32)
    indices = np.fromiter((j for r in ilp.rows for j in r.columns), dtype=np.int32)
    values = np.fromiter((v for r in ilp.rows for v in r.values), dtype=np.float64)
    lower = np.array([max(r.lower, -highspy.kHighsInf) for r in ilp.rows])
    upper = np.array([min(r.upper, highspy.kHighsInf) for r in ilp.rows])
    # A row HiGHS refuses would be dropped silently, and the answer would break it.
    _check(highs.addRows(len(ilp.rows), lower, upper, len(indices), starts, indices, values), "addRows")


def _optimise(
    ilp: SeatIlp,
    objectives: list[Objective],
    *,
    native: bool = False,
    presolve: bool = False,
    time_limit: float | None = None,
) -> tuple[Seat, ...] | None:
    """Minimise the objectives lexicographically; the chosen seats, or None if infeasible."""
    values = optimise_columns(ilp, objectives, native=native, presolve=presolve, time_limit=time_limit)
    if values is None:
        return None
    return tuple(seat for seat, x in zip(ilp.seats, values[: len(ilp.seats)], strict=True) if x > 0.5)


def optimise_columns(
    ilp: SeatIlp,
    objectives: list[Objective],
    *,
    native: bool = False,
    presolve: bool = False,
    time_limit: float | None = None,
    sub_mips: bool = True,
) -> list[float] | None:
    """Minimise the objectives lexicographically; every column's value, or None if infeasible.

    native=False solves them one at a time, fixing each optimum with a row, with
    HiGHS's presolve on or off; native=True hands all objectives to HiGHS's
    multi-objective mode (presolve always off there; separate solves where
    highspy lacks the mode). sub_mips=False switches off the heuristics that
    solve smaller MIPs of their own (RINS, RENS, root reduced cost).
    """
    if not ilp.width:
        # HiGHS reports an empty model as an error status; decide it here.
        return [] if all(r.lower <= 0.0 <= r.upper for r in ilp.rows) else None
    highs = _new_highs(time_limit)
    _load(highs, ilp)
    highs.setOptionValue("presolve", "on" if presolve else "off")
    if not sub_mips:
        highs.setOptionValue("mip_heuristic_run_rins", False)
        highs.setOptionValue("mip_heuristic_run_rens", False)
        highs.setOptionValue("mip_heuristic_run_root_reduced_cost", False)
    if native and hasattr(highs, "addLinearObjective"):
        return _run_native(highs, objectives)
    return _run_sequential(highs, objectives, time_limit)


def _run_native(highs, objectives: list[Objective]):
    import highspy
    import numpy as np

    # HiGHS 1.16 starts each priority's MIP from the previous optimum, and with
    # presolve on it can map that start wrongly and return a worse point as
    # optimal (seen on a 20-column instance: cost 51 where 50 is feasible,
    # reported as 40). Without presolve the result is right.
    highs.setOptionValue("presolve", "off")
    for position, objective in enumerate(objectives):
        linear = highspy.HighsLinearObjective()
        # In lexicographic mode HiGHS reads only the sign of the weight (> 0
        # minimises, <= 0 maximises) and ignores the model's sense; when blending
        # it scales by the weight and minimises. Weight 1 with negated
        # coefficients for maximised terms means "minimise" in both modes.
        linear.weight = 1.0
        linear.offset = 0.0
        linear.coefficients = np.asarray(objective.coefficients, dtype=np.float64)
        linear.abs_tolerance = objective.tolerance
        linear.rel_tolerance = -1.0  # < 0 switches the relative bound off
        linear.priority = len(objectives) - position  # higher priority is solved first
        _check(highs.addLinearObjective(linear), "addLinearObjective")
    _run(highs)
    return _solution_or_none(highs)


def _run_sequential(highs, objectives: list[Objective], time_limit: float | None):
    """Lexicographic solve by hand: optimise, fix the optimum with a row, go on."""
    import time

    import highspy
    import numpy as np

    deadline = None if time_limit is None else time.monotonic() + time_limit
    n = highs.getNumCol()
    columns = np.arange(n, dtype=np.int32)
    values = None
    for position, objective in enumerate(objectives):
        coefficients = np.asarray(objective.coefficients, dtype=np.float64)
        # Start each solve from scratch: a previous optimum kept as a MIP start
        # would meet the presolve defect described in _run_native.
        highs.clearSolver()
        highs.changeObjectiveSense(highspy.ObjSense.kMinimize)
        highs.changeColsCost(n, columns, coefficients)
        if deadline is not None:
            highs.setOptionValue("time_limit", max(0.0, deadline - time.monotonic()))
        _run(highs)
        values = _solution_or_none(highs)
        if values is None:
            return None
        if position + 1 < len(objectives):
            optimum = float(np.dot(coefficients, values))
            nonzero = np.flatnonzero(coefficients).astype(np.int32)
            _check(
                highs.addRow(
                    -highspy.kHighsInf,
                    optimum + objective.tolerance,
                    len(nonzero),
                    nonzero,
                    coefficients[nonzero],
                ),
                "addRow",
            )
    return values


def _run(highs) -> None:
    """highs.run(), restarting HiGHS's task scheduler if it was started with another thread count."""
    import highspy

    if highs.run() == highspy.HighsStatus.kError and highs.getModelStatus() == highspy.HighsModelStatus.kNotset:
        # HiGHS keeps one scheduler per process, sized by the first run in it;
        # a run that asks for another number of threads fails until it is reset
        # (another highspy user in the same process may have started it).
        highs.resetGlobalScheduler(True)
        highs.run()


def _solution_or_none(highs):
    import highspy

    status = highs.getModelStatus()
    if status == highspy.HighsModelStatus.kInfeasible:
        return None
    if status == highspy.HighsModelStatus.kTimeLimit:
        raise TimeoutError("HiGHS reached its time limit before proving a binding optimal")
    if status != highspy.HighsModelStatus.kOptimal:
        raise SolverError(f"HiGHS stopped with model status {highs.modelStatusToString(status)}")
    return list(highs.getSolution().col_value)


def _check(status, what: str) -> None:
    import highspy

    if status == highspy.HighsStatus.kError:
        raise SolverError(f"HiGHS {what} failed")

