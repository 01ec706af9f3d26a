"""The worked example of docs/language.md ("plan ... dynamic"): the compiler's bound equals the
one written out by hand, and bad step cards fail their task with the card quoted."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import pytest

from bamasc.ir.walk import walk
from bamasc.plan.compile import compile_file
from bamasc.metering.guard import BudgetGuard
from bamasc.runtime.interpreter import TaskRun
from bamasc.runtime.providers.fake import FakeProvider
from bamasc.runtime.retry import RetryPolicy

DOC = Path(__file__).resolve().parents[2] / "docs" / "language.md"


def worked_example() -> str:
    """The example's source, as the reference shows it."""
    section = DOC.read_text(encoding="utf-8").split("### `plan P(args) using S, T max_steps n dynamic")[1]
    return re.search(r"```bam\n(.*?)```", section, re.DOTALL).group(1)


def compiled(tmp_path, source: str, budget: float | None = None):
    path = tmp_path / "t.bam"
    path.write_text(source)
    return compile_file(str(path), budget=budget)


def test_the_bound_is_the_one_worked_by_hand(tmp_path):
    result = compiled(tmp_path, worked_example())
    template = result.plan.systems[0].template("t")
    cost = {node.id: node.cost for node in template.nodes}
    tokens = {node.id: (node.input_tokens, node.output_tokens) for node in template.nodes}
    # planner: "Plan " + " for " + 8 of framing = 18, the task 100, the seat list "- a (role A)\n- b (role B)" 25.
    assert tokens["planner[0]@0.plan"] == (18 + 100 + 25, 60)
    # step 1 on either seat: 13 of text, the task, the plan and the step card (each at the plan's cap).
    assert tokens["a[0]@0.a.step0"] == (13 + 100 + 60 + 60, 40)
    assert tokens["b[0]@0.b.step0"] == (233, 20)
    # step 2 reads step 1, which one seat made: at most max(40, 20) tokens, numbered "[1] " (4).
    assert tokens["a[0]@0.a.step1"][0] == tokens["b[0]@0.b.step1"][0] == 233 + 40 + 4
    assert cost == {
        "planner[0]@0.plan": 143 + 2 * 60,
        "a[0]@0.a.step0": 233 + 2 * 40,
        "b[0]@0.b.step0": 233 + 2 * 20,
        "a[0]@0.a.step1": 277 + 2 * 40,
        "b[0]@0.b.step1": 277 + 2 * 20,
    }
    # The planner, then each step at its costliest seat (a both times), less its card, and the
    # plan's 60 tokens once for both cards: 263 + 253 + 297 + 60.
    assert template.worst_case_cost == pytest.approx(873.0)
    assert [d.worst_case_branch for d in template.decisions] == ["a", "a"]
    assert sum(cost.values()) > 873  # summing the seats would not fit the budget of 873
    tight = compiled(tmp_path, worked_example(), budget=872.0)
    assert "its cheapest binding costs 873.0 µ$" in tight.diagnostics[0].message


class Calls:
    """A trace that keeps the node of each call made."""

    def __init__(self):
        self.nodes = []

    def reserve(self, record):
        return None

    def call(self, record):
        self.nodes.append(record["node"])


def run_with(result, reply: str, trace=None):
    system = result.plan.systems[0]
    template = system.template("t")
    providers = {name: FakeProvider(name, reply=reply) for name in result.program.models}
    policy = RetryPolicy(max_attempts=1, base_delay=0.0, max_delay=0.0, timeout=5.0)
    task = TaskRun(result.program, system, template, providers, BudgetGuard(system.budget), "t", "task", trace, policy)
    return asyncio.run(task.run())


@pytest.mark.parametrize(
    "cards, complaint",
    [
        ('[{"step": "go", "by": "c"}]', 'step 1 is given to "c", which is none of the seats (a, b): {"step": "go", "by": "c"}'),
        ('[{"step": "go", "by": 5}]', "step 1 is given to 5, which is none of the seats"),
        ('[{"step": "go", "reads": [1]}]', 'step 1 reads [1], but it may read no step (it is the first): {"step": "go", "reads": [1]}'),
        ('[{"step": "go"}, {"step": "on", "reads": [2]}]', 'step 2 reads [2], but it may read steps 1 to 1: {"step": "on", "reads": [2]}'),
        ('[{"step": "go"}, {"step": "on", "reads": [0]}]', "step 2 reads [0], but it may read steps 1 to 1"),
        ('[{"step": "go"}, {"step": "on", "reads": "1"}]', 'step 2 reads "1", but it may read steps 1 to 1'),
        ('[{"step": "go"}, {"step": "on", "reads": [true]}]', "step 2 reads [true]"),
    ],
)
def test_a_card_naming_what_the_plan_lacks_fails_the_task_with_the_card_quoted(tmp_path, cards, complaint):
    outcome = run_with(compiled(tmp_path, worked_example()), cards)
    assert outcome.status == "error"
    assert complaint in outcome.error
    assert outcome.error.startswith("malformed plan from planner[0]@0.plan: ")


def test_a_seat_with_no_instance_is_not_a_seat(tmp_path):
    source = worked_example().replace("slot b       : B       [1..1]", "slot b       : B       [0..1]\n  require count(b) <= 0")
    result = compiled(tmp_path, source)
    outcome = run_with(result, '[{"step": "go", "by": "b"}]')
    assert outcome.status == "error" and "none of the seats (a)" in outcome.error
    # The planner is told so: its prompt lists only the seats that exist.
    planner = next(walk(result.program.topologies["t"], {"planner": 1, "a": 1, "b": 0}))
    assert dict(planner.inputs)["seats"].text == "- a (role A)"


def test_cards_without_choices_run_each_step_on_the_first_seat_reading_the_step_before(tmp_path):
    calls = Calls()
    outcome = run_with(compiled(tmp_path, worked_example()), '["go", {"step": "on"}]', calls)
    assert outcome.status == "ok", outcome
    assert calls.nodes == ["planner[0]@0.plan", "a[0]@0.a.step0", "a[0]@0.a.step1"]


@pytest.mark.parametrize("reads, shown", [("[]", False), ("[1]", True)])
def test_steps_run_where_the_cards_say_reading_what_they_say(tmp_path, monkeypatch, reads, shown):
    prompts = []
    complete = FakeProvider.complete

    async def recording(self, messages, max_tokens, **options):
        prompts.append(messages[-1].content)
        return await complete(self, messages, max_tokens, **options)

    monkeypatch.setattr(FakeProvider, "complete", recording)
    calls = Calls()
    cards = '[{"step":"go","by":"b"},{"step":"on","by":"a","reads":%s}]' % reads  # within the planner's 60
    outcome = run_with(compiled(tmp_path, worked_example()), cards, calls)
    assert outcome.status == "ok", outcome
    assert calls.nodes == ["planner[0]@0.plan", "b[0]@0.b.step0", "a[0]@0.a.step1"]
    # The fixed reply is every call's output, step 1's too, cut to b's cap of 20 tokens.
    assert prompts[2].endswith(" on [1] " + cards[:20]) is shown
    assert prompts[0].endswith("for - a (role A)\n- b (role B)")
