"""Latency: the `latency` and `deadline` checks, the bound by hand, the plan's figures, explain, and the guard at run time."""

from __future__ import annotations

import asyncio
import json
import re

import pytest

from bamasc.check import check
from bamasc.diagnostics import render_text
from bamasc.ir.latency import LatencyBound, call_latency_s, steps, worst_case_latency
from bamasc.ir.unroll import unroll
from bamasc.lint import lint_paths
from bamasc.loader import load
from bamasc.plan.compile import compile_file
from bamasc.plan.explain import explain_text
from bamasc.plan.load import PlanVerificationError, load_plan, verify_plan
from bamasc.plan.schema import dumps
from bamasc.program import Latency
from bamasc.records import replace
from bamasc.runtime.deadline import DeadlineGuard
from bamasc.runtime.execute import ExecOptions, Task
from bamasc.runtime.workers import run_tasks
from bamasc.metering.guard import BudgetGuard
from bamasc.runtime.interpreter import TaskRun
from bamasc.runtime.providers import make_provider
from bamasc.runtime.providers.fake import FakeProvider
from bamasc.runtime.retry import RetryPolicy

MODEL = """
model {name} {{
  provider   = fake
  name       = "{name}"
  price      {{ input = 0  output = 0 }}
  tier       = 1
  {latency}
}}
"""

SINGLE = """
role Solver {
  max_output = 64
  prompt     = "{{task}}"
}

topology single {
  slot solver : Solver [1..1]
  flow { answer solver(task) }
}
"""


def lint_text(write_bam, source: str) -> tuple[str, list]:
    path = write_bam(source)
    result = lint_paths([path])
    return render_text(result.diagnostics, result.sources), result.diagnostics


# ---------------------------------------------------------------- checks


@pytest.mark.parametrize(
    "block, code, at, words",
    [
        ("latency { first_token = -0.5  per_token = 0.01 }", "BAM216", "-0.5", "'first_token' in the latency of model 'm' must be above zero, not -0.5"),
        ("latency { first_token = 0.5  per_token = 0 }", "BAM216", "0 }", "'per_token' in the latency of model 'm' must be above zero, not 0"),
        ('latency { first_token = "soon"  per_token = 0.01 }', "BAM216", '"soon"', "must be a number, not a string"),
        ("latency { first_token = 0.5  tokens_per_s = -80 }", "BAM216", "-80", "'tokens_per_s' in the latency of model 'm' must be above zero, not -80"),
        ("latency { first_token = 0.5 }", "BAM217", "latency", "gives no output speed"),
        ("latency { per_token = 0.01 }", "BAM217", "latency", "has no 'first_token'"),
        ("latency { first_token = 0.5  per_token = 0.01  tokens_per_s = 80 }", "BAM218", "tokens_per_s", "gives both 'per_token' and 'tokens_per_s'"),
        ("latency { first_token = 0.5  per_tok = 0.01 }", "BAM106", "per_tok", "latency of model 'm' has no attribute 'per_tok'"),
        ("latency { first_token = 0.5 µ$  per_token = 0.01 }", "BAM208", "0.5 µ$", "takes no other unit, not µ$"),
        ("latency { first_token = 1e999  per_token = 0.01 }", "BAM210", "1e999", "above the limit of 86400 s"),
        ("latency = 0.5", "BAM108", "0.5", "must be a block"),
    ],
)
def test_a_wrong_latency_block_is_reported_at_the_value(write_bam, block, code, at, words):
    source = MODEL.format(name="m", latency=block)
    text, diagnostics = lint_text(write_bam, source)
    assert code in {d.code for d in diagnostics}, text
    line = source.split("\n")[6]  # the model's latency line
    assert f"main.bam:7:{line.index(at) + 1}: error[{code}]" in text
    assert words in text


def test_did_you_mean_for_an_unknown_latency_key(write_bam):
    text, _ = lint_text(write_bam, MODEL.format(name="m", latency="latency { first_tokens = 0.5  per_token = 0.01 }"))
    assert "did you mean 'first_token'?" in text


def test_seconds_may_be_written_with_their_unit(write_bam):
    program, diagnostics = check(load(write_bam(MODEL.format(name="m", latency="latency { first_token = 0.6 s  per_token = 0.01 s }"))))
    assert not diagnostics
    latency = program.models["m"].latency
    assert (latency.first_token_s, latency.per_output_token_s) == (0.6, 0.01)


