"""Output caps the binder chooses (`max_output = lo..hi`): the acceptance cases, brute force, budget sweeps.

The three-call chain below costs 18 µ$ of prompt text and task plus 2.1 µ$ per
token of cap (each call bills its cap at 0.6 µ$, and the next two read it at
0.15): 555.6 µ$ at caps of 256, 286.8 at 128, and at 400 µ$ the largest
caps that fit are 181 (398.1 µ$).
"""

from __future__ import annotations

import asyncio
import random

import pytest

from bamasc.ir.tokens import caps_at, output_cap
from bamasc.optimize import bind
from bamasc.optimize.caps import cap_steps
from bamasc.plan.compile import compile_file
from bamasc.plan.load import PlanVerificationError, verify_plan
from bamasc.records import replace
from bamasc.metering.guard import BudgetGuard
from bamasc.runtime.interpreter import TaskRun
from bamasc.runtime.providers.fake import FakeProvider
from bamasc.runtime.retry import RetryPolicy
from tests.helpers.milp import brute_force, load, random_source, strategy

NO_WAIT = RetryPolicy(max_attempts=1, base_delay=0.0, max_delay=0.0, timeout=5.0)

CHAIN = """
model mini {
  provider = fake
  name     = "mini"
  price    { input = 0.15  output = 0.6 }
  tier     = 1
}
role Step {
  max_output = %(cap)s
  prompt     = "Continue: {{task}} {{previous?}}"
}
topology three {
  slot step : Step [3..3]
  flow { answer chain step(task) }
}
system demo {
  models      = [mini]
  topologies  = [three]
  budget      = %(budget)s
  task_tokens = 21
}
"""


def compiled(tmp_path, cap: str, budget: float = 400, method: str = "lexicographic"):
    path = tmp_path / "chain.bam"
    path.write_text(CHAIN % {"cap": cap, "budget": budget})
    return compile_file(str(path), method=method)


def codes_and_messages(result) -> list[tuple[str, str]]:
    return [(d.code, d.message) for d in result.diagnostics]


def test_the_chain_that_does_not_fit_at_fixed_caps_fits_with_caps_chosen(tmp_path):
    fixed = compiled(tmp_path, "256")
    assert fixed.plan is None
    assert any(code == "BAM404" and "555.6 µ$" in message for code, message in codes_and_messages(fixed))
    chosen = compiled(tmp_path, "128..384")
    template = chosen.plan.systems[0].templates[0]
    assert template.feasible and template.worst_case_cost == pytest.approx(18 + 2.1 * 181)
    assert [seat.cap for seat in template.binding] == [181, 181, 181]
    assert [node.output_tokens for node in template.nodes] == [181, 181, 181]


def test_a_budget_between_the_two_bounds_runs_and_is_charged_its_bound(tmp_path):
    result = compiled(tmp_path, "128..384")
    program, system_plan = result.program, result.plan.systems[0]
    template = system_plan.templates[0]
    providers = {"mini": FakeProvider("mini", mode="verbose")}
    guard = BudgetGuard(system_plan.budget)
    task = "t" * program.systems["demo"].task_tokens  # one token a byte: every prompt as long as its bound
    run = TaskRun(program, system_plan, template, providers, guard, "t", task, None, NO_WAIT)
    outcome = asyncio.run(run.run())
    assert outcome.status == "ok", outcome.error
    assert all(128 <= seat.cap <= 384 for seat in template.binding)
    assert guard.charged == pytest.approx(template.worst_case_cost)
    assert template.worst_case_cost <= system_plan.budget


def test_below_the_smallest_caps_the_least_budget_is_at_the_low_end(tmp_path):
    result = compiled(tmp_path, "128..384", budget=280)
    assert result.plan is None
    assert any(code == "BAM404" and "286.8 µ$" in message for code, message in codes_and_messages(result))


def test_the_ablation_binders_choose_caps_the_same_way(tmp_path):
    greedy = compiled(tmp_path, "128..384", method="greedy").plan.systems[0].templates[0]
    assert [seat.cap for seat in greedy.binding] == [181, 181, 181]
    # The reference's per-seat estimate leaves out what a call reads of the one before: by it, larger caps fit.
    paper = compiled(tmp_path, "128..384", method="paper").plan.systems[0].templates[0]
    caps = [seat.cap for seat in paper.binding]
    assert len(set(caps)) == 1 and 181 < caps[0] <= 384


