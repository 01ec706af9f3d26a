"""The binder strategy picks the path a bind takes, the binding records that path, and the binding stays the best."""

from __future__ import annotations

import pytest

from bamasc.optimize.bind import bind_template
from bamasc.optimize.greedy import bind_greedy
from bamasc.optimize.paper import bind_paper
from bamasc.optimize.strategy import DEFAULT_STRATEGY, SEARCHES, WAYS, BindPath
from bamasc.plan.compile import check_file
from bamasc.records import replace
from tests.conftest import ROOT

GSM8K = f"{ROOT}/examples/gsm8k.bam"


@pytest.fixture(scope="module")
def gsm8k():
    program, _, _ = check_file(GSM8K, budgets=False)
    return program, program.systems["gsm8k"]


def test_the_default_strategy_keeps_the_thresholds_the_binder_was_tuned_with():
    assert (DEFAULT_STRATEGY.enumerate_up_to, DEFAULT_STRATEGY.presolve_up_to_columns,
            DEFAULT_STRATEGY.split_from_columns, DEFAULT_STRATEGY.narrow_presolve_up_to_columns,
            DEFAULT_STRATEGY.sweep_from_columns, DEFAULT_STRATEGY.combine_up_to_columns,
            DEFAULT_STRATEGY.max_cuts) == (4096, 1000, 1000, 1500, 1000, 1000, 50)


@pytest.mark.parametrize("template, search, vectors, solved", [
    ("linear", "padded", 0, 0),
    ("feedback", "enumerate", 6, 2),  # docs/language.md: 2 of feedback's 6 vectors are solved
    ("planner", "enumerate", 18, 1),  # and 1 of the planner's 18
])
def test_the_default_path_of_each_example_template(gsm8k, template, search, vectors, solved):
    program, system = gsm8k
    path = bind_template(program, system, template).path
    assert (path.search, path.vectors, path.solved, path.ways, path.cuts) == (search, vectors, solved,
                                                                            (("combined", solved or 1),), 0)
    assert path.steps == (search, "combined", "exact-recheck")


@pytest.mark.parametrize("changes, search, way", [
    ({"enumerate_up_to": 0}, "indicators", "combined"),
    ({"enumerate_up_to": 0, "split_from_columns": 0, "combine_up_to_columns": 0}, "indicators", "in-steps"),
    ({"enumerate_up_to": 0, "combine_up_to_columns": 0}, "indicators", "in-turn"),
])
def test_another_strategy_takes_another_path_to_the_same_binding(gsm8k, changes, search, way):
    program, system = gsm8k
    default = bind_template(program, system, "feedback")
    other = bind_template(program, system, "feedback", strategy=replace(DEFAULT_STRATEGY, **changes))
    assert (other.path.search, [w for w, _ in other.path.ways]) == (search, [way])
    assert other.objective == pytest.approx(default.objective)
    assert other.seats == default.seats


def test_a_pipeline_goes_to_the_dynamic_program_when_the_strategy_offers_it(gsm8k):
    program, system = gsm8k
    swept = bind_template(program, system, "linear", strategy=replace(DEFAULT_STRATEGY, sweep_from_columns=0))
    assert swept.path.ways == (("sweep", 1),) and swept.solves == 0
    assert swept.objective == pytest.approx(bind_template(program, system, "linear").objective)


def test_an_infeasible_bind_records_the_search_that_found_nothing(gsm8k):
    program, system = gsm8k
    binding = bind_template(program, system, "feedback", 500.0)
    assert not binding.feasible
    assert binding.path.search == "enumerate" and binding.path.vectors == 6
    assert binding.path.solved == sum(count for _, count in binding.path.ways)


def test_the_other_binders_name_themselves(gsm8k):
    program, system = gsm8k
    assert bind_greedy(program, system, "star").path == BindPath("greedy")
    assert bind_paper(program, system, "star").path == BindPath("paper")
    assert BindPath("greedy").steps == ("greedy",)  # no MILP answered, so nothing re-checked


def test_every_name_a_path_can_hold_is_worded():
    path = BindPath("every-vector", 4, 3, tuple((way, 1) for way in WAYS), 2)
    lines = path.lines()
    assert lines[0] == " > ".join(("every-vector", *WAYS, "exact-recheck"))
    assert lines[1].startswith("every-vector (3 of 4 count vectors solved, 1 skipped unsolved): ")
    assert "2 cut" in lines[-1]
    assert all(BindPath(search).lines()[-1].endswith(SEARCHES[search]) for search in SEARCHES)
