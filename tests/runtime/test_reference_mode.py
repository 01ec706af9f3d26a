"""The reference mode makes the reference's calls: on every paper pool, with a critic that always
disapproves, the `*_reference_mode` systems call the seats the BAMAS reference's engine calls, in
its order, and stop where it stops (docs/paper.md, "The reference mode").

The sequences below were written from reading the reference's engine (github chunfenri/BAMAS,
`eapae_agent_sys/execution/execution_engine.py`), not from bamasc's runs. What they rest on:

- The engine takes a seat from its pool "High" first, whatever the pattern
  (`_get_agent_instance_from_pool`), and each seat once (`_consume_resource`).
- Linear (`_execute_linear_template`): min(executors, 3) calls (1 for a task under 50 characters
  with an operator and a digit); with more than one call and both levels in the pool, one High is
  held back for the last call.
- Star (`_execute_star_template`): below two executors, the linear template; otherwise
  `_decompose_task_for_star` gives min(executors, 3) "solve part of this problem" parts, or, when
  the task says "calculate" or "compute", up to 4 parts (extract, determine, perform, verify), each
  run on its own seat, one after another; then an aggregation that makes no call.
- Feedback (`_execute_feedback_template`, max_iterations = 2): an executor, then a critic; on a
  rejection a fresh executor (none left: it stops), then a fresh critic (none left: it stops);
  after the second critic it stops whatever it said.
- Planner-driven (`_execute_with_planner`): the planner writes every card once; each step takes
  a seat of the class its card names, and the first step with none left ends the run. No budget
  check at all. The dry-run planner writes a card for every step the plan allows (4), so every
  executor seat runs.

The pools are the reference ILP's (tests/helpers/paper.py, EXPECTED), which
`--cost-model paper` binds. "E:H" is an Executor call on the High model (tier 1), "C:L" a Critic
call on the Low one, "P" the Planner.
"""

from __future__ import annotations

import asyncio
import os

import pytest

from bamasc.plan.compile import compile_file
from bamasc.metering.guard import BudgetGuard, PosthocGuard, guard_class
from bamasc.runtime.interpreter import TaskRun
from bamasc.runtime.providers.fake import FakeProvider
from bamasc.runtime.retry import RetryPolicy
from tests.helpers.paper import EXPECTED as POOLS
from tests.helpers.runtime import Collect

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ONE_TRY = RetryPolicy(max_attempts=1)
# A word problem as GSM8K asks them: longer than 50 characters, and neither "calculate" nor "compute".
TASK = "Tom has 40 apples and buys 2 more at the market before noon. How many apples does he have now?"

