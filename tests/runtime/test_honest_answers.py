"""A task answers with what an answering call wrote, never with a router's label or a planner's cards, and an empty
final answer is no answer: random route templates run on the offline fake under budgets that run out part way."""

from __future__ import annotations

import asyncio
import random

import pytest

from bamasc.metering.guard import BudgetGuard
from bamasc.plan.compile import compile_file
from bamasc.runtime.interpreter import TaskRun
from bamasc.runtime.providers.fake import FakeProvider
from bamasc.runtime.retry import RetryPolicy
from tests.helpers.routes import FLOWS, random_route_source

NO_WAIT = RetryPolicy(max_attempts=2, base_delay=0.0, max_delay=0.0, timeout=5.0)


@pytest.mark.parametrize("seed", range(12))
def test_a_routers_label_is_never_the_answer(tmp_path, seed):
    rng = random.Random(4200 + seed)
    _, source = random_route_source(rng, FLOWS)
    path = tmp_path / "t.bam"
    path.write_text(source)
    result = compile_file(str(path))
    if result.plan is None or not result.plan.systems[0].template("t").feasible:
        pytest.skip("no binding within this budget")
    system = result.plan.systems[0]
    template = system.template("t")
    checked = 0
    for share in (0.05, 0.15, 0.3, 0.5, 1.0):  # budgets that run out after the router, and one that does not
        providers = {name: FakeProvider(name, mode="random", seed=seed) for name in result.program.models}
        run = TaskRun(result.program, system, template, providers, BudgetGuard(template.worst_case_cost * share),
                      f"t{seed}", "x" * 20, None, NO_WAIT)
        outcome = asyncio.run(run.run())
        deciders = set(run.expects)
        if outcome.output is not None:
            checked += 1
            writers = [node for node, output in run.outputs.items() if output.text == outcome.output]
            assert any(node not in deciders for node in writers), (share, outcome.status, writers)
            assert outcome.output.strip(), outcome
    assert checked