def test_tokens_per_s_is_read_as_seconds_per_token(write_bam):
    program, diagnostics = check(load(write_bam(MODEL.format(name="m", latency="latency { first_token = 0.6  tokens_per_s = 80 }"))))
    assert not diagnostics
    latency = program.models["m"].latency
    assert (latency.first_token_s, latency.per_output_token_s) == (0.6, 1 / 80)


def test_a_model_without_a_latency_block_has_none(write_bam):
    program, _ = check(load(write_bam(MODEL.format(name="m", latency=""))))
    assert program.models["m"].latency is None
    assert program.systems == {}


def system(deadline: str, models: str = "[m]") -> str:
    return f"system s {{\n  models     = {models}\n  topologies = [single]\n  budget     = 100\n  deadline   = {deadline}\n}}\n"


@pytest.mark.parametrize(
    "deadline, words",
    [("0", "must be above zero, not 0"), ("-3", "must be above zero, not -3"), ('"soon"', "must be a number, not a string"),
     ("[5]", "must be a number, not a list")],
)
def test_a_wrong_deadline_is_bam407(write_bam, deadline, words):
    source = MODEL.format(name="m", latency="latency { first_token = 0.5  per_token = 0.01 }") + SINGLE + system(deadline)
    text, diagnostics = lint_text(write_bam, source)
    assert [d.code for d in diagnostics] == ["BAM407"], text
    line = source.split("\n").index(f"  deadline   = {deadline}") + 1
    assert f"main.bam:{line}:16: error[BAM407]: the deadline (seconds per task) {words}" in text


def test_a_deadline_over_a_model_without_latency_is_bam408(write_bam):
    source = (
        MODEL.format(name="m", latency="latency { first_token = 0.5  per_token = 0.01 }")
        + MODEL.format(name="slow", latency="")
        + SINGLE
        + system("20", "[m, slow]")
    )
    text, diagnostics = lint_text(write_bam, source)
    assert [d.code for d in diagnostics] == ["BAM408"], text
    line = source.split("\n").index("  models     = [m, slow]") + 1
    assert f"main.bam:{line}:20: error[BAM408]: system 's' has a deadline of 20 s, but its model 'slow' declares no latency" in text
    assert "note: the deadline is given here" in text


def test_a_deadline_with_every_latency_declared_lints_clean(write_bam):
    source = MODEL.format(name="m", latency="latency { first_token = 0.5  per_token = 0.01 }") + SINGLE + system("20")
    _, diagnostics = lint_text(write_bam, source)
    assert diagnostics == []


# ---------------------------------------------------------------- the bound by hand

# careful: 0.5 s + 0.02 s per token. quick: 0.2 s + 1/100 s per token, at most 100 tokens.

MIX = """
model careful {
  provider = fake
  name     = "careful"
  price    { input = 0  output = 0 }
  tier     = 1
  latency  { first_token = 0.5  per_token = 0.02 }
}

model quick {
  provider   = fake
  name       = "quick"
  price      { input = 0  output = 0 }
  tier       = 2
  max_output = 100
  latency    { first_token = 0.2  tokens_per_s = 100 }
}

role Solver {
  max_output = 200
  prompt     = "Solve: {{task}} {{previous?}} {{solution?}} {{feedback?}}"
}

role Critic {
  max_output = 50
  prompt     = "Check: {{task}} {{solution}}"
}

topology mix {
  slot solver : Solver [2..2]
  slot critic : Critic [1..1]
  require count(solver, tier = 1) <= 1
  flow {
    drafts = parallel solver(task)
    relay = chain solver(task)
    answer refine solver(task) with critic until approved
  }
}

system s {
  models     = [careful, quick]
  topologies = [mix]
  budget     = 100
  deadline   = DEADLINE
}
"""

# Step by step, with solver[0] and critic[0] on careful and solver[1] on quick:
# careful Solver 0.5 + 0.02 * 200 = 4.5; quick Solver 0.2 + 0.01 * 100 = 1.2; careful Critic 0.5 + 0.02 * 50 = 1.5.
BY_HAND = [
    ("solver[0]@0.parallel0", 4.5),  # step 0 also runs solver[1]@0.parallel1 (1.2 s) beside it
    ("solver[1]@1.chain0", 1.2),
    ("solver[0]@1.chain1", 4.5),
    ("solver[0]@2.draft", 4.5),
    ("critic[0]@2.audit0", 1.5),
    ("solver[1]@2.revise0", 1.2),
]


