"""The numeric limits: each is a BAM210 at the value, the limit itself is accepted, and within
the limits the compiler binds without the solver failing (docs/language.md, "Limits")."""

from __future__ import annotations

import math

import pytest

from bamasc import limits
from bamasc.cli import main
from bamasc.plan.compile import CompileError, compile_file
from bamasc.diagnostics import CODES, render_text
from bamasc.lint import lint_paths
from bamasc.optimize.errors import InexactWeights, SolverError
from bamasc.optimize.formulation import formulate, scaled_objective, tier_weights
from bamasc.optimize.highs import cheapest_seats, solve
from bamasc.optimize.problem import SeatProblem
from bamasc.records import replace

# One small file with a placeholder for every limited value; each case fills in one of them.
TEMPLATE = """\
model m {{
  provider   = fake
  name       = "m"
  price      {{ input = {input}  output = {output} }}
  tier       = {tier}
  max_output = {max_output}
  context    = {context}
  quality    = {quality}
}}

role Solver {{
  max_output = 384
  prompt     = "{{{{task}}}}"
}}

topology single {{
  slot solver : Solver [1..1]
  require count(solver, tier = {require_tier}) + {factor} * count(solver) >= {constant}
  flow {{ answer solver(task) }}
}}

system s {{
  models      = [m]
  topologies  = [single]
  budget      = {budget}
  budgets     = [{budgets}]
  task_tokens = {task_tokens}
  min_agents  = {min_agents}
  reward      {{ success = {success} }}
}}
"""
DEFAULTS = {
    "input": "1", "output": "1", "tier": "1", "max_output": "512", "context": "8192", "quality": "1.0",
    "require_tier": "1", "factor": "1", "constant": "0", "budget": "100000", "budgets": "1000",
    "task_tokens": "500", "min_agents": "1", "success": "1",
}
# (field, the largest accepted value, a value just past it)
LIMITS = [
    ("input", "1000000", "1000001"),
    ("output", "1e6", "1e12"),
    ("tier", "1000", "1001"),
    ("max_output", "10000000", "10000001"),
    ("context", "10_000_000", "10_000_001"),
    ("quality", "1000", "1000.5"),
    ("require_tier", "1000", "1001"),
    ("factor", "1000000", "1000001"),
    ("constant", "-1000000", "-1000001"),
    ("budget", "1000000000000", "1000000000001"),
    ("budgets", "$1000000", "$1000000.01"),
    ("task_tokens", "10000000", "99999999999999999999"),
    ("min_agents", "1", "100000000000000000000"),
    ("success", "-1000000", "1e7"),
]


def source(**values: str) -> str:
    return TEMPLATE.format(**{**DEFAULTS, **values})


def location_of(text: str, field: str, value: str) -> tuple[int, int]:
    """(line, column) of `value` written after `field` in `text`."""
    for number, line in enumerate(text.split("\n"), start=1):
        at = line.find(f"{field} ")
        if at < 0 and field in ("input", "output"):
            at = line.find(f"{field} =")
        if at >= 0 and value in line[at:]:
            return number, line.index(value, at) + 1
    raise AssertionError(f"{field} = {value} not in the source")


FIELD_IN_SOURCE = {"require_tier": "tier =", "factor": "+", "constant": ">="}


@pytest.mark.parametrize("field, largest, beyond", LIMITS, ids=[case[0] for case in LIMITS])
def test_a_value_past_its_limit_is_bam210_at_the_value(write_bam, field, largest, beyond):
    path = write_bam(source(**{field: beyond}))
    result = lint_paths([path])
    found = [(d.code, d.span.line, d.span.col) for d in result.diagnostics if d.code == "BAM210"]
    line, col = location_of(source(**{field: beyond}), FIELD_IN_SOURCE.get(field, field), beyond)
    assert found == [("BAM210", line, col)], render_text(result.diagnostics, result.sources)
    assert f"{path}:{line}:{col}: error[BAM210]" in render_text(result.diagnostics, result.sources)


@pytest.mark.parametrize("field, largest, beyond", LIMITS, ids=[case[0] for case in LIMITS])
def test_the_limit_itself_is_accepted(write_bam, field, largest, beyond):
    if field == "min_agents":
        largest = str(limits.MAX_MIN_AGENTS)
    result = lint_paths([write_bam(source(**{field: largest}))])
    assert "BAM210" not in {d.code for d in result.diagnostics}


