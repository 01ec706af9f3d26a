"""Conversations (`converse`): turn order, stopping, lint, the bound by hand, the binder against
brute force, and runs that stay within the bound and, at the worst case, reach it exactly."""

from __future__ import annotations

import asyncio
import random

import pytest

from bamasc.ir.tokens import list_tokens
from bamasc.ir.unroll import unroll
from bamasc.ir.walk import CallRequest, Decision, walk
from bamasc.lint import lint_paths
from bamasc.optimize.statements import Flow
from bamasc.plan.compile import compile_file
from bamasc.metering.guard import BudgetGuard
from bamasc.runtime.interpreter import TaskRun
from bamasc.runtime.providers.base import GREEDY, Completion
from bamasc.runtime.providers.fake import FakeProvider
from bamasc.runtime.retry import RetryPolicy
from bamasc.runtime.tokens import safe_prompt_bound
from tests.helpers.conversations import random_conversation
from tests.helpers.milp import assert_binds_like_brute_force, load

NO_WAIT = RetryPolicy(max_attempts=1, base_delay=0.0, max_delay=0.0, timeout=5.0)

# The worked example of docs/language.md ("converse"), with a second, weaker model.
TALK = '''
model strong {
  provider = fake
  name     = "strong"
  price    { input = 2  output = 8 }
  tier     = 1
}
model weak {
  provider   = fake
  name       = "weak"
  price      { input = 0.5  output = 1 }
  tier       = 2
  max_output = 100
}
role Coder {
  max_output = 200
  prompt     = "Code: {{task}} {{transcript?}}"
}
role Reviewer {
  max_output = 50
  reads      = verdict
  prompt     = "Review: {{transcript}}"
}
topology talk {
  slot coder    : Coder    [1..1]
  slot reviewer : Reviewer [1..1]
  flow { answer converse coder(task), reviewer() until reviewer approves max_rounds 2 }
}
system demo {
  models      = [strong, weak]
  topologies  = [talk]
  budget      = %(budget)s
  task_tokens = 100
}
'''

PRICES = {"strong": (2, 8, None), "weak": (0.5, 1, 100)}


def by_hand(coder: str, reviewer: str) -> float:
    """Turn k reads its prompt text (15 and 16 tokens), the task (100) if passed, the caps of
    turns 1..k-1 and their numbering (4, 10, 16 tokens for 1, 2, 3 turns)."""
    turns = [("coder", coder, 15, True, 200), ("reviewer", reviewer, 16, False, 50)] * 2
    total, caps = 0.0, []
    numbering = {0: 0, 1: 4, 2: 10, 3: 16}
    for _, model, prompt, task, role_cap in turns:
        price_in, price_out, model_cap = PRICES[model]
        cap = min(role_cap, model_cap or role_cap)
        tokens_in = prompt + (100 if task else 0) + sum(caps) + numbering[len(caps)]
        total += price_in * tokens_in + price_out * cap
        caps.append(cap)
    return total


def compile_talk(tmp_path, budget):
    path = tmp_path / "talk.bam"
    path.write_text(TALK % {"budget": budget})
    return compile_file(str(path))


def test_the_numbering_of_a_list_is_what_the_interpreter_adds():
    outputs = ["a" * 7] * 12
    shown = "\n\n".join(f"[{i + 1}] {text}" for i, text in enumerate(outputs))
    for n in range(13):
        text = "\n\n".join(f"[{i + 1}] {t}" for i, t in enumerate(outputs[:n]))
        assert len(text.encode()) - 7 * n == list_tokens(n)
    assert list_tokens(12) == len(shown) - 84 == 12 * 4 + 3 + 22


def test_the_compiled_bound_is_the_hand_computed_one(tmp_path):
    result = compile_talk(tmp_path, 7000)
    template = result.plan.systems[0].template("talk")
    assert [(n.id, n.input_tokens) for n in template.nodes] == [
        ("coder[0]@0.turn0", 115), ("reviewer[0]@0.turn0", 220), ("coder[0]@0.turn1", 375), ("reviewer[0]@0.turn1", 482),
    ]
    assert template.worst_case_cost == pytest.approx(6384.0) == pytest.approx(by_hand("strong", "strong"))


