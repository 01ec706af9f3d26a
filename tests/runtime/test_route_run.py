"""`route` at run time: only the chosen branch runs, never over the proven bound, and the bound is reached.

Random route templates (tests/helpers/routes.py) are compiled and run on the
offline fake: in random mode (routers name any branch or none, critics approve
at random, planners emit any number of steps) under many seeds, charged ≤
proven bound ≤ budget on every task. In verbose mode, a dry run, the fake
router names the costliest branch and every reply fills its cap: with a task
of exactly `task_tokens` tokens the run is charged the bound itself, so the
bound is tight, not merely safe, also where a later call reads the route's
answer. The exception, safe: a plan's step cards (docs/language.md).
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
from tests.helpers.routes import FLOWS, random_route_source

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
    if name == "plan in a branch":
        # A step card is counted at the plan's whole cap beside the plan (safe: a card is cut
        # from the plan), while the fake's cards share the plan's length: looser by design.
        assert worst.cost <= template.worst_case_cost + 1e-6
    else:
        # A call after the route that reads its answer pays, in each branch's worst case, for
        # reading that branch's answer, a list or one output: the fake router names the branch
        # whose worst case is the largest, and the run reaches the bound.
        assert worst.cost == pytest.approx(template.worst_case_cost, rel=1e-9), source


READ_LATER = [flow for flow in FLOWS if flow[0] in ("read later", "lists read later")]


@pytest.mark.parametrize("seed", range(12))
def test_a_route_read_later_reaches_its_bound(tmp_path, seed):
    """Routes whose answer a later call reads (one output, a list, a refined draft or the task):
    the verbose run is charged the bound exactly, so the bound is tight there too."""
    rng = random.Random(17000 + seed)
    _, source = random_route_source(rng, READ_LATER)
    result = _compiled(tmp_path, source.replace("budget = 300", "budget = 6000"))
    if result is None:
        pytest.skip("no binding within this budget")
    task = "x" * result.program.systems["s"].task_tokens
    worst, template = _run(result, "verbose", 0, task)
    assert worst.status == "ok", worst
    assert worst.cost == pytest.approx(template.worst_case_cost, rel=1e-9), source


def test_the_dry_run_takes_the_branch_whose_answer_read_later_makes_the_worst_case(tmp_path):
    """`deep` is the costlier branch with the shorter answer, `wide` the cheaper with the longer
    list (tests/test_route_milp.py works the bound out by hand): the bound is the run through
    `deep`, and the verbose fake's run is charged exactly that."""
    from tests.helpers.routes import DEEP_OR_WIDE

    result = _compiled(tmp_path, DEEP_OR_WIDE % 7310)
    assert result is not None
    worst, template = _run(result, "verbose", 0, "x" * 10)
    assert worst.status == "ok", worst
    assert template.worst_case_cost == pytest.approx(7310.0)
    assert worst.cost == pytest.approx(7310.0, rel=1e-9)
    (decision,) = template.decisions
    assert decision.worst_case_branch == "deep"


ENUM_ROUTER = """
model m {
  provider = fake
  name     = "steady"
  price    { input = 1.0  output = 4.0 }
  tier     = 1
}
role Triage {
  max_output = 40
  prompt     = "Which team: refund, billing or technical? {{task}}"
  output     = json(\"\"\"{"type": "object", "required": ["team"], "additionalProperties": false,
                      "properties": {"team": {"enum": ["refund", "billing", "technical"]}}}\"\"\")
}
role Short {
  max_output = 20
  prompt     = "Answer: {{task}}"
}
role Long {
  max_output = 900
  prompt     = "Answer at length: {{task}}"
}
topology t {
  slot triage : Triage [1..1]
  slot short  : Short  [1..1]
  slot long   : Long   [1..1]
  flow {
    answer route triage(task) {
      refund:    short(task)
      billing:   short(task)
      technical: long(task)
      otherwise: short(task)
    }
  }
}
system s {
  models      = [m]
  topologies  = [t]
  budget      = 100000
  task_tokens = 50
}
"""


def test_the_dry_run_takes_the_costliest_branch_whatever_the_routers_output_enum(tmp_path):
    """The schema's first value (`refund`) is a cheap branch; the verbose fake still names `technical`, the
    costliest, in a reply held to the schema, and the dry run is charged the bound: the router plus that branch."""
    pytest.importorskip("jsonschema")
    result = _compiled(tmp_path, ENUM_ROUTER)
    worst, template = _run(result, "verbose", 0, "x" * 50)
    assert worst.status == "ok", worst
    (decision,) = template.decisions
    assert decision.worst_case_branch == "technical"
    assert worst.cost == pytest.approx(template.worst_case_cost, rel=1e-9)
    assert worst.calls == 2  # the router, then the one branch
    for seed in range(8):  # random mode: any branch or none the schema allows, never over the bound
        outcome, _ = _run(result, "random", seed, "x" * 50)
        assert outcome.status == "ok" and outcome.cost <= template.worst_case_cost + 1e-6