@pytest.fixture
def mix_program(write_bam):
    program, diagnostics = check(load(write_bam(MIX.replace("DEADLINE", "20"))))
    assert not diagnostics
    return program


def test_call_latency_is_first_token_plus_the_output_cap(mix_program):
    solver, critic = mix_program.roles["Solver"], mix_program.roles["Critic"]
    careful, quick = mix_program.models["careful"], mix_program.models["quick"]
    assert call_latency_s(solver, careful) == pytest.approx(4.5)
    assert call_latency_s(solver, quick) == pytest.approx(1.2)  # the model's cap of 100, not the role's 200
    assert call_latency_s(critic, careful) == pytest.approx(1.5)
    assert call_latency_s(solver, replace(careful, latency=None)) is None


def test_parallel_calls_share_a_step_and_the_others_follow_one_another(mix_program):
    calls = unroll(mix_program.topologies["mix"], {"solver": 2, "critic": 1}).calls
    assert [(c.id, c.step) for c in calls] == [
        ("solver[0]@0.parallel0", 0), ("solver[1]@0.parallel1", 0), ("solver[1]@1.chain0", 1),
        ("solver[0]@1.chain1", 2), ("solver[0]@2.draft", 3), ("critic[0]@2.audit0", 4), ("solver[1]@2.revise0", 5),
    ]
    assert [len(group) for group in steps(calls)] == [2, 1, 1, 1, 1, 1]


def test_worst_case_latency_sums_the_slowest_call_of_each_step(mix_program):
    calls = unroll(mix_program.topologies["mix"], {"solver": 2, "critic": 1}).calls
    models = mix_program.models
    model_of = {("solver", 0): models["careful"], ("solver", 1): models["quick"], ("critic", 0): models["careful"]}
    bound = worst_case_latency(calls, model_of, mix_program.roles)
    assert bound.seconds == pytest.approx(sum(seconds for _, seconds in BY_HAND))  # 17.4 s, not the 18.6 s of every call
    assert bound.path == tuple(node for node, _ in BY_HAND)
    # The slowest call of a parallel step decides it, whichever instance it is.
    swapped = {**model_of, ("solver", 0): models["quick"], ("solver", 1): models["careful"]}
    assert worst_case_latency(calls, swapped, mix_program.roles).path[0] == "solver[1]@0.parallel1"


def test_without_a_declared_latency_there_is_no_bound(mix_program):
    calls = unroll(mix_program.topologies["mix"], {"solver": 2, "critic": 1}).calls
    models = mix_program.models
    model_of = {("solver", 0): models["careful"], ("solver", 1): replace(models["quick"], latency=None), ("critic", 0): models["careful"]}
    assert worst_case_latency(calls, model_of, mix_program.roles) == LatencyBound(None, ())


# ---------------------------------------------------------------- the plan


@pytest.fixture
def mix_plan(tmp_path):
    path = tmp_path / "mix.bam"
    path.write_text(MIX.replace("DEADLINE", "20"), encoding="utf-8")
    compiled = compile_file(str(path), plan_dir=str(tmp_path))
    assert compiled.plan is not None, [d.message for d in compiled.diagnostics]
    plan_path = tmp_path / "mix.plan.json"
    plan_path.write_text(dumps(compiled.plan), encoding="utf-8")
    return plan_path, compiled


def test_the_plan_records_the_bound_the_deadline_and_each_call(mix_plan):
    plan_path, _ = mix_plan
    data = json.loads(plan_path.read_text(encoding="utf-8"))
    system = data["systems"][0]
    template = system["templates"][0]
    assert system["deadline_s"] == 20
    assert template["worst_case_latency_s"] == pytest.approx(17.4)
    assert {n["id"]: n["latency_s"] for n in template["nodes"]}["solver[1]@0.parallel1"] == pytest.approx(1.2)
    assert [n["step"] for n in template["nodes"]] == [0, 0, 1, 2, 3, 4, 5]
    assert data["prices"]["quick"]["latency"] == {"first_token_s": 0.2, "per_output_token_s": 0.01}
    plan, _ = load_plan(str(plan_path))
    assert plan.systems[0].template("mix").worst_case_latency_s == pytest.approx(17.4)