@pytest.mark.parametrize("budget", [1000, 2000, 2500, 4700, 5000, 6383, 6384, 9000])
def test_every_budget_binds_at_the_hand_computed_bound(tmp_path, budget):
    """The MILP's price of the chosen binding is the hand-computed one (a lower one is BAM504)."""
    result = compile_talk(tmp_path, budget)
    assert not [d for d in result.diagnostics if d.code == "BAM504"]
    template = result.plan.systems[0].template("talk") if result.plan else None
    cheapest = min(by_hand(c, r) for c in PRICES for r in PRICES)
    if budget < cheapest:
        assert template is None or not template.feasible
        return
    models = {seat.slot: seat.model for seat in template.binding}
    assert template.worst_case_cost == pytest.approx(by_hand(models["coder"], models["reviewer"]))
    assert template.worst_case_cost <= budget
    # The strongest binding that fits: both strong if they fit, else one strong seat if one fits.
    fits = {(c, r) for c in PRICES for r in PRICES if by_hand(c, r) <= budget}
    strong_seats = max(((c, r).count("strong") for c, r in fits))
    assert (models["coder"], models["reviewer"]).count("strong") == strong_seats


# ---------------------------------------------------------------- the walk


def program_of(tmp_path, flow: str, slots: str, roles: str = ""):
    source = TALK % {"budget": 100000}
    source = source.replace(
        "  slot coder    : Coder    [1..1]\n  slot reviewer : Reviewer [1..1]\n"
        "  flow { answer converse coder(task), reviewer() until reviewer approves max_rounds 2 }",
        slots + "\n  flow {\n" + flow + "\n  }",
    ) + roles
    path = tmp_path / "t.bam"
    path.write_text(source)
    return path


def drive(topology, counts, answer):
    """The ids of the calls a walk makes when `answer(decision)` answers each decision."""
    steps, made, reply = walk(topology, counts), [], None
    while True:
        try:
            request = steps.send(reply)
        except StopIteration as done:
            return made, done.value
        if isinstance(request, Decision):
            reply = answer(request)
        else:
            assert isinstance(request, CallRequest)
            made.append(request.id)
            reply = None


def test_turns_go_round_every_instance_of_each_speaker_in_order(tmp_path):
    path = program_of(
        tmp_path, "    answer converse coder(task), reviewer() until reviewer approves max_rounds 2",
        "  slot coder : Coder [1..2]\n  slot reviewer : Reviewer [1..2]",
    )
    topology = load(tmp_path, path.read_text()).topologies["talk"]
    made, value = drive(topology, {"coder": 2, "reviewer": 2}, lambda d: False)
    assert made == [
        "coder[0]@0.turn0", "coder[1]@0.turn0", "reviewer[0]@0.turn0", "reviewer[1]@0.turn0",
        "coder[0]@0.turn1", "coder[1]@0.turn1", "reviewer[0]@0.turn1", "reviewer[1]@0.turn1",
    ]
    assert value.many and value.nodes == tuple(made)
    # The second reviewer approves in round 0: nothing after it runs.
    made, value = drive(topology, {"coder": 2, "reviewer": 2}, lambda d: d.of == "reviewer[1]@0.turn0")
    assert made[-1] == "reviewer[1]@0.turn0" and len(made) == 4 and value.nodes == tuple(made)
    calls = unroll(topology, {"coder": 2, "reviewer": 2}).calls
    assert [len(c.inputs) for c in calls] == list(range(8))  # turn k reads turns 1..k-1
    assert [c.condition for c in calls[:3]] == [None, None, None]
    assert {c.condition for c in calls[3:]} == {"reviewer has not approved yet"}


def test_a_marker_stops_after_any_turn(tmp_path):
    path = program_of(
        tmp_path, '    answer converse coder(task), reviewer() until "DONE" max_rounds 3',
        "  slot coder : Coder [1..1]\n  slot reviewer : Reviewer [1..1]",
    )
    topology = load(tmp_path, path.read_text()).topologies["talk"]
    asked = []

    def answer(decision):
        asked.append((decision.kind, decision.marker))
        return decision.of == "coder[0]@0.turn1"

    made, _ = drive(topology, {"coder": 1, "reviewer": 1}, answer)
    assert made == ["coder[0]@0.turn0", "reviewer[0]@0.turn0", "coder[0]@0.turn1"]
    assert set(asked) == {("mentions", "DONE")}
    calls = unroll(topology, {"coder": 1, "reviewer": 1}).calls
    assert len(calls) == 6 and calls[0].condition is None
    assert {c.condition for c in calls[1:]} == {"no turn has said 'DONE' yet"}


