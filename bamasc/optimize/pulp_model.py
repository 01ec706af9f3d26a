"""The seat ILP built with PuLP and solved by CBC, the BAMAS paper's solver.

Only the benchmarks use this: it is the baseline the HiGHS adapter is
measured against. `solve_with_cbc` takes its rows and objectives from
`formulation.formulate` and `formulation.ordered_objectives`, so CBC solves
exactly the ILPs HiGHS solves: the paper's single weighted tier objective, or
the lexicographic sequence (one ILP per objective, each optimum fixed by a row
before the next) that bamasc runs by default. `optimise_columns_with_cbc` does
the same for any `SeatIlp`, the template MILP's extra columns included: it
stands in for `highs.optimise_columns`.
"""

from __future__ import annotations

import math
import time
import warnings
from typing import Literal

from bamasc.optimize.formulation import Objective, SeatIlp, formulate, ordered_objectives
from bamasc.optimize.problem import Binding, SeatProblem, evaluate


def solve_with_cbc(
    problem: SeatProblem,
    method: Literal["lexicographic", "weights"] = "weights",
    *,
    tie_break: bool = False,
    drop_dominated: bool = True,
    time_limit: float | None = None,
) -> Binding | None:
    """The best binding by CBC; None when infeasible.

    method and tie_break mean what they mean for `highs.solve`; the default is the
    paper's setup, one weighted objective and no tie-break. drop_dominated=False
    solves the full formulation (every model offered in every slot). Raises
    TimeoutError when CBC stops at time_limit (seconds, for the whole solve)
    without proving its binding optimal.
    """
    ilp = formulate(problem, drop_dominated=drop_dominated)
    values = optimise_columns_with_cbc(ilp, ordered_objectives(problem, ilp, method, tie_break), time_limit)
    if values is None:
        return None
    return evaluate(problem, [seat for seat, x in zip(ilp.seats, values, strict=True) if x > 0.5])


def optimise_columns_with_cbc(
    ilp: SeatIlp, objectives: list[Objective], time_limit: float | None = None
) -> list[float] | None:
    """What `highs.optimise_columns` returns, solved by CBC: every column's value, or None if infeasible.

    Seat columns are binary, `ilp.extra` columns keep their bounds and
    integrality; the objectives are minimised in order, each optimum held by a
    row (with its tolerance) while the next is solved, as HiGHS's sequential
    solve does. Raises TimeoutError when CBC stops at time_limit (seconds, for
    all the objectives together) without proving its answer optimal.
    """
    import pulp

    if not ilp.width:
        return [] if all(r.lower <= 0.0 <= r.upper for r in ilp.rows) else None
    model = pulp.LpProblem("seats", pulp.LpMinimize)
    x = [model.add_variable(f"x_{s}_{k}_{m}", 0, 1, cat=pulp.LpBinary) for s, k, m in ilp.seats]
    for j, column in enumerate(ilp.extra):
        x.append(
            model.add_variable(
                f"c{j}",
                column.lower if column.lower > -math.inf else None,
                column.upper if column.upper < math.inf else None,
                cat=pulp.LpInteger if column.integer else pulp.LpContinuous,
            )
        )

    def expression(columns, values):
        return pulp.LpAffineExpression([(x[j], v) for j, v in zip(columns, values, strict=True) if v])

    for number, row in enumerate(ilp.rows):
        lhs = expression(row.columns, row.values)
        if row.lower == row.upper:
            model += (lhs == row.lower, f"r{number}")
        else:
            if row.lower > -math.inf:
                model += (lhs >= row.lower, f"r{number}_lo")
            if row.upper < math.inf:
                model += (lhs <= row.upper, f"r{number}_up")
    deadline = None if time_limit is None else time.monotonic() + time_limit
    everything = range(ilp.width)
    for position, objective in enumerate(objectives):
        model.setObjective(expression(everything, objective.coefficients))
        left = None if deadline is None else max(0.0, deadline - time.monotonic())
        with warnings.catch_warnings():
            # PuLP 3.3 deprecates the CBC binary it bundles in favour of a separate
            # package; the bundled one is what the paper's scripts ran.
            warnings.simplefilter("ignore", DeprecationWarning)
            solver = pulp.PULP_CBC_CMD(msg=False, gapRel=0.0, gapAbs=0.0, timeLimit=left)
        model.solve(solver)
        status = pulp.LpStatus[model.status]
        if status == "Infeasible":
            return None
        # PuLP reports "Optimal" for any integer solution CBC returns, even one cut
        # short by the time limit; sol_status tells the two apart.
        if status != "Optimal" or model.sol_status != pulp.LpSolutionOptimal:
            if time_limit is not None:
                raise TimeoutError(f"CBC stopped at its {time_limit} s limit with status {status}")
            raise RuntimeError(f"CBC stopped with status {status}")
        if position + 1 == len(objectives):
            break
        optimum = math.fsum(c * (x[j].value() or 0.0) for j, c in enumerate(objective.coefficients))
        model += (
            expression(everything, objective.coefficients) <= optimum + objective.tolerance,
            f"objective{position}",
        )
    return [var.value() or 0.0 for var in x]
