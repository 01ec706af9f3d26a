"""Dynamic plans on the offline fake: compiling a source, running a task, and the slack the bound's cards leave."""

from __future__ import annotations

import asyncio
import json

from bamasc.combinators.dynamic import seat_step
from bamasc.plan.compile import compile_file
from bamasc.metering.guard import BudgetGuard
from bamasc.runtime.interpreter import TaskRun
from bamasc.runtime.providers.base import expectations
from bamasc.runtime.providers.fake import FakeProvider, worst_case_reply
from bamasc.runtime.retry import RetryPolicy

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


def every_card_fits(result) -> bool:
    template = result.plan.systems[0].template("t")
    (expect,) = expectations(template.decisions).values()
    cap = planner_cap(result)
    return len(json.loads(worst_case_reply([], cap, expect))) == len(template.decisions)


def planner_cap(result) -> int:
    program, template = result.program, result.plan.systems[0].template("t")
    planner = program.models[next(s.model for s in template.binding if s.slot == "planner")]
    return min(c for c in (program.roles["Planner"].max_output, planner.max_output) if c is not None)