def test_numbers_too_large_for_a_float_are_out_of_range_not_a_crash(write_bam):
    nines = "9" * 400
    path = write_bam(source(input="1e309", output=nines, budget="$1e303", max_output=nines))
    result = lint_paths([path])
    codes = [d.code for d in result.diagnostics]
    assert codes.count("BAM210") == 4
    assert all(len(d.message) < 200 for d in result.diagnostics)  # 400 digits are cut short


def test_products_of_small_require_constants_are_checked_once_multiplied_out(write_bam):
    result = lint_paths([write_bam(source(factor="1000 * 1000 * 1000"))])
    (diagnostic,) = [d for d in result.diagnostics if d.code == "BAM210"]
    assert "1000000000 once multiplied out" in diagnostic.message
    assert diagnostic.span.line == 18 and diagnostic.span.col == 3  # the whole require row


def test_every_limit_is_in_the_language_reference():
    with open("docs/language.md", encoding="utf-8") as handle:
        text = handle.read()
    limits_section = text.split("## Limits", 1)[1].split("\n## ", 1)[0]
    for written in ("1000000 $/Mtok", "1e12 µ$", "10000000", "10000 seats", "| 1000 |", "±1000000"):
        assert written in limits_section
    assert CODES["BAM210"][0] == "out-of-range"


# ---------------------------------------------------------------- within the limits, the compiler binds

WORST = """\
model dear  { provider = fake  name = "d"  price { input = 1000000  output = 1000000 }  tier = 1  max_output = 10000000 }
model cheap { provider = fake  name = "c"  price { input = 0.5  output = 1 }  tier = 2  max_output = 10000000 }
model free  { provider = fake  name = "f"  price { input = 0  output = 0 }  tier = 3  max_output = 10000000 }
role Executor { prompt = "{{task}} {{previous?}}{{solution?}}{{feedback?}}{{plan?}}{{step?}}" }
role Critic   { prompt = "{{task}} {{solution}}" }
role Planner  { prompt = "{{task}} {{feedback?}}" }
topology deep {
  slot planner  : Planner  [1..2]
  slot executor : Executor [1..8]
  slot critic   : Critic   [0..4]
  flow {
    steps = plan planner(task) using executor review critic max_steps 64
    answer steps
  }
}
system largest  { models = [dear, cheap, free]  topologies = [deep]  budget = 1000000000000  task_tokens = 10000000  min_agents = 3 }
system smallest { models = [dear, cheap, free]  topologies = [deep]  budget = 0.000001  task_tokens = 10000000 }
system no_free  { models = [dear, cheap]  topologies = [deep]  budget = 1000000000000  task_tokens = 10000000 }
"""


def test_the_largest_values_within_the_limits_compile(write_bam, tmp_path):
    # Seat costs here pass 1e15 µ$, where HiGHS refuses matrix values: before the budget row was
    # capped, this file linted clean and then stopped the compiler with a RuntimeError.
    path = write_bam(WORST)
    assert not lint_paths([path]).diagnostics
    result = compile_file(path, plan_dir=str(tmp_path))
    assert result.plan is not None, render_text(result.diagnostics, result.sources)
    for system in result.plan.systems:
        (template,) = system.templates
        assert template.feasible and template.worst_case_cost <= system.budget
        # The dearest model costs more than any budget on this task size, so no seat runs on it.
        assert all(seat.model != "dear" for seat in template.binding)


def test_a_seat_above_the_budget_enters_its_row_just_above_it():
    problem = SeatProblem(
        slot_names=("a",), lo=(1,), hi=(2,), model_names=("dear", "cheap"), tiers=(1, 2),
        cost=(((1e25, 3.0),) * 2,), budget=10.0,
    )
    (budget_row,) = [row for row in formulate(problem).rows if row.family == "budget"]
    assert max(budget_row.values) == 21.0 and budget_row.upper == 10.0
    binding = solve(problem)
    assert binding is not None and [m for _, _, m in binding.seats] == [1, 1] and binding.cost == 6.0


def test_objectives_past_two_to_the_forty_are_scaled_by_a_power_of_two():
    objective = scaled_objective([-(2.0**50), 3.0], 0.5)
    assert objective.coefficients == [-(2.0**40), 3.0 / 2**10] and objective.tolerance == 0.5 / 2**10
    small = scaled_objective([1.0, 2.0], 0.5)
    assert small.coefficients == [1.0, 2.0] and small.tolerance == 0.5
    problem = SeatProblem(
        slot_names=("a",), lo=(1,), hi=(1,), model_names=("x", "y"), tiers=(1, 1),
        cost=(((3e19, 2e19),),), budget=math.inf,
    )
    assert cheapest_seats(problem) == ((0, 0, 1),)