# (dataset, pattern, budget µ$) -> the reference's calls, with the pool they come from.
SEQUENCES = {
    # --- linear: min(n, 3) calls; High held back for the last when the pool has both levels.
    ("gsm8k", "linear", 500): "E:L E:L",  # 2 Low: two calls, one level, nothing held back
    ("gsm8k", "linear", 875): "E:L E:H",  # 1 High 1 Low: the High is held for the last, the Low goes first
    ("gsm8k", "linear", 1250): "E:H E:H",  # 2 High: one level, two calls
    ("gsm8k", "linear", 1625): "E:H E:L E:H",  # 2H 2L: 3 calls; one High held, then High first from 1H 2L: H, L; then the held H
    ("gsm8k", "linear", 2000): "E:H E:H E:H",  # 3H 1L: 3 calls; one High held, then H, H from 2H 1L; the Low seat never runs
    ("math", "linear", 1000): "E:L E:L",  # 2 Low
    ("math", "linear", 2000): "E:L E:H",  # 1H 1L: the High held for the last
    ("math", "linear", 3000): "E:H E:L E:H",  # 2H 1L: one High held; H, L; then the held H
    ("mbpp", "linear", 500): "E:L E:L",  # 2 Low
    ("mbpp", "linear", 875): "E:L E:H",  # 1H 1L: the High held for the last
    ("mbpp", "linear", 1250): "E:H E:H",  # 2 High
    ("mbpp", "linear", 1625): "E:H E:L E:H",  # 2H 2L: as GSM8K's
    ("mbpp", "linear", 2000): "E:H E:H E:H",  # 3H 1L: the Low seat never runs
    # --- star: min(n, 3) "solve part" calls, High first, then the vote (no call).
    ("gsm8k", "star", 500): "E:L E:L",  # 2 Low: two parts
    ("gsm8k", "star", 875): "E:H E:L",  # 1H 1L: two parts, High first
    ("gsm8k", "star", 1250): "E:H E:H",  # 2H: two parts
    ("gsm8k", "star", 1625): "E:H E:H E:L",  # 2H 2L: three parts (the cap), High first; one Low seat idle
    ("gsm8k", "star", 2000): "E:H E:H E:H",  # 3H 1L: three parts on the three Highs; the Low idle
    ("math", "star", 1000): "E:L E:L",  # 2 Low
    ("math", "star", 2000): "E:H E:L",  # 1H 1L
    ("math", "star", 3000): "E:H E:H E:L",  # 2H 1L: three parts, every seat
    ("mbpp", "star", 500): "E:L E:L",  # 2 Low
    ("mbpp", "star", 875): "E:H E:L",  # 1H 1L
    ("mbpp", "star", 1250): "E:H E:H",  # 2H
    ("mbpp", "star", 1625): "E:H E:H E:L",  # 2H 2L: three parts, one Low idle
    ("mbpp", "star", 2000): "E:H E:H E:H",  # 3H 1L: the Low idle
    # --- feedback: executor, critic; on rejection a fresh executor and a fresh critic, if any.
    ("gsm8k", "feedback", 500): "E:L C:L",  # 1 executor: after the rejection none is left, it stops
    ("gsm8k", "feedback", 875): "E:H C:L",  # 1 executor: stops after the critic
    ("gsm8k", "feedback", 1250): "E:H C:H",  # 1 executor, a High critic
    ("gsm8k", "feedback", 1625): "E:H C:L E:H C:L",  # 2 executors, 2 critics: both rounds; the second verdict unread
    ("gsm8k", "feedback", 2000): "E:H C:L E:H",  # 3 executors, 1 critic: round 2 finds no critic and stops; 3rd executor idle
    ("math", "feedback", 1000): "E:L C:L",  # 1 executor
    ("math", "feedback", 2000): "E:H C:L",  # the headline row: 1 executor, the answer is the first draft
    ("math", "feedback", 3000): "E:H C:L E:H",  # 2 executors, 1 critic: the revision, then no critic
    ("mbpp", "feedback", 500): "E:L C:L",  # 1 executor
    ("mbpp", "feedback", 875): "E:H C:L",  # 1 executor
    ("mbpp", "feedback", 1250): "E:H C:H",  # the headline row: 1 executor, the answer is the first draft
    ("mbpp", "feedback", 1625): "E:H C:L E:H C:L",  # 2 and 2: both rounds
    ("mbpp", "feedback", 2000): "E:H C:L E:H",  # 3 executors, 1 critic
    # --- planner-driven: the plan once, then one step per executor seat, High first, until none is left.
    ("gsm8k", "planner", 500): "P:L E:L",  # 1 executor: the second card finds no seat, the run ends
    ("gsm8k", "planner", 875): "P:L E:H",  # 1 executor
    ("gsm8k", "planner", 1250): "P:H E:H E:L",  # 2 executors, High first
    ("gsm8k", "planner", 1625): "P:H E:H E:H",  # 2 High executors
    ("gsm8k", "planner", 2000): "P:L E:H E:H E:H",  # 3 High executors; the 4th card finds none
    ("math", "planner", 1000): "P:H E:L",  # 1 executor
    ("math", "planner", 2000): "P:H E:H",  # 1 executor
    ("math", "planner", 3000): "P:H E:H E:L E:L",  # 1H 2L executors, High first
    ("mbpp", "planner", 500): "P:L E:L",  # 1 executor
    ("mbpp", "planner", 875): "P:L E:H",  # 1 executor
    ("mbpp", "planner", 1250): "P:H E:H",  # 1 executor
    ("mbpp", "planner", 1625): "P:L E:H E:H E:L",  # 2H 1L executors, High first
    ("mbpp", "planner", 2000): "P:L E:H E:H E:H",  # 3H
}

