"""A generated family of files, deadlines x `require` rows x templates: each compiles, explains and runs, or gets a diagnostic.

Every file lints clean or with BAM codes only. Compiling it either gives a plan
whose every feasible template is within the budget and the deadline, with a
BAM501 or BAM505 for every infeasible one, or fails with a BAM error; never a
traceback. `explain` says why each infeasible template has no binding, and
`exec` runs the selected template within its bound and refuses an infeasible
one by name. The deadlines are drawn from a seeded generator across the range
where templates pass from meeting to missing them, so the family holds
templates that only the deadline stops (the binder's deadline row, with no
binding to time) beside ones it lets through.
"""

from __future__ import annotations

import asyncio
import itertools
import random
import re

import pytest

from bamasc.plan.compile import check_file, compile_file
from bamasc.plan.build import DEADLINE_ROW
from bamasc.plan.explain import explain_text
from bamasc.plan.load import verify_plan
from bamasc.runtime.execute import ExecOptions, Task
from bamasc.runtime.workers import run_tasks

# Latencies in milliseconds, so that running a template with the offline provider
# (which waits what each model declares) stays quick.
HEAD = """\
import "std/linear" "std/star" "std/feedback"

model slow {
  provider = fake
  name     = "slow"
  price    { input = 2  output = 8 }
  tier     = 1
  latency  { first_token = 0.01  per_token = 0.0002 }
}

model quick {
  provider = fake
  name     = "quick"
  price    { input = 0.1  output = 0.4 }
  tier     = 2
  latency  { first_token = 0.002  per_token = 0.00005 }
}

role Executor {
  max_output = 128
  reads      = answer
  prompt     = "Solve: {{task}}\\n{{previous?}}{{solution?}}{{feedback?}}"
}

role Critic {
  max_output = 64
  reads      = verdict
  prompt     = "Check {{solution}} for {{task}}."
}

role Polisher {
  max_output = %(polish)d
  prompt     = "Polish this draft for {{task}}: {{draft}}"
}

topology polished {
  slot executor : Executor [1..2]
  slot polisher : Polisher [1..1]
%(require)s
  flow {
    draft = chain executor(task)
    answer polisher(task, draft)
  }
}

system family {
  models     = [slow, quick]
  topologies = [%(topologies)s]
  budget     = %(budget)d
  deadline   = %(deadline)s
}
"""

REQUIRE_ROWS = (
    "",
    "require count(polisher, tier = 1) == 1",
    "require count(polisher, tier = 2) >= 1",
    "require count(executor) >= 2",
    "require count(polisher, tier = 1) <= count(executor, tier = 1)",
    "require count(executor, tier = 1) + count(polisher, tier = 1) >= 2",
)
OTHER_TEMPLATES = ((), ("linear",), ("star",), ("feedback",), ("linear", "star", "feedback"))
BUDGETS = (3000, 15000)
POLISHER_CAPS = (256, 1024)
FAMILY_SIZE = 48


def family(seed: int = 20261203, size: int = FAMILY_SIZE) -> list[dict]:
    """`size` files' settings: a seeded sample of the grid, each with a deadline drawn at random."""
    rng = random.Random(seed)
    grid = list(itertools.product(REQUIRE_ROWS, OTHER_TEMPLATES, BUDGETS, POLISHER_CAPS))
    rng.shuffle(grid)
    return [
        {
            "require": f"  {row}" if row else "",
            "topologies": ", ".join(("polished", *others)),
            "budget": budget,
            "polish": cap,
            # From faster than any call to slower than every template's slowest binding.
            "deadline": f"{rng.uniform(0.005, 0.12):.3f}",
        }
        for row, others, budget, cap in grid[:size]
    ]


FAMILY = family()
BAM_CODE = re.compile(r"BAM\d{3}")


def _compiled(write_bam, settings: dict):
    path = write_bam(HEAD % settings, "family.bam")
    return path, compile_file(path)


def _run(result, template: str | None):
    """One task on the plan's selected template (or `template`), every call answered with its full cap."""
    options = ExecOptions(fake_mode="verbose", concurrency=1, template=template)
    task = Task("t1", "What is 2 + 2?")
    results, _, _ = asyncio.run(run_tasks(result.plan, result.program, None, [task], options))
    return results[0]


@pytest.mark.parametrize("settings", FAMILY, ids=[f"case{i}" for i in range(len(FAMILY))])
def test_every_file_of_the_family_compiles_or_gets_a_diagnostic(write_bam, settings):
    path, result = _compiled(write_bam, settings)
    _, linted, _ = check_file(path)
    assert all(BAM_CODE.fullmatch(d.code) for d in linted + result.diagnostics)
    budget, deadline = settings["budget"], float(settings["deadline"])
    if result.plan is None:
        assert any(d.severity == "error" and BAM_CODE.fullmatch(d.code) for d in result.diagnostics)
        return
    verify_plan(result.plan, result.program)
    (system,) = result.plan.systems
    for template in system.templates:
        explained = explain_text(result.plan, system, result.program, template.name)
        if template.feasible:
            assert template.worst_case_cost <= budget * (1 + 1e-9)
            assert template.worst_case_latency_s <= deadline
            continue
        # Every infeasible template is reported, at its place in the system's list, with why.
        named = [d for d in result.diagnostics if d.code in ("BAM501", "BAM505") and f"'{template.name}'" in d.message]
        assert named, f"template {template.name} is infeasible without a diagnostic"
        only_time = DEADLINE_ROW in template.binding_rows and template.cheapest_cost is None
        if only_time:
            assert any(d.code == "BAM505" for d in named)
            assert "misses the deadline" in explained
        # exec refuses it by name, with the limit that stops it.
        within = f"the deadline of {deadline:g} s" if only_time else f"{budget} µ\\$"
        with pytest.raises(ValueError, match=f"template '{template.name}' has no binding within {within}"):
            _run(result, template.name)
    ran = _run(result, None)
    assert ran.template == system.selection["selected"]
    assert ran.status in ("ok", "exhausted")
    assert ran.cost <= system.template(ran.template).worst_case_cost * (1 + 1e-9) <= budget * (1 + 1e-9)


def test_the_family_holds_templates_only_the_deadline_stops(tmp_path):
    """The family covers what it is for: a template the binder finds no binding for within the
    deadline alone (no seats to time), in a system that still compiles; and feasible templates."""
    only_deadline = feasible = 0
    for i, settings in enumerate(FAMILY):
        path = tmp_path / f"family{i}.bam"
        path.write_text(HEAD % settings, encoding="utf-8")
        result = compile_file(str(path))
        if result.plan is None:
            continue
        for template in result.plan.systems[0].templates:
            feasible += template.feasible
            only_deadline += template.binding_rows == (DEADLINE_ROW,) and not template.binding
    assert only_deadline >= 3
    assert feasible >= 10