# ---------------------------------------------------------------- lint


def lint(tmp_path, flow, slots="  slot coder : Coder [1..1]\n  slot reviewer : Reviewer [1..1]", roles=""):
    path = program_of(tmp_path, flow, slots, roles)
    return [(d.code, d.severity, d.span.line, d.span.col, d.message) for d in lint_paths([str(path)]).diagnostics]


def test_a_conversation_without_a_round_limit_is_an_error_at_it(tmp_path):
    found = lint(tmp_path, "    answer converse coder(task), reviewer() until reviewer approves")
    assert [(code, line, col) for code, _, line, col, _ in found] == [("BAM311", 28, 12)]
    assert "no round limit" in found[0][4]


@pytest.mark.parametrize(
    "flow, code, at",
    [
        ("    answer converse coder(task), reviewer() until reviewer approves max_rounds 0", "BAM207", " 0"),
        ("    answer converse coder(task), reviewer() max_rounds 17", "BAM207", " 17"),
        ("    answer converse coder(task), coder(task) max_rounds 2", "BAM307", " coder(task) max"),
        ('    answer converse coder(task), reviewer() until "" max_rounds 2', "BAM307", ' ""'),
        ("    answer converse coder(task) until reviewer approves max_rounds 2", "BAM312", " reviewer approves"),
        ("    answer converse coder(task), reviewer() until critic approves max_rounds 2", "BAM105", " critic"),
        ("    answer converse coder(task), reviewer() until reviewer approves max_rounds 1", "BAM312", " reviewer approves"),
        ("    answer converse reviewer(), coder(task) max_rounds 2", "BAM212", " reviewer()"),
    ],
)
def test_bad_conversations_are_reported_where_they_go_wrong(tmp_path, flow, code, at):
    found = lint(tmp_path, flow)
    # The flow is line 28 of the file; the diagnostic points at the word after `at`'s space.
    assert (code, 28, flow.index(at) + 2) in [(c, line, col) for c, _, line, col, _ in found], found


def test_only_the_last_turn_can_stop_it_is_a_warning_and_more_rounds_are_fine(tmp_path):
    found = lint(tmp_path, "    answer converse coder(task), reviewer() until reviewer approves max_rounds 1")
    assert [(code, severity) for code, severity, *_ in found] == [("BAM312", "warning")]
    assert lint(tmp_path, "    answer converse coder(task), reviewer() until reviewer approves max_rounds 2") == []
    # Two reviewers: the first may approve before the second's turn.
    two = "  slot coder : Coder [1..1]\n  slot reviewer : Reviewer [1..2]"
    assert lint(tmp_path, "    answer converse coder(task), reviewer() until reviewer approves max_rounds 1", two) == []


def test_the_transcript_is_required_only_where_a_turn_always_came_before(tmp_path):
    flow = "    answer converse coder(task), reviewer() max_rounds 2"
    assert lint(tmp_path, flow) == []  # the reviewer always follows the coder
    found = lint(tmp_path, flow, "  slot coder : Coder [0..1]\n  slot reviewer : Reviewer [1..1]")
    assert [(code, col) for code, _, _, col, _ in found] == [("BAM212", flow.index("reviewer()") + 1)]
    assert "first call of 'reviewer'" in found[0][4]


def test_too_many_turns_and_a_marker_no_one_can_write(tmp_path):
    flow = "    answer converse coder(task), reviewer() max_rounds 16"
    found = lint(tmp_path, flow, "  slot coder : Coder [1..9]\n  slot reviewer : Reviewer [1..8]")
    assert [(code, col) for code, _, _, col, _ in found] == [("BAM207", flow.index("16") + 1)]
    assert "272 turns" in found[0][4]
    stopped = TALK % {"budget": 1}
    stopped = stopped.replace('prompt     = "Code:', 'stop = ["END"]\n  prompt     = "Code:')
    stopped = stopped.replace('reads      = verdict', 'reads      = verdict\n  stop = ["ND", "x"]')
    stopped = stopped.replace("until reviewer approves max_rounds 2", 'until "THE END" max_rounds 2')
    path = tmp_path / "s.bam"
    path.write_text(stopped)
    found = [(d.code, d.span.line, d.message) for d in lint_paths([str(path)]).diagnostics if d.code == "BAM312"]
    assert len(found) == 1 and "no speaker can ever write" in found[0][2]
    path.write_text(stopped.replace('stop = ["ND", "x"]', 'stop = ["x"]'))
    assert not [d for d in lint_paths([str(path)]).diagnostics if d.code == "BAM312"]