@pytest.mark.parametrize(
    "cap, code, words",
    [
        ("384..128", "BAM207", "the low end is above the high end"),
        ("0..384", "BAM207", "positive whole number of tokens, not 0"),
        ("128..0", "BAM207", "positive whole number of tokens, not 0"),
        ("12.5..384", "BAM207", "positive whole number of tokens, not 12.5"),
        ("128..20000000", "BAM210", "above the limit of 10000000 tokens"),
        ("128..384 µ$", "BAM208", "takes no unit"),
    ],
)
def test_a_bad_range_is_a_diagnostic_at_its_place(tmp_path, cap, code, words):
    result = compiled(tmp_path, cap)
    assert result.plan is None
    found = [d for d in result.diagnostics if d.code == code]
    assert found and words in found[0].message, codes_and_messages(result)
    assert found[0].span.line == 9 and found[0].span.col >= 16


def test_a_range_is_only_for_a_role(tmp_path):
    path = tmp_path / "chain.bam"
    path.write_text((CHAIN % {"cap": "128..384", "budget": 400}).replace("tier     = 1", "tier = 1\n  max_output = 1..2"))
    result = compile_file(str(path))
    assert [(d.code, "not a range" in d.message) for d in result.diagnostics] == [("BAM108", True)]


def test_a_larger_budget_may_buy_a_stronger_tier_with_smaller_caps(tmp_path):
    """Tiers come before caps, so caps are not monotone in the budget (docs/language.md): model `b`
    (tier 1) costs 2 µ$ a token, model `a` (tier 2) 1 µ$; at 199 µ$ `b` does not fit even at its
    smallest cap, so `a` runs at 199 tokens; at 200 µ$ `b` runs at 100."""
    source = """
model a { provider = fake  name = "a"  price { input = 0  output = 1 }  tier = 2 }
model b { provider = fake  name = "b"  price { input = 0  output = 2 }  tier = 1 }
role R { max_output = 100..200  prompt = "{{task}}" }
topology t { slot r : R [1..1]  flow { answer r(task) } }
system s { models = [a, b]  topologies = [t]  budget = 1000 }
"""
    program = load(tmp_path, source)
    system = program.systems["s"]
    seats = {budget: bind.bind_template(program, system, "t", budget).seats for budget in (199.0, 200.0)}
    assert [(s.model, s.cap) for s in seats[199.0]] == [("a", 199)]
    assert [(s.model, s.cap) for s in seats[200.0]] == [("b", 100)]


def test_a_deadline_holds_the_caps_as_the_budget_does(tmp_path):
    """0.5 s to the first token and 0.01 s a token after it: 3 s allow a cap of 250, whatever the budget."""
    source = """
model a { provider = fake  name = "a"  price { input = 0  output = 1 }  tier = 1
          latency { first_token = 0.5  per_token = 0.01 } }
role R { max_output = 100..400  prompt = "{{task}}" }
topology t { slot r : R [1..1]  flow { answer r(task) } }
system s { models = [a]  topologies = [t]  budget = 1000  deadline = 3 s }
"""
    program = load(tmp_path, source)
    found = bind.bind_template(program, program.systems["s"], "t")
    assert [(s.model, s.cap) for s in found.seats] == [("a", 250)]
    assert found.worst_case_cost == pytest.approx(250)


def ranged(source: str, rng: random.Random) -> str:
    """The random template's Executor and Critic with ranges for caps (narrow: brute force tries each level)."""
    executor = rng.choice(["12..40", "20..28", "40..44"])
    for fixed in ("64", "128"):
        source = source.replace(f"max_output = {fixed}\n  reads = answer", f"max_output = {executor}\n  reads = answer")
    return source.replace("max_output = 64\n  reads = verdict", "max_output = 60..64\n  reads = verdict")


def oracle(program, budget: float):
    """Brute force at every level of the caps: the best tier counts (at level 0), the largest level that
    keeps them, and brute force's objective there."""
    steps = cap_steps(program, program.topologies["t"])
    best = brute_force(caps_at(program, 0, steps), budget)
    if best is None:
        return None
    level = max(j for j in range(steps + 1) if (found := brute_force(caps_at(program, j, steps), budget)) is not None
                and found[: len(best) - 2] == best[: len(best) - 2])
    return level, steps, brute_force(caps_at(program, level, steps), budget)


def tight_budget(program, rng: random.Random) -> float:
    """A budget a little above what the best binding at the smallest caps costs: one where caps are chosen."""
    steps = cap_steps(program, program.topologies["t"])
    best = brute_force(caps_at(program, 0, steps), program.systems["s"].budget)
    return program.systems["s"].budget if best is None else -best[-1] * rng.uniform(1.0, 1.25)