# The task-text rules, on the pools where they change the calls.
# A task that says "calculate": star runs up to 4 parts (extract, determine, perform, verify).
CALCULATING = "Calculate how many apples Tom has after he buys 2 more at the market today."
CALCULATING_SEQUENCES = {
    ("gsm8k", "star", 1625): "E:H E:H E:L E:L",  # 2H 2L: four parts, every seat
    ("gsm8k", "star", 2000): "E:H E:H E:H E:L",  # 3H 1L: four parts, the Low seat too
    ("gsm8k", "star", 875): "E:H E:L",  # 1H 1L: two seats, two parts (extract, determine)
    ("mbpp", "star", 1625): "E:H E:H E:L E:L",  # as GSM8K's
}
# A short arithmetic task (under 50 characters, an operator and a digit): linear runs one executor,
# taken High first (nothing is held back for a single call).
SHORT = "What is 40 + 2?"
SHORT_SEQUENCES = {
    ("gsm8k", "linear", 1625): "E:H",  # 2H 2L: one call, the first High
    ("gsm8k", "linear", 500): "E:L",  # 2L: one call
    ("gsm8k", "linear", 875): "E:H",  # 1H 1L: one call, High first
}


def _program_plans():
    """Each (dataset, budget) compiled once, with the paper cost model, as the kit compiles it."""
    cache = {}

    def plan(dataset: str, budget: float, tmp: str):
        if (dataset, budget) not in cache:
            path = os.path.join(ROOT, "examples", "paper", f"{dataset}.bam")
            compiled = compile_file(path, f"{dataset}_reference_mode", budget, "paper", tmp)
            assert compiled.plan is not None, [d.message for d in compiled.diagnostics]
            cache[dataset, budget] = compiled.program, compiled.plan.systems[0]
        return cache[dataset, budget]

    return plan


PLANS = _program_plans()


def _calls(dataset: str, pattern: str, budget: float, tmp: str, task: str = TASK, guard_budget: float | None = None):
    """The run of the dataset's reference-mode template on its pool at `budget`: the dry run's fake
    (every reply fills its cap, every critic rejects, the planner writes every card), under the
    after-the-fact check. Returns (calls as "E:H" ..., the trace's call lines, the result)."""
    program, system = PLANS(dataset, budget, tmp)
    template = system.template(f"reference_{pattern}")
    assert template.feasible
    providers = {name: FakeProvider(name, "verbose") for name in program.models}
    trace = Collect()
    guard = PosthocGuard(system.budget if guard_budget is None else guard_budget)
    result = asyncio.run(TaskRun(program, system, template, providers, guard, "t", task, trace, ONE_TRY).run())
    made = [line for line in trace.calls if not line["skipped"]]
    level = {name: "H" if model.tier == 1 else "L" for name, model in program.models.items()}
    return " ".join(f"{line['role'][0]}:{level[line['model']]}" for line in made), made, result


def test_the_sequences_cover_every_paper_pool():
    assert set(SEQUENCES) == set(POOLS)


@pytest.mark.parametrize("key", sorted(SEQUENCES), ids=lambda k: f"{k[0]}-{k[1]}-{k[2]}")
def test_the_reference_mode_makes_the_reference_calls(key, tmp_path_factory):
    dataset, pattern, budget = key
    calls, made, result = _calls(dataset, pattern, budget, str(tmp_path_factory.getbasetemp()))
    assert calls == SEQUENCES[key]
    assert result.status == "ok" and result.calls == len(made)
    if pattern == "feedback":  # the answer is the last executor's draft
        assert result.output is not None and "CONCLUSION" not in result.output