@pytest.mark.parametrize("field", ["worst_case_latency_s", "latency_s"])
def test_a_plan_edited_to_promise_less_time_is_refused(mix_plan, field):
    plan_path, _ = mix_plan
    data = json.loads(plan_path.read_text(encoding="utf-8"))
    template = data["systems"][0]["templates"][0]
    target = template if field == "worst_case_latency_s" else template["nodes"][0]
    target[field] = 1.0
    plan_path.write_text(json.dumps(data, indent=2), encoding="utf-8")
    with pytest.raises(PlanVerificationError) as refused:
        load_plan(str(plan_path))
    where = "systems.s.templates.mix." + ("worst_case_latency_s" if field == "worst_case_latency_s" else "nodes[0].latency_s")
    assert f"{where} is 1.0, but the graph gives" in str(refused.value)


def test_verification_recomputes_the_latency_itself(mix_plan):
    # Past the comparison with the sources, a plan whose records were changed in memory still fails.
    _, compiled = mix_plan
    system = compiled.plan.systems[0]
    template = system.template("mix")
    low = replace(compiled.plan, systems=(replace(system, templates=(replace(template, worst_case_latency_s=10.0),)),))
    with pytest.raises(PlanVerificationError, match="recorded worst-case latency 10 s, the graph gives 17.4 s"):
        verify_plan(low, compiled.program)
    nodes = (replace(template.nodes[0], latency_s=0.1),) + template.nodes[1:]
    edited = replace(compiled.plan, systems=(replace(system, templates=(replace(template, nodes=nodes),)),))
    with pytest.raises(PlanVerificationError, match=r"call solver\[0\]@0.parallel0: recorded worst-case latency 0.1 s; its role and model give 4.5 s"):
        verify_plan(edited, compiled.program)
    late = replace(compiled.plan, systems=(replace(system, deadline_s=15.0),))
    with pytest.raises(PlanVerificationError, match="worst-case latency 17.4 s exceeds the deadline of 15 s"):
        verify_plan(late, compiled.program)


def test_explain_shows_the_critical_path_and_the_deadline(mix_plan):
    _, compiled = mix_plan
    system = compiled.plan.systems[0]
    text = explain_text(compiled.plan, system, compiled.program, None)
    assert "worst case 0.0 µ$ of a 100 µ$ budget, 17.400 s of a 20 s deadline" in text
    assert "Critical path (the slowest call of each step; calls of one step run together): 17.400 s" in text
    rows = [line.split() for line in text.split("\n") if re.match(r"^\d+\s+\S+@\S+\s+[\d.]+$", line)]
    assert [(row[1], float(row[2])) for row in rows] == BY_HAND
    assert [int(row[0]) for row in rows] == [0, 1, 2, 3, 4, 5]
    assert "deadline: 17.400 of 20 s (slack 2.600 s)" in text
    tight = replace(system, deadline_s=17.5)
    assert "deadline: 17.400 of 17.5 s (tight, slack 0.100 s)" in explain_text(compiled.plan, tight, compiled.program, None)


def test_a_tight_deadline_changes_the_binding(tmp_path):
    """The binder binds under the deadline: tighter deadlines move seats to the quicker model, at
    the price of tier-1 seats, and a deadline no binding meets leaves the template without one."""
    path = tmp_path / "tight.bam"
    seen = []
    for deadline in ("30", "17", "10"):
        path.write_text(MIX.replace("DEADLINE", deadline), encoding="utf-8")
        compiled = compile_file(str(path), plan_dir=str(tmp_path))
        assert not compiled.diagnostics, [d.message for d in compiled.diagnostics]
        mix = compiled.plan.systems[0].template("mix")
        assert mix.feasible and mix.worst_case_latency_s <= float(deadline)
        seen.append((mix.worst_case_latency_s, tuple((s.slot, s.instance, s.model) for s in mix.binding)))
    assert seen[0] == (pytest.approx(17.4), (("solver", 0, "careful"), ("solver", 1, "quick"), ("critic", 0, "careful")))
    assert seen[1] == (pytest.approx(16.6), (("solver", 0, "careful"), ("solver", 1, "quick"), ("critic", 0, "quick")))
    assert seen[2] == (pytest.approx(7.5), (("solver", 0, "quick"), ("solver", 1, "quick"), ("critic", 0, "careful")))
    path.write_text(MIX.replace("DEADLINE", "5"), encoding="utf-8")
    none = compile_file(str(path), plan_dir=str(tmp_path))
    assert none.plan is None
    (late,) = [d for d in none.diagnostics if d.code == "BAM505"]
    assert late.message.startswith("template 'mix' has no binding within the deadline of 5 s")
    assert "min_count[critic]" in late.message  # without a critic, one quick draft would do
    refusal = next(d for d in none.diagnostics if d.code == "BAM502")
    assert "within 100 µ$ and 5 s" in refusal.message