@pytest.mark.parametrize("seed", range(32))
def test_tiers_and_caps_agree_with_brute_force(tmp_path, seed):
    rng = random.Random(7000 + seed)
    _, source = random_source(rng)
    source = ranged(source, rng)
    program = load(tmp_path, source)
    system = program.systems["s"]
    budget = tight_budget(program, rng)
    truth = oracle(program, budget)
    # Every rotating slot enumerated (the default here), one MILP with count indicators, that MILP narrowed to
    # the tier counts before its last objectives, and the dynamic program over the slots where it applies:
    # each of the binder's ways, around the caps' levels.
    ways = (strategy(enumerate_up_to=0), strategy(enumerate_up_to=0, split_from_columns=0), strategy(sweep_from_columns=0))
    for chosen in (None, *ways):
        found = bind.bind_template(program, system, "t", budget, strategy=chosen)
        assert found.feasible == (truth is not None), source
        if truth is not None:
            assert_matches(program, found, *truth, source)


def assert_matches(program, found, level: int, steps: int, objective: tuple, source: str) -> None:
    """`found` has brute force's objective at `level`, and each seat its role's cap there on its model."""
    assert (*found.tier_seats, round(found.quality, 6)) == objective[:-1], source
    assert found.worst_case_cost == pytest.approx(-objective[-1], rel=1e-7, abs=1e-6), source
    at_level = caps_at(program, level, steps)
    role_of = {slot.name: slot.role for slot in program.topologies["t"].slots}
    for seat in found.seats:
        role = program.roles[role_of[seat.slot]]
        expected = output_cap(at_level.roles[role.name], program.models[seat.model]) if role.min_output else None
        assert seat.cap == expected, (source, seat, level)


@pytest.mark.parametrize("seed", range(16))
def test_a_larger_budget_never_gets_weaker_tiers_nor_smaller_caps_on_the_same_models(tmp_path, seed):
    rng = random.Random(8000 + seed)
    _, source = random_source(rng)
    program = load(tmp_path, ranged(source, rng))
    system = program.systems["s"]
    # Budgets about the smallest caps' cost of the declared budget's binding, where caps move.
    smallest = bind.bind_template(caps_at(program, 0, 1), system, "t")
    around = smallest.worst_case_cost if smallest.feasible else 2000.0
    previous = None
    for budget in sorted([*(around * rng.uniform(0.8, 1.4) for _ in range(7)), rng.uniform(100, 8000)]):
        found = bind.bind_template(program, system, "t", float(budget))
        if not found.feasible:
            assert previous is None, (source, budget)
            continue
        if previous is not None:
            assert found.tier_seats >= previous.tier_seats, (source, budget)
            same_models = [(s.slot, s.instance, s.model) for s in found.seats] == [
                (s.slot, s.instance, s.model) for s in previous.seats
            ]
            if found.tier_seats == previous.tier_seats and same_models:
                assert all(now.cap is None or now.cap >= before.cap for now, before in zip(found.seats, previous.seats))
        previous = found


def with_caps(plan, cap):
    """`plan` with every seat of its one template given `cap`."""
    system = plan.systems[0]
    template = system.templates[0]
    seats = tuple(replace(seat, cap=cap) for seat in template.binding)
    return replace(plan, systems=(replace(system, templates=(replace(template, binding=seats),)),))


def test_loading_checks_the_bound_again_at_the_recorded_caps(tmp_path):
    result = compiled(tmp_path, "128..384")
    verify_plan(result.plan, result.program)
    with pytest.raises(PlanVerificationError, match="the graph gives 40\\+384 tokens"):
        verify_plan(with_caps(result.plan, 384), result.program)
    with pytest.raises(PlanVerificationError, match="output cap 999 is not one its role may have"):
        verify_plan(with_caps(result.plan, 999), result.program)
    fixed = compiled(tmp_path, "181", budget=400)
    with pytest.raises(PlanVerificationError, match="output cap 181 is not one its role may have"):
        verify_plan(with_caps(fixed.plan, 181), fixed.program)


def test_explain_and_the_editor_show_the_chosen_caps(tmp_path):
    from bamasc.lsp.bounds import bind_program
    from bamasc.plan.explain import tight_rows
    from bamasc.plan.render import binding_text

    result = compiled(tmp_path, "128..384")
    system = result.plan.systems[0]
    assert "slot step: output cap 181, in 128..384" in tight_rows(result.program, system, system.templates[0])
    assert binding_text(system.templates[0]) == "step: 3x mini (cap 181)"
    assert bind_program(result.program)["demo"].templates[0].seats == ("step: 3x mini (cap 181)",)