@pytest.mark.parametrize("key", sorted(CALCULATING_SEQUENCES), ids=lambda k: f"{k[0]}-{k[1]}-{k[2]}")
def test_a_task_that_says_calculate_splits_a_star_into_four_parts(key, tmp_path_factory):
    calls, made, _ = _calls(*key, str(tmp_path_factory.getbasetemp()), task=CALCULATING)
    assert calls == CALCULATING_SEQUENCES[key]
    parts = [line for line in made if line["role"] == "Executor"]
    assert len(parts) == len(CALCULATING_SEQUENCES[key].split())


@pytest.mark.parametrize("key", sorted(SHORT_SEQUENCES), ids=lambda k: f"{k[0]}-{k[1]}-{k[2]}")
def test_a_short_arithmetic_task_runs_one_linear_executor(key, tmp_path_factory):
    calls, _, _ = _calls(*key, str(tmp_path_factory.getbasetemp()), task=SHORT)
    assert calls == SHORT_SEQUENCES[key]


def test_a_star_call_is_told_its_part(tmp_path_factory):
    program, system = PLANS("gsm8k", 1625, str(tmp_path_factory.getbasetemp()))
    seen = []

    class Recording(FakeProvider):
        async def complete(self, messages, max_tokens, **kwargs):
            seen.append(messages[-1].content)
            return await super().complete(messages, max_tokens, **kwargs)

    providers = {name: Recording(name, "verbose") for name in program.models}
    run = TaskRun(program, system, system.template("reference_star"), providers, PosthocGuard(1625), "t", TASK,
                  None, ONE_TRY)
    asyncio.run(run.run())
    assert [("Part 1 of 3" in p, "Part 2 of 3" in p, "Part 3 of 3" in p) for p in seen] == [
        (True, False, False), (False, True, False), (False, False, True)]
    assert all("solve this part of the problem" in p for p in seen)


# ---------------------------------------------------------------- the budget check


def test_spending_that_reaches_the_budget_stops_before_the_next_call(tmp_path_factory):
    """The reference compares what it spent with the budget before each call (`>=` stops): a budget
    equal to the first call's charge stops the chain after it; a hair more lets the second run."""
    tmp = str(tmp_path_factory.getbasetemp())
    _, made, _ = _calls("gsm8k", "linear", 1625, tmp)
    first = made[0]["charged"]
    calls, _, result = _calls("gsm8k", "linear", 1625, tmp, guard_budget=first)
    assert calls == "E:H" and result.status == "exhausted" and result.exhausted == "budget"
    assert result.output is not None  # best so far: the first call's draft
    calls, _, result = _calls("gsm8k", "linear", 1625, tmp, guard_budget=first + 0.01)
    assert calls == "E:H E:L"  # spent below the budget: the second call runs, and overruns it
    assert result.overran


def test_the_vote_is_skipped_once_spending_reaches_the_budget(tmp_path_factory):
    tmp = str(tmp_path_factory.getbasetemp())
    _, made, _ = _calls("gsm8k", "star", 1625, tmp)
    spent = sum(line["charged"] for line in made)
    calls, _, result = _calls("gsm8k", "star", 1625, tmp, guard_budget=spent)
    assert calls == "E:H E:H E:L" and result.status == "exhausted"
    assert result.output is not None  # the last part's output, as the reference answers without its vote


def test_the_planner_driven_template_is_never_stopped_for_the_budget(tmp_path_factory):
    tmp = str(tmp_path_factory.getbasetemp())
    calls, made, result = _calls("gsm8k", "planner", 2000, tmp, guard_budget=1.0)
    assert calls == SEQUENCES["gsm8k", "planner", 2000]
    assert result.status == "ok" and sum(line["charged"] for line in made) > 1.0 and result.overran


