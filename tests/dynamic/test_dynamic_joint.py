"""A dynamic plan's worst case weighs its steps' seats together.

A step on one seat that reads an earlier step pays for what that step's seat
wrote, so the dearest cards are not always each step at its own dearest seat: a
seat with a long prompt and a short answer can cost the most where it runs, while
a cheaper seat that answers at length makes every later step dearer. The bound
takes the costliest combination (ir/alternatives.py, `Both`), and the verbose fake
planner writes it.

The check is independent of the bound's code: every combination of seats is forced
on the fake planner in turn and run with every reply at its cap. The bound must be
the most any of them is charged, plus only the JSON around that run's cards
(tests/helpers/dynamic.py, `card_slack`).
"""

from __future__ import annotations

import itertools
import random
from types import SimpleNamespace

import pytest

from bamasc.ir.bounds import call_bounds, worst_case_cost
from bamasc.combinators.dynamic import seat_step
from bamasc.ir.unroll import unroll
from bamasc.records import replace
from tests.dynamic.sources import random_dynamic_source
from tests.helpers.dynamic import card_slack, compiled, every_card_fits, run

# A checks at length and answers briefly; B answers at length. One model: 1 µ$ a token in, 2 out.
LONG_PROMPT_SHORT_ANSWER = '''
model one {
  provider = fake
  name     = "one"
  price    { input = 1  output = 2 }
  tier     = 1
}

role Planner {
  max_output = 120
  reads      = plan
  prompt     = "Plan {{task}} for {{seats}}"
}

role A {
  max_output = 10
  prompt     = "A checks the work with great care, line by line, against the task, and reports each fault it finds in it: {{task}} {{plan}} {{step}} {{previous?}}"
}

role B {
  max_output = 60
  prompt     = "B {{task}} {{plan}} {{step}} {{previous?}}"
}

topology t {
  slot planner : Planner [1..1]
  slot a       : A       [1..1]
  slot b       : B       [1..1]
  flow {
    answer plan planner(task) using a, b max_steps 3 dynamic
  }
}

system s {
  models      = [one]
  topologies  = [t]
  budget      = 5000
  task_tokens = 100
}
'''

# Random dynamic plans whose costliest seats are not their largest writers (found by comparing
# the joint and the one-step-at-a-time bounds), and others where the two agree.
SEEDS = [2, 26, 96, 109, 0, 1, 3, 4]


def exact_and_decoupled(result) -> tuple[float, float]:
    program, template = result.program, result.plan.systems[0].template("t")
    model_of = {(seat.slot, seat.instance): program.models[seat.model] for seat in template.binding}
    unrolled = unroll(program.topologies["t"], dict(template.counts))
    bounds = call_bounds(unrolled.calls, model_of, program.roles, program.systems["s"].task_tokens)
    return (
        worst_case_cost(unrolled.calls, bounds, unrolled.choices),
        worst_case_cost(unrolled.calls, bounds, unrolled.choices, joint=False),
    )


def forced(result, seats: tuple[str, ...]):
    """The compiled result with the plan's worst case said to be these seats, step by step: the
    verbose fake planner then writes exactly those cards."""
    system = result.plan.systems[0]
    template = system.template("t")
    decisions = tuple(replace(d, worst_case_branch=seats[seat_step(d.id)[1]]) for d in template.decisions)
    template = replace(template, decisions=decisions)
    system = replace(system, templates=tuple(template if t.name == "t" else t for t in system.templates))
    return SimpleNamespace(program=result.program, plan=replace(result.plan, systems=(system,)))


def every_combination(result):
    decisions = sorted(result.plan.systems[0].template("t").decisions, key=lambda d: seat_step(d.id)[1])
    return itertools.product(*([b.name for b in d.branches] for d in decisions))


def charged_at_most(result, task: str) -> tuple[float, tuple[str, ...]]:
    """The most any combination of seats is charged, its slack added, and that combination."""
    best = None
    for seats in every_combination(result):
        trial = forced(result, seats)
        outcome = run(trial, "verbose", 0, task)
        assert outcome.status == "ok", outcome
        total = outcome.cost + card_slack(trial)
        if best is None or total > best[0] + 1e-9:
            best = (total, seats)
    return best


def test_hand_worked_bound_weighs_the_steps_together(tmp_path):
    """Planner 143 + 2·120 = 383. A step's prompt is its text, 8 of framing, the task (100) and the
    plan (120); the three cards share the plan's 120, counted once. A's text is 109 bytes, B's 5:
    A alone costs 109 + 8 + 100 + 120 + 2·10 = 357, B 5 + 8 + 100 + 120 + 2·60 = 353. Reading
    one earlier step adds its output and 4 of numbering (`[1] `), two add 6 more (a blank line,
    `[2] `). A at every step: 383 + 357 + 371 + 387 + 120 = 1,618. B, B, A: 383 + 353 + 417 +
    (357 + 60 + 60 + 10) + 120 = 1,760, the most of the eight. Each step at its dearest seat
    alone, reading the largest output of every earlier step, says 383 + 357 + 421 + 487 + 120 =
    1,768 (A at every step, reading B's 60 each time), which no cards reach."""
    result = compiled(tmp_path, LONG_PROMPT_SHORT_ANSWER)
    template = result.plan.systems[0].template("t")
    assert template.worst_case_cost == pytest.approx(1760.0)
    assert exact_and_decoupled(result) == pytest.approx((1760.0, 1768.0))
    chosen = [d.worst_case_branch for d in sorted(template.decisions, key=lambda d: seat_step(d.id)[1])]
    assert chosen == ["b", "b", "a"]
    task = "x" * 100
    most, seats = charged_at_most(result, task)
    assert seats == ("b", "b", "a")
    assert most == pytest.approx(1760.0)
    assert run(result, "verbose", 0, task).cost + card_slack(result) == pytest.approx(1760.0)


@pytest.mark.parametrize("seed", SEEDS)
def test_the_bound_is_the_dearest_combination_of_seats(tmp_path, seed):
    result = compiled(tmp_path, random_dynamic_source(random.Random(seed), budgets=(40000,)))
    template = result.plan.systems[0].template("t")
    if not template.feasible or not template.decisions or not every_card_fits(result):
        pytest.skip("no dynamic choice here to weigh")
    exact, decoupled = exact_and_decoupled(result)
    assert exact <= decoupled + 1e-9
    if seed in SEEDS[:4]:
        assert exact < decoupled - 1.0  # the case this file is about
    task = "x" * result.program.systems["s"].task_tokens
    most, _ = charged_at_most(result, task)
    assert most == pytest.approx(template.worst_case_cost, rel=1e-9, abs=1e-6)
    own = run(result, "verbose", 0, task)
    assert own.cost + card_slack(result) == pytest.approx(template.worst_case_cost, rel=1e-9, abs=1e-6)