def test_a_binding_past_the_deadline_never_reaches_the_plan(tmp_path, monkeypatch):
    """If the binder ever misjudged a binding's latency, compile's own check on the bound graph
    marks the template infeasible (BAM505) instead of emitting a plan that breaks the deadline."""
    from bamasc.optimize import exact
    from bamasc.optimize.template import build as real_build

    monkeypatch.setattr(exact.TemplateSolver, "latency", lambda self, found: 0.0)
    monkeypatch.setattr(exact, "build", lambda problem, statements, pool, roles, deadline=None: real_build(problem, statements, pool, roles, None))
    source = MIX.replace("DEADLINE", "17") + """
topology solo {
  slot solver : Solver [1..1]
  flow { answer solver(task) }
}
"""
    source = source.replace("topologies = [mix]", "topologies = [mix, solo]")
    path = tmp_path / "late.bam"
    path.write_text(source, encoding="utf-8")
    compiled = compile_file(str(path), plan_dir=str(tmp_path))
    late = [d for d in compiled.diagnostics if d.code == "BAM505"]
    assert len(late) == 1 and late[0].severity == "warning"
    assert late[0].message.startswith("template 'mix' may take 17.400 s on its binding, above the deadline of 17 s")
    assert "solver[0]@0.parallel0 -> solver[1]@1.chain0" in late[0].message
    system = compiled.plan.systems[0]
    mix, solo = system.template("mix"), system.template("solo")
    assert (mix.feasible, mix.binding_rows, mix.worst_case_latency_s) == (False, ("deadline",), pytest.approx(17.4))
    assert solo.feasible and solo.worst_case_latency_s == pytest.approx(4.5)
    assert system.selection["selected"] == "solo"
    assert explain_text(compiled.plan, system, compiled.program, "mix").startswith(
        "template mix misses the deadline: its binding may take 17.400 s, above the deadline of 17 s"
    )


# ---------------------------------------------------------------- the fake provider's declared delays


def test_the_fake_sleeps_its_declared_delays(monkeypatch):
    slept = []

    async def sleep(seconds):
        slept.append(seconds)

    monkeypatch.setattr("bamasc.runtime.providers.fake.asyncio.sleep", sleep)
    provider = FakeProvider("f", reply="0123456789", first_token_s=0.25, per_output_token_s=0.5)
    from bamasc.runtime.providers.base import Message

    completion = asyncio.run(provider.complete([Message("user", "hi")], 100, timeout=60))
    assert completion.completion_tokens == 10
    assert slept == [0.25 + 0.5 * 10]
    # A reply that would take the timeout or longer waits out the timeout and fails as one.
    slept.clear()
    with pytest.raises(Exception, match="timed out after 3 s"):
        asyncio.run(provider.complete([Message("user", "hi")], 100, timeout=3))
    assert slept == [3]


def test_make_provider_gives_a_fake_model_its_declared_latency(mix_program):
    provider = make_provider(mix_program.models["quick"])
    assert (provider.first_token_s, provider.per_output_token_s) == (0.2, 0.01)
    verbose = make_provider(mix_program.models["careful"], fake_mode="verbose")
    assert (verbose.first_token_s, verbose.per_output_token_s) == (0.5, 0.02)


# ---------------------------------------------------------------- the guard at run time

