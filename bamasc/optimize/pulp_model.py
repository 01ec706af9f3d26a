"""The seat ILP built with PuLP and solved by CBC with the paper's single weighted objective.

Only the solver benchmark uses this: it is the baseline the HiGHS adapter is
measured against. It shares the rows of `ilp.formulate`, so both solvers see the
same ILP. There is no tie-break on quality or cost, as in the paper.
"""

from __future__ import annotations

import math

from bamasc.optimize.ilp import Binding, SeatProblem, evaluate, formulate, tier_weights


def solve_with_cbc(problem: SeatProblem, *, time_limit: float | None = None) -> Binding | None:
    """Maximise Σ W_tier · x with CBC; None when infeasible.

    Raises TimeoutError when CBC stops at time_limit (seconds) without proving
    its binding optimal.
    """
    import pulp

    ilp = formulate(problem)
    weight = dict(zip(problem.tier_levels, tier_weights(problem), strict=True))
    model = pulp.LpProblem("seats", pulp.LpMaximize)
    x = [pulp.LpVariable(f"x_{s}_{k}_{m}", cat=pulp.LpBinary) for s, k, m in ilp.seats]
    model += pulp.LpAffineExpression(
        [(x[j], weight[problem.tiers[m]]) for j, (_, _, m) in enumerate(ilp.seats)]
    )
    for number, row in enumerate(ilp.rows):
        expression = pulp.LpAffineExpression(
            [(x[j], v) for j, v in zip(row.columns, row.values, strict=True)]
        )
        if row.lower == row.upper:
            model += (expression == row.lower, f"r{number}")
        else:
            if row.lower > -math.inf:
                model += (expression >= row.lower, f"r{number}_lo")
            if row.upper < math.inf:
                model += (expression <= row.upper, f"r{number}_up")
    model.solve(pulp.PULP_CBC_CMD(msg=False, gapRel=0.0, gapAbs=0.0, timeLimit=time_limit))
    status = pulp.LpStatus[model.status]
    if status == "Infeasible":
        return None
    # PuLP reports "Optimal" for any integer solution CBC returns, even one cut
    # short by the time limit; sol_status tells the two apart.
    if status != "Optimal" or model.sol_status != pulp.LpSolutionOptimal:
        if time_limit is not None:
            raise TimeoutError(f"CBC stopped at its {time_limit} s limit with status {status}")
        raise RuntimeError(f"CBC stopped with status {status}")
    return evaluate(problem, [seat for seat, var in zip(ilp.seats, x, strict=True) if var.value() > 0.5])