# ---------------------------------------------------------------- the binder against brute force


@pytest.mark.parametrize("seed", range(40))
def test_binding_a_conversation_equals_brute_force(tmp_path, seed):
    source = random_conversation(random.Random(seed))
    program = load(tmp_path, source)
    system = program.systems["s"]
    topology = program.topologies["t"]
    flow = Flow(program, system, topology)
    ranges = tuple(range(slot.lo, slot.hi + 1) for slot in topology.slots)
    conversation = next(i for i, st in enumerate(topology.flow) if type(st.expr).__name__ == "Converse")
    statement = flow.statement(conversation, ranges)
    # The numbering grows with the turns before, so a smaller count is not the largest minus its
    # missing seats: the statement keeps one unroll per count vector ("rotating").
    if len(statement.units) > 1 or any(len(r) > 1 for r in ranges):
        assert not statement.padded or all(len(ranges[s]) == 1 for s in statement.slots)
    assert_binds_like_brute_force(program, source)


# ---------------------------------------------------------------- runs


class RandomProvider:
    """Replies of random length up to the cap, approving, rejecting or saying the marker at random."""

    def __init__(self, name: str, rng: random.Random):
        self.name, self.rng = name, rng

    def count_prompt_tokens(self, messages):
        return safe_prompt_bound(messages)

    async def complete(self, messages, max_tokens, *, timeout, decoding=GREEDY, expect="text"):
        text = self.rng.choice(["CONCLUSION: CORRECT", "CONCLUSION: INCORRECT", "LGTM", "", "```python\npass\n```"])
        text = (text + "y" * self.rng.randint(0, max_tokens))[: self.rng.randint(1, max_tokens)]
        return Completion(text, self.count_prompt_tokens(messages), len(text.encode()), "stop")

    async def aclose(self):
        return None


def run(program, system_plan, template, providers, task):
    guard = BudgetGuard(system_plan.budget)
    result = asyncio.run(TaskRun(program, system_plan, template, providers, guard, "t", task, None, NO_WAIT).run())
    return result, guard


@pytest.mark.parametrize("seed", range(30))
def test_runs_stay_within_the_bound_and_the_worst_case_reaches_it(tmp_path, seed):
    rng = random.Random(1000 + seed)
    source = random_conversation(rng, reader=False)
    path = tmp_path / "t.bam"
    path.write_text(source)
    compiled = compile_file(str(path))
    if compiled.plan is None:
        pytest.skip("no binding fits this budget")
    program = compiled.program
    system_plan = compiled.plan.systems[0]
    task = "t" * 40  # exactly task_tokens tokens for the fake's tokenizer (one a byte)
    for template in (t for t in system_plan.templates if t.feasible):
        bound = template.worst_case_cost
        assert bound <= system_plan.budget + 1e-9
        # The verbose fake never approves, never says the marker and fills every cap: the bound exactly.
        verbose = {name: FakeProvider(name, mode="verbose") for name in program.systems[system_plan.name].models}
        result, guard = run(program, system_plan, template, verbose, task)
        assert result.status == "ok" and result.calls == len(template.nodes)
        assert guard.charged == pytest.approx(bound, rel=1e-9, abs=1e-6), source
        for trial in range(8):
            providers = {name: RandomProvider(name, random.Random(f"{seed}:{trial}:{name}")) for name in program.systems[system_plan.name].models}
            result, guard = run(program, system_plan, template, providers, task[: rng.randint(0, 40)])
            assert result.status == "ok", (source, result.error)
            assert guard.charged <= bound + 1e-6, source


def test_dry_run_drives_the_worst_case(tmp_path, capsys):
    from bamasc.cli import main

    path = tmp_path / "talk.bam"
    path.write_text(TALK % {"budget": 7000})
    plan = tmp_path / "talk.plan.json"
    assert main(["compile", str(path), "-o", str(plan)]) == 0
    capsys.readouterr()
    assert main(["exec", str(plan), "--task", "q" * 100, "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "worst spent 6384.0 µ$, bound 6384.0 µ$" in out
    assert out.count("@0.turn") == 4
