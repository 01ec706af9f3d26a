"""The dynamic program over slots (optimize/pareto.py) against the MILP and brute force.

Random pipelines of `parallel` and `chain` statements, each reading the value
before it, with random pools (three tiers, prices, output caps, per-role
qualities, prompt-length price tiers) are bound at random budgets by the dynamic program
(offered every template, `sweep_from_columns = 0`), by the MILP alone and by
trying every binding. The dynamic program and the MILP must find the same
objective (tiers and quality alone with price tiers, which both bill at the
most a seat could read); brute force may find more (see `not_better`), never
less; and the dynamic program must have been the one that answered. Templates it must not take
(`require`, `min_agents`, a rotating statement) fall through to the MILP.
"""

from __future__ import annotations

import math
import random
import re

import pytest

from bamasc.optimize import bind, exact, pareto
from tests.helpers.milp import brute_force, load, objective, same, strategy, within_search_space
from tests.helpers.pareto import bind_by, budgets, not_better, pipeline


# A pipeline's bindings cost about 0.15 ms each to price, and each is brute-forced at several budgets.
PIPELINE_SEARCH_SPACE = 20_000


@pytest.mark.parametrize("seed", range(40))
def test_the_dynamic_program_binds_like_the_milp_and_brute_force(tmp_path, seed):
    rng = random.Random(seed)
    source, program = within_search_space(tmp_path, lambda: pipeline(rng), PIPELINE_SEARCH_SPACE)
    for budget in budgets(program, rng):
        swept: list = []
        dynamic = bind_by(program, budget, 0, swept)
        milp = bind_by(program, budget, math.inf, swept)
        truth = brute_force(program, budget)
        if "long_prompt" in source:
            # Both bill a cliff tier at the most a seat could read, above the exact bound at times, so
            # bindings of equal price may differ in their exact bounds: compare tiers and quality.
            assert (dynamic and dynamic[:-1]) == (milp and milp[:-1]), (source, budget, dynamic, milp)
        else:
            assert same(dynamic, milp), (source, budget, dynamic, milp)
        # Both price a value's numbering and a chain's reads at the largest counts, so brute force
        # may find more; never less.
        assert dynamic is None or not_better(dynamic, truth), (source, budget, dynamic, truth)
        assert swept[0] or milp is None, "the dynamic program should have bound this pipeline"
        assert not swept[1]


@pytest.mark.parametrize("seed", range(12))
def test_a_larger_budget_never_loses_a_binding_in_the_dynamic_program(tmp_path, seed):
    rng = random.Random(500 + seed)
    program = load(tmp_path, pipeline(rng))
    swept_first = strategy(sweep_from_columns=0)
    previous = None
    for budget in budgets(program, rng) + [math.inf]:
        found = objective(bind.bind_template(program, program.systems["s"], "t", budget, strategy=swept_first))
        if previous is not None:
            assert found is not None and found[:-1] >= previous[:-1], (budget, found, previous)
        previous = found or previous


def test_a_require_row_goes_to_the_milp(tmp_path, monkeypatch):
    rng = random.Random(7)
    program = load(tmp_path, pipeline(rng, "  require count(s0, tier = 1) <= 1"))
    calls = []
    real = pareto.sweep
    monkeypatch.setattr(exact, "sweep", lambda *a: calls.append(real(*a)) or calls[-1])
    for budget in budgets(program, rng):
        swept: list = []
        dynamic = bind_by(program, budget, 0, swept)
        assert dynamic is None or not_better(dynamic, brute_force(program, budget))
        assert not any(swept)
    assert calls and all(call is None for call in calls)


def test_min_agents_is_met_by_the_dynamic_program_or_left_to_the_milp(tmp_path):
    """The dynamic program binds without `min_agents`; its answer stands only where it seats that
    many (it is then the best binding with the row too), and the MILP decides elsewhere."""
    answered = []
    for seed in range(24):
        rng = random.Random(900 + seed)
        source = pipeline(rng)
        lowest = sum(int(n) for n in re.findall(r"\[(\d+)\.\.", source))
        most = sum(int(n) for n in re.findall(r"\.\.(\d+)\]", source))
        source = source.replace("min_agents = 0", f"min_agents = {rng.randint(lowest + 1, most)}")
        program = load(tmp_path, source)
        least = program.systems["s"].min_agents
        for budget in budgets(program, rng):
            swept: list = []
            dynamic = bind_by(program, budget, 0, swept)
            milp = bind_by(program, budget, math.inf, swept)
            if "long_prompt" in source:
                assert (dynamic and dynamic[:-1]) == (milp and milp[:-1]), (source, budget, dynamic, milp)
            else:
                assert same(dynamic, milp), (source, budget, dynamic, milp)
            assert dynamic is None or sum(dynamic[:-2]) >= least
            answered.append(swept[0])
    # Both ways happen: most best bindings seat enough, some do not (e.g. one strong seat for two weak).
    assert any(answered) and not all(answered), answered


def like_the_milp(program, budget: float, monkeypatch, *patches, **thresholds) -> tuple[bool, tuple | None]:
    """Bound by the MILP alone, then by the dynamic program with `patches` (target, name, value)
    applied and the strategy's `thresholds` changed: the two must find the same tiers and quality.
    (swept: did the dynamic program answer, the MILP's objective)."""
    swept: list = []
    milp = bind_by(program, budget, math.inf, swept)
    for target, name, value in patches:
        monkeypatch.setattr(target, name, value)
    dynamic = bind_by(program, budget, 0, swept, **thresholds)
    monkeypatch.undo()
    assert (dynamic and dynamic[:-1]) == (milp and milp[:-1]), (budget, dynamic, milp)
    return swept[1], milp