# Small delays, so the suite stays quick: a Solver call at most 0.005 + 0.0005 * 100 = 0.055 s, a Critic one
# 0.005 + 0.0005 * 120 = 0.065 s. The fake's replies are far shorter than the caps.
RUN = """
model fast {
  provider = fake
  name     = "fast"
  price    { input = 0  output = 0 }
  tier     = 1
  latency  { first_token = 0.005  per_token = 0.0005 }
}

role Solver {
  max_output = 100
  prompt     = "Solve: {{task}} {{previous?}} {{solution?}} {{feedback?}}"
}

role Critic {
  max_output = 120
  reads      = verdict
  prompt     = "Check: {{task}} {{solution}}. End with CONCLUSION: CORRECT or INCORRECT."
}

topology loop {
  slot solver : Solver [2..2]
  slot critic : Critic [2..2]
  flow {
    drafts = parallel solver(task)
    relay = chain solver(task)
    answer refine solver(task) with critic until approved
  }
}

system s {
  models       = [fast]
  topologies   = [loop]
  budget       = 100
  deadline     = 5
  on_exhausted = best_so_far
}
"""
NO_WAIT = RetryPolicy(max_attempts=3, base_delay=0.0, max_delay=0.0, timeout=30.0)


@pytest.fixture(scope="module")
def run_plan(tmp_path_factory):
    folder = tmp_path_factory.mktemp("run")
    path = folder / "run.bam"
    path.write_text(RUN, encoding="utf-8")
    compiled = compile_file(str(path), plan_dir=str(folder))
    assert compiled.plan is not None, [d.message for d in compiled.diagnostics]
    return compiled


def test_every_task_takes_no_longer_than_the_proven_bound(run_plan, tmp_path, monkeypatch):
    system = run_plan.plan.systems[0]
    template = system.template("loop")
    assert template.worst_case_latency_s == pytest.approx(0.055 * 6 + 0.065 * 2)
    trace_path = tmp_path / "trace.jsonl"
    options = ExecOptions(trace_path=str(trace_path), concurrency=4, retry=NO_WAIT)
    # Providers made from the plan's models, with their declared delays; critics approve at once.
    tasks = [Task(f"echo{i}", f"What is {i} times 7?") for i in range(4)]
    results, _, _ = asyncio.run(run_tasks(run_plan.plan, run_plan.program, None, tasks, options))
    assert [r.calls for r in results] == [6] * 4
    # Critics that always reject, with the same delays: every loop runs to its end.
    rejecting = {"fast": FakeProvider("fast", reply="CONCLUSION: INCORRECT", first_token_s=0.005, per_output_token_s=0.0005)}
    monkeypatch.setattr("bamasc.runtime.execute.make_providers", lambda *args, **kwargs: rejecting)
    tasks = [Task(f"reject{i}", f"What is {i} times 6?") for i in range(3)]
    results, _, _ = asyncio.run(run_tasks(run_plan.plan, run_plan.program, None, tasks, options))
    assert [r.calls for r in results] == [9] * 3
    lines = [json.loads(line) for line in trace_path.read_text(encoding="utf-8").splitlines()]
    task_lines = [line for line in lines if line["type"] == "task"]
    assert len(task_lines) == 7 and {t["status"] for t in task_lines} == {"ok"}
    steps_of = {node.id: node.step for node in template.nodes}
    for task in task_lines:
        assert task["latency_bound_s"] == pytest.approx(template.worst_case_latency_s)
        assert task["deadline_s"] == 5 and task["exhausted"] is None
        # The delay each call declared (what the fake slept: first token plus its output tokens): the slowest per
        # step, summed, is within the bound. Wall time adds the machine's own delays, so it is only checked to be
        # at least the declared delay (the fake slept), never compared with the bound: a loaded machine is slower.
        per_step: dict[int, float] = {}
        for call in (c for c in lines if c["type"] == "call" and c["task_id"] == task["task_id"]):
            declared = 0.005 + 0.0005 * call["completion_tokens"]
            assert call["latency_ms"] / 1000 >= declared - 1e-3, call
            step = steps_of[call["node"]]
            per_step[step] = max(per_step.get(step, 0.0), declared)
        assert sum(per_step.values()) <= template.worst_case_latency_s
        assert task["elapsed_s"] >= sum(per_step.values()) - 1e-3


def _late_system(run_plan, deadline: float, on_exhausted: str):
    system = run_plan.plan.systems[0]
    return replace(system, deadline_s=deadline, on_exhausted=on_exhausted), system.template("loop")


