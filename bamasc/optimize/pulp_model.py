"""The seat ILP built with PuLP and solved by CBC, the BAMAS paper's solver.

Only the solver benchmark uses this: it is the baseline the HiGHS adapter is
measured against. It takes its rows and objectives from `formulation.formulate`
and `formulation.ordered_objectives`, so CBC solves exactly the ILPs HiGHS
solves: the paper's single weighted tier objective, or the lexicographic
sequence (one ILP per objective, each optimum fixed by a row before the next)
that bamasc runs by default.
"""

from __future__ import annotations

import math
import time
import warnings
from typing import Literal

from bamasc.optimize.formulation import formulate, ordered_objectives
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
    import pulp

    ilp = formulate(problem, drop_dominated=drop_dominated)
    model = pulp.LpProblem("seats", pulp.LpMinimize)
    x = [model.add_variable(f"x_{s}_{k}_{m}", 0, 1, cat=pulp.LpBinary) for s, k, m in ilp.seats]

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
    everything = range(len(ilp.seats))
    objectives = ordered_objectives(problem, ilp, method, tie_break)
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
    return evaluate(problem, [seat for seat, var in zip(ilp.seats, x, strict=True) if var.value() > 0.5])