def test_tier_weights_refuse_a_budget_that_buys_more_than_two_to_the_53_seats():
    problem = SeatProblem(
        slot_names=("a",), lo=(1,), hi=(1,), model_names=("x", "y"), tiers=(1, 2),
        cost=(((1.0, 1e-300),),), budget=1e6,
    )
    with pytest.raises(InexactWeights, match="2\\*\\*53"):  # not an OverflowError from floor(inf)
        tier_weights(problem)


WEIGHTS_TOO_LARGE = """\
model m1 { provider = fake  name = "m1"  price { input = 0  output = 0.002 }  tier = 1  max_output = 1 }
model m2 { provider = fake  name = "m2"  price { input = 0  output = 0.003 }  tier = 2  max_output = 1 }
model m3 { provider = fake  name = "m3"  price { input = 0  output = 0.004 }  tier = 3  max_output = 1 }
model m4 { provider = fake  name = "m4"  price { input = 0  output = 0.005 }  tier = 4  max_output = 1 }
model m5 { provider = fake  name = "m5"  price { input = 0  output = 0.006 }  tier = 5  max_output = 1 }
model m6 { provider = fake  name = "m6"  price { input = 0  output = 0.007 }  tier = 6  max_output = 1 }
role Worker { prompt = "{{task}} {{previous?}}" }
topology crew {
  slot worker : Worker [1..3]
  flow { answer chain worker(task) }
}
system s { models = [m1, m2, m3, m4, m5, m6]  topologies = [crew]  budget = 1000000 }
"""


def test_a_solver_failure_is_bam504_at_the_template(write_bam, tmp_path, capsys):
    path = write_bam(WEIGHTS_TOO_LARGE)
    result = compile_file(path, method="weights", plan_dir=str(tmp_path))
    (diagnostic,) = [d for d in result.diagnostics if d.code == "BAM504"]
    assert diagnostic.span.line == 8 and "2**53" in diagnostic.message and "lexicographic" in diagnostic.hint
    assert main(["compile", path, "--method", "weights"]) == 1
    assert "error[BAM504]" in capsys.readouterr().err
    assert main(["compile", path]) == 0


def test_highs_refusing_the_problem_is_bam504_not_a_traceback(write_bam, tmp_path, monkeypatch):
    def refuse(ilp, objectives, **_):
        raise SolverError("HiGHS addRows failed")

    monkeypatch.setattr("bamasc.optimize.exact.optimise_columns", refuse)
    result = compile_file(write_bam(source()), plan_dir=str(tmp_path))
    assert result.plan is None
    assert [(d.code, d.span.line) for d in result.diagnostics] == [("BAM504", 16)]


def exit_code(argv: list[str]) -> int:
    """What `bamasc` exits with: argparse refuses an option by raising SystemExit."""
    try:
        return main(argv)
    except SystemExit as stopped:
        return stopped.code


@pytest.mark.parametrize("budget", ["nan", "inf", "1e13", "$2000000", "-0"])
@pytest.mark.parametrize("command", ["compile", "exec", "explain"])
def test_a_budget_option_past_the_limit_is_a_usage_error(write_bam, capsys, budget, command):
    extra = ["--task", "hi"] if command == "exec" else []
    assert exit_code([command, write_bam(source()), "--budget", budget, *extra]) == 2
    assert "a budget must be" in capsys.readouterr().err


@pytest.mark.parametrize("sweep", ["1:inf:1", "1:1e12:1e-300", "nan:nan:1", "1:2e12:1e10", "1:10:0"])
def test_a_sweep_past_the_limits_is_a_usage_error(write_bam, capsys, sweep):
    assert exit_code(["compile", write_bam(source()), "--sweep", sweep]) == 2
    assert "argument --sweep" in capsys.readouterr().err


def test_the_library_refuses_a_budget_past_the_limit(write_bam):
    for budget in (math.nan, math.inf, 2e12):
        with pytest.raises(CompileError, match="limit of 1e12"):
            compile_file(write_bam(source()), budget=budget)


def test_a_problem_with_a_nan_budget_is_still_refused_by_the_ilp():
    problem = SeatProblem(
        slot_names=("a",), lo=(1,), hi=(1,), model_names=("x",), tiers=(1,), cost=(((1.0,),),), budget=1.0
    )
    with pytest.raises(ValueError, match="NaN"):
        replace(problem, budget=math.nan)