def test_the_reserve_guard_still_stops_a_reference_template_before_the_budget(tmp_path_factory):
    """The budget mode is the guard's: under the default guard the same template never overruns."""
    program, system = PLANS("gsm8k", 1625, str(tmp_path_factory.getbasetemp()))
    providers = {name: FakeProvider(name, "verbose") for name in program.models}
    guard = BudgetGuard(1625)
    result = asyncio.run(TaskRun(program, system, system.template("reference_linear"), providers, guard, "t", TASK,
                                 None, ONE_TRY).run())
    assert not result.overran and guard.charged <= 1625


# ---------------------------------------------------------------- never on by default


def test_the_after_check_is_on_only_where_a_system_says_so():
    from bamasc.plan.compile import check_file

    assert guard_class() is BudgetGuard
    assert guard_class("reserve", "before") is BudgetGuard
    assert guard_class("reserve", "after") is PosthocGuard
    assert guard_class("posthoc", "before") is PosthocGuard
    for dataset in ("gsm8k", "math", "mbpp"):
        program, _, _ = check_file(os.path.join(ROOT, "examples", "paper", f"{dataset}.bam"))
        after = {name for name, system in program.systems.items() if system.budget_check == "after"}
        assert after == {f"{dataset}_reference_mode"}


def test_a_total_budget_is_refused_for_a_system_checked_after_each_call(tmp_path):
    import subprocess
    import sys

    path = os.path.join(ROOT, "examples", "paper", "gsm8k.bam")
    plan = tmp_path / "plan.json"
    run = [sys.executable, "-m", "bamasc"]
    compiled = subprocess.run([*run, "compile", path, "--system", "gsm8k_reference_mode", "--cost-model", "paper",
                               "-o", str(plan)], capture_output=True, text=True)
    assert compiled.returncode == 0, compiled.stderr
    trace = tmp_path / "trace.jsonl"
    # The feedback template's dry run ends below the budget (the selected planner's passes it: exit 1).
    done = subprocess.run([*run, "exec", str(plan), "--task", TASK, "--dry-run", "--template", "reference_feedback",
                           "--trace", str(trace)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    assert '"guard": "posthoc"' in trace.read_text(encoding="utf-8")  # the mode is in the trace
    refused = subprocess.run([*run, "exec", str(plan), "--task", TASK, "--dry-run", "--total-budget", "5000"],
                             capture_output=True, text=True)
    assert refused.returncode == 2 and "budget_check = after" in refused.stderr


# ---------------------------------------------------------------- the bound, by hand

WORKED = """
model one {
  provider = fake
  name     = "one"
  price    { input = 1  output = 2 }
  tier     = 1
}

role A {
  max_output = 40
  prompt     = "A {{task}}{{previous?}}{{earlier?}}"
}

topology t {
  slot a : A [3..3]
  flow {
    answer reference chain a(task)
  }
}

system s {
  models      = [one]
  topologies  = [t]
  budget      = 890
  task_tokens = 100
}
"""


def test_a_reference_chain_bound_is_the_one_worked_by_hand(tmp_path):
    """docs/language.md, "`reference` combinators": every call either answer of the task test makes."""
    path = tmp_path / "t.bam"
    path.write_text(WORKED)
    template = compile_file(str(path), plan_dir=str(tmp_path)).plan.systems[0].template("t")
    inputs = {node.id: node.input_tokens for node in template.nodes}
    # "A " and 8 tokens of message framing, the task; the previous output; two numbered outputs.
    assert inputs == {"a[0]@0.short": 110, "a[1]@0.chain0": 110, "a[2]@0.chain1": 150, "a[0]@0.chain2": 200}
    assert template.worst_case_cost == pytest.approx(190 + 190 + 230 + 280)
