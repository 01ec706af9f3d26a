"""`route` at run time: only the chosen branch runs, never over the proven bound, and the bound is reached.

Random route templates (tests/test_route_milp.py) are compiled and run on the
offline fake: in random mode (routers name any branch or none, critics approve
at random, planners emit any number of steps) under many seeds, charged ≤
proven bound ≤ budget on every task. In verbose mode, a dry run, the fake
router names the costliest branch and every reply fills its cap: with a task
of exactly `task_tokens` tokens the run is charged the bound itself, so the
bound is tight, not merely safe. Two exceptions, both safe: a later call that
reads the route's value is charged the largest branch answer, which may come
from another branch than the costliest; and a plan's step cards (docs/language.md).
"""

from __future__ import annotations

import asyncio
import random

import pytest

from bamasc.plan.compile import compile_file
from bamasc.runtime.guard import BudgetGuard
from bamasc.runtime.interpreter import TaskRun
from bamasc.runtime.providers.fake import FakeProvider
from bamasc.runtime.retry import RetryPolicy
from tests.test_route_milp import FLOWS, random_route_source

# Plans included: the bound counts a step card beside the plan it was cut from (CallNode.again),
# so a dry run of a plan stays within it.
RUN_FLOWS = FLOWS

NO_WAIT = RetryPolicy(max_attempts=2, base_delay=0.0, max_delay=0.0, timeout=5.0)


def _compiled(tmp_path, source):
    path = tmp_path / "t.bam"
    path.write_text(source)
    result = compile_file(str(path))
    if result.plan is None or not result.plan.systems[0].template("t").feasible:
        return None
    return result


def _run(result, mode: str, seed: int, task: str):
    system = result.plan.systems[0]
    template = system.template("t")
    providers = {name: FakeProvider(name, mode=mode, seed=seed) for name in result.program.models}
    guard = BudgetGuard(system.budget)
    outcome = asyncio.run(TaskRun(result.program, system, template, providers, guard, f"t{seed}", task, None, NO_WAIT).run())
    return outcome, template


@pytest.mark.parametrize("seed", range(16))
def test_charged_never_exceeds_the_bound_and_the_bound_is_reached(tmp_path, seed):
    rng = random.Random(9000 + seed)
    name, source = random_route_source(rng, RUN_FLOWS)
    result = _compiled(tmp_path, source)
    if result is None:
        pytest.skip("no binding within this budget")  # the MILP tests cover infeasible templates
    system = result.plan.systems[0]
    task = "x" * result.program.systems["s"].task_tokens  # the fake counts a byte a token
    statuses = set()
    for run_seed in range(12):
        outcome, template = _run(result, "random", run_seed, task[: rng.randint(1, len(task))])
        statuses.add(outcome.status)
        assert outcome.cost <= template.worst_case_cost + 1e-6, (source, outcome)
        assert template.worst_case_cost <= system.budget * (1 + 1e-9)
        assert outcome.status in ("ok", "error"), outcome  # error: the router named no branch, no fallback
    worst, template = _run(result, "verbose", 0, task)
    assert worst.status == "ok", worst
    assert worst.cost <= template.worst_case_cost + 1e-6
    if name == "lists read later":
        # The reader is charged the largest branch answer, and the route its costliest branch: when
        # those are two branches (a long refine answering one draft, a cheap parallel answering a
        # list), no run pays both, and the bound is safe but above every run.
        assert worst.cost <= template.worst_case_cost + 1e-6
    elif name == "plan in a branch":
        # A step card is counted at the plan's whole cap beside the plan (safe: a card is cut
        # from the plan), while the fake's cards share the plan's length: looser by design.
        assert worst.cost <= template.worst_case_cost + 1e-6
    else:
        # A call after the route that reads its value is charged the largest branch answer, not
        # their sum: the worst-case run reaches the bound there too.
        assert worst.cost == pytest.approx(template.worst_case_cost, rel=1e-9), source