class Collect:
    def __init__(self):
        self.calls = []

    def reserve(self, record):
        return "r"

    def call(self, record):
        self.calls.append(record)


@pytest.mark.parametrize("on_exhausted, status", [("best_so_far", "exhausted"), ("fail", "failed")])
def test_a_deadline_shorter_than_the_bound_stops_the_task(run_plan, on_exhausted, status):
    # 0.07 s leaves time for the parallel step (each call may take 0.055 s), which takes at least
    # 0.005 + 0.0005 * 21 = 0.0155 s: the next call no longer fits.
    system, template = _late_system(run_plan, 0.07, on_exhausted)
    providers = {"fast": FakeProvider("fast", reply="CONCLUSION: INCORRECT", first_token_s=0.005, per_output_token_s=0.0005)}
    trace = Collect()
    run = TaskRun(run_plan.program, system, template, providers, BudgetGuard(system.budget), "t", "What is 6 times 7?", trace, NO_WAIT)
    result = asyncio.run(run.run())
    assert (result.status, result.exhausted, result.deadline_s) == (status, "deadline", 0.07)
    assert (result.output == "CONCLUSION: INCORRECT") == (on_exhausted == "best_so_far")
    assert result.elapsed_s <= 0.07
    skipped = [c for c in trace.calls if c["skipped"]]
    assert [c["node"] for c in skipped] == ["solver[1]@1.chain0"]
    assert re.fullmatch(r"deadline: 0\.0[0-5]\d s left of 0\.07 s, and the attempt may take 0\.055 s", skipped[0]["error"])
    assert sorted(c["node"] for c in trace.calls if not c["skipped"]) == ["solver[0]@0.parallel0", "solver[1]@0.parallel1"]


def test_an_attempt_times_out_at_the_deadline_and_retries_count_against_it(run_plan):
    # The model declares 0.055 s at most, but this one hangs: the timeout is the time left, not the policy's 30 s.
    system, template = _late_system(run_plan, 0.2, "best_so_far")
    providers = {"fast": FakeProvider("fast", first_token_s=30.0)}
    trace = Collect()
    run = TaskRun(run_plan.program, system, template, providers, BudgetGuard(system.budget), "t", "What is 6 times 7?", trace, NO_WAIT)
    result = asyncio.run(run.run())
    assert (result.status, result.exhausted) == ("failed", "deadline")  # nothing finished: no best answer
    attempts = [c for c in trace.calls if not c["skipped"]]
    assert {c["node"] for c in attempts} == {"solver[0]@0.parallel0", "solver[1]@0.parallel1"}
    for attempt in attempts:
        waited = float(re.search(r"timed out after ([0-9.e-]+) s", attempt["error"]).group(1))
        assert waited <= 0.2
    # The retries found no time left: each call's second attempt is skipped, not waited for.
    skipped = [c for c in trace.calls if c["skipped"]]
    assert sorted((c["node"], c["attempt"]) for c in skipped) == [("solver[0]@0.parallel0", 2), ("solver[1]@0.parallel1", 2)]
    assert result.elapsed_s < 30


def test_the_guard_by_its_clock():
    now = [100.0]
    guard = DeadlineGuard(10.0, timeout=60.0, clock=lambda: now[0])
    latency = Latency(first_token_s=1.0, per_output_token_s=0.1)  # 50 tokens: at most 6 s
    assert guard.timeout_for(latency, 50) == 10.0  # it fits; the timeout is the time left
    now[0] = 103.0
    assert guard.timeout_for(latency, 50, wait=0.6) == pytest.approx(6.4)  # after the backoff, 6.4 s are left
    assert guard.timeout_for(latency, 50, wait=1.5) is None  # the backoff would leave too little
    now[0] = 104.0
    assert guard.timeout_for(latency, 50) == 6.0  # exactly fits
    assert guard.timeout_for(latency, 51) is None
    assert guard.refusal(latency, 51) == "deadline: 6.000 s left of 10 s, and the attempt may take 6.100 s"
    roomy = DeadlineGuard(1000.0, timeout=60.0, clock=lambda: now[0])
    assert roomy.timeout_for(latency, 50) == 60.0  # the policy's timeout, when shorter
    free = DeadlineGuard(None, timeout=60.0, clock=lambda: now[0])
    assert free.timeout_for(None, 10**6) == 60.0 and free.left() is None
