"""The verbose fake drives every template to its worst case, and never past the proven bound.

A task exactly `task_tokens` long (one token a byte for the fake) and every
output at its cap: each call's prompt is then as long as the bound says. The
numbering of lists (`[1] ...`, a blank line between) and a plan's step card
beside the plan itself were once left out, and such runs paid a little more
than the bound.
"""

from __future__ import annotations

import asyncio
import random

import pytest

from bamasc.plan.compile import compile_file
from bamasc.metering.guard import BudgetGuard
from bamasc.runtime.interpreter import TaskRun
from bamasc.runtime.providers.fake import FakeProvider
from bamasc.runtime.retry import RetryPolicy
from tests.helpers.milp import FLOWS, random_source

NO_WAIT = RetryPolicy(max_attempts=1, base_delay=0.0, max_delay=0.0, timeout=5.0)


@pytest.mark.parametrize("seed", range(36))
def test_the_worst_case_run_costs_at_most_the_bound(tmp_path, seed):
    rng = random.Random(5000 + seed)
    _, source = random_source(rng)
    path = tmp_path / "t.bam"
    path.write_text(source.replace("budget = 300", "budget = 6000").replace("budget = 800", "budget = 6000"))
    compiled = compile_file(str(path))
    if compiled.plan is None:
        pytest.skip("no binding fits this budget")
    program, system_plan = compiled.program, compiled.plan.systems[0]
    task = "t" * program.systems[system_plan.name].task_tokens
    for template in (t for t in system_plan.templates if t.feasible):
        providers = {name: FakeProvider(name, mode="verbose") for name in program.systems[system_plan.name].models}
        guard = BudgetGuard(system_plan.budget)
        run = TaskRun(program, system_plan, template, providers, guard, "t", task, None, NO_WAIT)
        result = asyncio.run(run.run())
        assert result.status == "ok", result.error
        assert guard.charged <= template.worst_case_cost + 1e-6, source


def test_every_shape_is_drawn():
    names = {random_source(random.Random(5000 + seed))[0] for seed in range(36)}
    assert names == {name for name, _, _ in FLOWS}
