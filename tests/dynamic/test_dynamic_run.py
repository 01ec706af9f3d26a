"""Dynamic plans at run time on the offline fake: never over the proven bound, and the bound is reached.

Random dynamic plans (tests/dynamic/sources.py) are compiled and run in random mode
(the planner writes any number of cards, each giving its step to any seat and reading
any earlier steps) under many seeds: charged ≤ proven bound ≤ budget on every task.
In verbose mode (a dry run) the fake planner gives each step to its costliest seat and
has it read every step before it, and every reply fills its cap: the run is charged the
bound less exactly one known slack, the JSON around the step cards. The bound counts
the plan's whole output once more for the cards, at the dearest price of the steps
that show one (ir/bounds.py `cost_amounts`), and the fake grows the first card to fill
the plan; every other token the bound counts is spent.
"""

from __future__ import annotations

import asyncio
import json
import random

import pytest

from bamasc.combinators.dynamic import seat_step
from bamasc.plan.compile import compile_file
from bamasc.runtime.guard import BudgetGuard
from bamasc.runtime.interpreter import TaskRun
from bamasc.runtime.providers.base import expectations
from bamasc.runtime.providers.fake import FakeProvider, worst_case_reply
from bamasc.runtime.retry import RetryPolicy
from tests.dynamic.sources import random_dynamic_source

NO_WAIT = RetryPolicy(max_attempts=2, base_delay=0.0, max_delay=0.0, timeout=5.0)


def compiled(tmp_path, source):
    path = tmp_path / "t.bam"
    path.write_text(source)
    result = compile_file(str(path))
    assert result.plan is not None, [d.message for d in result.diagnostics]
    return result


def run(result, mode: str, seed: int, task: str, reply: str | None = None):
    system = result.plan.systems[0]
    template = system.template("t")
    providers = {name: FakeProvider(name, mode=mode, seed=seed, reply=reply) for name in result.program.models}
    guard = BudgetGuard(system.budget)
    return asyncio.run(TaskRun(result.program, system, template, providers, guard, f"t{seed}", task, None, NO_WAIT).run())


def card_slack(result) -> float:
    """What the bound counts and a worst-case dry run does not spend: the bound reads the plan's
    whole cap once more, at the dearest input price of the steps that show a card; the fake's
    cards (the first grown to fill the plan) hold the cap less the JSON around them, each read at
    its own step's price."""
    program, template = result.program, result.plan.systems[0].template("t")
    model_of = {(seat.slot, seat.instance): program.models[seat.model] for seat in template.binding}
    cap = planner_cap(result)
    (expect,) = expectations(template.decisions).values()
    cards = [card["step"] for card in json.loads(worst_case_reply([], cap, expect))]
    rates = []
    for decision in sorted(template.decisions, key=lambda d: seat_step(d.id)[1]):
        _, step = seat_step(decision.id)
        slot = decision.worst_case_branch
        rates.append(model_of[(slot, step % template.counts[slot])].price_input)
    spent = sum(len(card) * rate for card, rate in zip(cards, rates))
    return cap * max(rates[: len(cards)]) - spent


@pytest.mark.parametrize("seed", range(16))
def test_charged_never_exceeds_the_bound_and_the_bound_is_reached(tmp_path, seed):
    rng = random.Random(13000 + seed)
    source = random_dynamic_source(rng, budgets=(4000, 12000, 40000))
    result = compiled(tmp_path, source)
    system = result.plan.systems[0]
    template = system.template("t")
    if not template.feasible:
        pytest.skip("no binding within this budget")  # the MILP tests cover infeasible templates
    task = "x" * result.program.systems["s"].task_tokens  # the fake counts a byte a token
    assert template.worst_case_cost <= system.budget * (1 + 1e-9)
    for run_seed in range(12):
        outcome = run(result, "random", run_seed, task[: rng.randint(1, len(task))])
        assert outcome.status == "ok", (source, outcome)
        assert outcome.cost <= template.worst_case_cost + 1e-6, (source, outcome)
    worst = run(result, "verbose", 0, task)
    assert worst.status == "ok", worst
    assert worst.cost <= template.worst_case_cost + 1e-6
    if every_card_fits(result):
        assert worst.cost == pytest.approx(template.worst_case_cost - card_slack(result), rel=1e-9, abs=1e-6), source
    else:  # the planner's cap holds fewer cards than max_steps: the later steps never run
        assert worst.cost < template.worst_case_cost - card_slack(result), source


def every_card_fits(result) -> bool:
    template = result.plan.systems[0].template("t")
    (expect,) = expectations(template.decisions).values()
    cap = planner_cap(result)
    return len(json.loads(worst_case_reply([], cap, expect))) == len(template.decisions)


def planner_cap(result) -> int:
    program, template = result.program, result.plan.systems[0].template("t")
    planner = program.models[next(s.model for s in template.binding if s.slot == "planner")]
    return min(c for c in (program.roles["Planner"].max_output, planner.max_output) if c is not None)