def test_reads_priced_through_r_and_q_are_swept_on_a_milp_of_products(tmp_path, monkeypatch):
    """A seat reading many models is priced through R and Q in the MILP HiGHS solves; the dynamic
    program prices the same template by one built with every read a product, and binds alike."""
    from bamasc.optimize import coupled

    for seed in range(12):
        rng = random.Random(300 + seed)
        program = load(tmp_path, pipeline(rng))
        for budget in budgets(program, rng):
            # Every read R/Q in the MILP first built.
            swept, milp = like_the_milp(program, budget, monkeypatch, (coupled, "COUPLE_UP_TO", 0))
            assert swept or milp is None, "the dynamic program should have bound this pipeline"


def test_without_the_tiers_found_empty_the_dynamic_program_binds_what_it_could_not_whole(tmp_path, monkeypatch):
    """Solved tier by tier, a MILP whose slots allow too many arrangements is offered again to the
    dynamic program once the tiers found with no seats are taken out; the binding is the MILP's."""
    narrowed = []
    real = exact.TemplateSolver._sweep_narrowed

    def recorded(self, *args):
        narrowed.append(real(self, *args))
        return narrowed[-1]

    # As if the whole MILP's slots held more than MOST_CONFIGURATIONS.
    refused = lambda self, problem, statements, model: None  # noqa: E731
    for seed in range(16):
        rng = random.Random(700 + seed)
        program = load(tmp_path, pipeline(rng))
        for budget in budgets(program, rng):
            patches = (
                (exact.TemplateSolver, "_sweep", refused),
                (exact.TemplateSolver, "_sweep_narrowed", recorded),
            )
            like_the_milp(program, budget, monkeypatch, *patches, split_from_columns=0)
    assert any(found is not None for found in narrowed)


def test_a_rotating_statement_goes_to_the_milp(tmp_path, monkeypatch):
    source = pipeline(random.Random(3))
    source = source.replace("role R0 {", 'role Critic {\n  max_output = 16\n  reads = verdict\n  prompt = "Check {{solution}}"\n}\nrole R0 {')
    source = source.replace("  flow {", "  slot critic : Critic [1..2]\n  flow {")
    source = source.replace("answer parallel s1(task, v0)", "answer refine s1(task, v0) with critic until approved")
    source = source.replace("answer chain s1(task, v0)", "answer refine s1(task, v0) with critic until approved")
    assert "refine" in source
    program = load(tmp_path, source)
    calls = []
    real = pareto.sweep
    monkeypatch.setattr(exact, "sweep", lambda *a: calls.append(real(*a)) or calls[-1])
    # One MILP for the whole template, offered first to the dynamic program.
    chosen = strategy(sweep_from_columns=0, enumerate_up_to=0)
    found = bind.bind_template(program, program.systems["s"], "t", math.inf, strategy=chosen)
    assert found.feasible and calls and all(call is None for call in calls)


def test_a_label_that_costs_more_is_kept_only_for_a_higher_score():
    import numpy as np

    group = np.array([0, 0, 0, 0, 1])
    key = np.array([2, 2, 1, 3, 0])
    quality = np.array([1.0, 2.0, 5.0, 0.0, 0.0])
    cost = np.array([5.0, 5.0, 1.0, 9.0, 9.0])
    # Label 0 is beaten by 1 (same key and cost, more quality); 2, 1 and 3 form the staircase; 4 is alone.
    assert sorted(pareto._unbeaten(group, key, quality, cost).tolist()) == [1, 2, 3, 4]


def checked_by_the_first_slot(source: str) -> str:
    """The last statement made a `refine` whose critic is the first slot, and every model given a
    price tier from 60 prompt tokens: the first slot's prompts hold about 51 in the first statement
    and more in the last, where they read the drafts."""
    source = re.sub(r"answer (parallel|chain) s(\d+)\(task, v(\d+)\)", r"answer refine s\2(task, v\3) with s0 until approved", source)
    tier = "  long_prompt { above = 60  input = 4.0  output = 8.0 }"
    return re.sub(r"output = ([\d.]+)(  long_prompt \{[^}]*\})? \}", rf"output = \1{tier} }}", source)


@pytest.mark.parametrize("seed", range(16))
def test_a_slot_in_two_statements_is_billed_at_its_longest_prompt(tmp_path, seed):
    """The MILP once priced the first statement's calls of such a slot at its short prompt's rate,
    under the exact bound, and compile refused the template (BAM504) at every budget it fits."""
    rng = random.Random(seed)
    source, program = within_search_space(tmp_path, lambda: checked_by_the_first_slot(pipeline(rng)),
                                          PIPELINE_SEARCH_SPACE)
    assert "with s0 until approved" in source and source.count("above = 60") == source.count("model m")
    for budget in budgets(program, rng) + [math.inf]:
        found = objective(bind.bind_template(program, program.systems["s"], "t", budget))
        assert found is not None or budget < math.inf
        # Billed at the most a seat could read, it may find less than brute force; never more.
        assert found is None or not_better(found, brute_force(program, budget)), (source, budget, found)
