"""CBC solves the template MILP to the same optimum as HiGHS (the binder benchmark's comparison)."""

from __future__ import annotations

import math
import warnings
from pathlib import Path

import pytest

from bamasc.optimize import bind, exact
from bamasc.optimize.formulation import Column, MilpRow, Objective, SeatIlp
from bamasc.optimize.highs import optimise_columns
from bamasc.plan.compile import check_file

pulp = pytest.importorskip("pulp")
with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)  # PuLP 3.3 deprecates its bundled CBC, which we use
    cbc_available = pulp.PULP_CBC_CMD(msg=False).available()
if not cbc_available:
    pytest.skip("CBC is not available", allow_module_level=True)

from bamasc.optimize.pulp_model import optimise_columns_with_cbc  # noqa: E402

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

PIPELINE = '''
model strong {
  provider = fake
  name = "strong"
  price { input = 2.5  output = 10 }
  tier = 1
  max_output = 512
}
model weak {
  provider = fake
  name = "weak"
  price { input = 0.1  output = 0.4 }
  tier = 2
  max_output = 1024
}
role First {
  max_output = 300
  reads = answer
  prompt = "Do: {{task}}"
}
role Next {
  reads = answer
  prompt = "Go on: {{task}} {{v0}}"
}
role Executor {
  max_output = 200
  reads = answer
  prompt = "Solve: {{task}} {{previous?}}{{feedback?}}"
}
role Critic {
  max_output = 64
  reads = verdict
  prompt = "Check {{solution}} for {{task}}."
}
topology pipe {
  slot s0 : First [0..3]
  slot s1 : Next [1..3]
  flow {
    v0 = parallel s0(task)
    answer chain s1(task, v0)
  }
}
topology fix {
  slot executor : Executor [1..3]
  slot critic : Critic [0..2]
  flow { answer refine executor(task) with critic until approved }
}
system s {
  models = [strong, weak]
  topologies = [pipe, fix]
  budget = 5000
  task_tokens = 200
}
'''


def with_cbc(monkeypatch):
    monkeypatch.setattr(
        exact, "optimise_columns", lambda ilp, objectives, **_: optimise_columns_with_cbc(ilp, objectives)
    )


def same(highs, cbc) -> None:
    assert highs.feasible == cbc.feasible
    if highs.feasible:
        assert highs.tier_seats == cbc.tier_seats
        assert math.isclose(highs.quality, cbc.quality, abs_tol=1e-7)
        assert math.isclose(highs.worst_case_cost, cbc.worst_case_cost, rel_tol=1e-9, abs_tol=1e-6)
    else:
        assert highs.cheapest_cost == pytest.approx(cbc.cheapest_cost, rel=1e-9)
        assert highs.binding_rows == cbc.binding_rows


CASES = [
    (str(EXAMPLES / "gsm8k.bam"), "gsm8k", template, budget)
    for template in ("linear", "star", "feedback", "planner")
    for budget in (300.0, 875.0, 2000.0)
]


@pytest.mark.parametrize("path, system, template, budget", CASES)
def test_cbc_binds_the_example_like_highs(monkeypatch, path, system, template, budget):
    program, _, _ = check_file(path, budgets=False)
    highs = bind.bind_template(program, program.systems[system], template, budget)
    with_cbc(monkeypatch)
    same(highs, bind.bind_template(program, program.systems[system], template, budget))


@pytest.mark.parametrize("template", ["pipe", "fix"])
@pytest.mark.parametrize("budget", [100.0, 1500.0, 4000.0, 1e6])
def test_cbc_binds_pipelines_and_refine_like_highs(tmp_path, monkeypatch, template, budget):
    path = tmp_path / "t.bam"
    path.write_text(PIPELINE)
    program, diagnostics, _ = check_file(str(path), budgets=False)
    assert program is not None, [d.message for d in diagnostics]
    highs = bind.bind_template(program, program.systems["s"], template, budget)
    with_cbc(monkeypatch)
    same(highs, bind.bind_template(program, program.systems["s"], template, budget))


def test_extra_columns_keep_their_integrality_and_bounds():
    # n integer in [0, 10], c continuous in [0.25, 4]: 2n <= 7 and c + n <= 5.
    # Maximising n, then c: n = 3 (3.5 if n were continuous), c = 2.
    ilp = SeatIlp(
        seats=(),
        rows=(
            MilpRow("a", (0,), (2.0,), -math.inf, 7.0),
            MilpRow("b", (0, 1), (1.0, 1.0), -math.inf, 5.0),
        ),
        extra=(Column("n", 0.0, 10.0, integer=True), Column("c", 0.25, 4.0)),
    )
    objectives = [Objective([-1.0, 0.0], 0.5), Objective([0.0, -1.0], 0.0)]
    for values in (optimise_columns(ilp, objectives), optimise_columns_with_cbc(ilp, objectives)):
        assert values == pytest.approx([3.0, 2.0])
    # Minimising c alone meets its lower bound, not zero.
    assert optimise_columns_with_cbc(ilp, [Objective([0.0, 1.0], 0.0)])[1] == pytest.approx(0.25)


def test_an_infeasible_milp_is_none():
    ilp = SeatIlp(
        seats=((0, 0, 0),),
        rows=(MilpRow("x", (0, 1), (1.0, 1.0), 3.0, math.inf),),
        extra=(Column("n", 0.0, 1.0, integer=True),),
    )
    assert optimise_columns(ilp, [Objective([1.0, 1.0], 0.0)]) is None
    assert optimise_columns_with_cbc(ilp, [Objective([1.0, 1.0], 0.0)]) is None
