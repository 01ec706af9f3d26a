"""The flow walker is the only code that knows what a combinator calls.

A toy combinator, `twice(x)`, is added here in one place (a walker method):
the unroller's bound, the plan and the interpreter's run all see its calls.
"""

from __future__ import annotations

import asyncio
import os

import pytest

from bamasc.ir import walk as walk_module
from bamasc.ir.unroll import unroll
from bamasc.ir.walk import EVERY, CallGroup, CallRequest, Decision, FlowValue, one, walk
from bamasc.optimize.bind import bind_template
from bamasc.plan.build import template_plan
from bamasc.plan.compile import compile_file
from bamasc.records import record, replace
from bamasc.runtime.guard import BudgetGuard
from bamasc.runtime.interpreter import TaskRun
from bamasc.runtime.providers.fake import FakeProvider
from bamasc.runtime.retry import RetryPolicy
from bamasc.runtime.trace import TraceWriter
from bamasc.syntax import ast
from tests.conftest import ROOT

STAGES = os.path.join(ROOT, "tests", "fixtures", "stages")


@record
class Twice:
    """`twice(solver(task))`: the call, then the same seat again reading its first answer."""

    call: ast.SlotCall
    span: object = None


def _twice(self, node: Twice):
    base = self.args(node.call)
    first = self.call(node.call.slot, 0, "first", base, None, "twice")
    yield first
    second = self.call(node.call.slot, 0, "second", base + (("previous", one(first.id)),), None, "twice")
    yield second
    return one(second.id)


class Collect(TraceWriter):
    def __init__(self):
        super().__init__(None)
        self.calls = []

    def call(self, entry):
        self.calls.append(entry)


@pytest.fixture
def toy(monkeypatch):
    """The gsm8k program with template `linear` flowing through `twice(executor(task))`."""
    monkeypatch.setattr(walk_module._Walker, "_twice", _twice, raising=False)
    compiled = compile_file(os.path.join(ROOT, "examples", "gsm8k.bam"), system="gsm8k")
    program = compiled.program
    linear = program.topologies["linear"]
    (statement,) = [s for s in linear.flow if isinstance(s, ast.AnswerStmt)] or [linear.flow[-1]]
    call = ast.SlotCall("executor", (ast.Ident("task", statement.span),), statement.span, statement.span)
    program.topologies["linear"] = replace(linear, flow=(ast.AnswerStmt(Twice(call), statement.span),))
    # One seat makes both calls; the system's floor of distinct agents would rule that out.
    program.systems["gsm8k"] = replace(program.systems["gsm8k"], min_agents=1)
    return program


def test_a_toy_combinator_written_once_is_bound_planned_and_run(toy):
    program = toy
    system = program.systems["gsm8k"]
    counts = {slot.name: slot.hi if isinstance(slot.hi, int) else slot.lo for slot in program.topologies["linear"].slots}
    unrolled = unroll(program.topologies["linear"], counts)
    assert [c.id for c in unrolled.calls] == ["executor[0]@0.first", "executor[0]@0.second"]
    assert unrolled.calls[1].inputs == ("executor[0]@0.first",)

    binding = bind_template(program, system, "linear")
    assert binding.feasible
    plan = template_plan(binding, program)
    assert [n.id for n in plan.nodes] == ["executor[0]@0.first", "executor[0]@0.second"]
    first, second = plan.nodes
    # The second call's bound holds the first call's whole output cap.
    assert second.input_tokens == first.input_tokens + first.output_tokens
    assert plan.worst_case_cost == pytest.approx(first.cost + second.cost)

    compiled = compile_file(os.path.join(ROOT, "examples", "gsm8k.bam"), system="gsm8k")
    system_plan = compiled.plan.systems[0]
    trace = Collect()
    providers = {name: FakeProvider(name, mode="echo") for name in program.models}
    guard = BudgetGuard(system_plan.budget)
    result = asyncio.run(TaskRun(program, system_plan, plan, providers, guard, "t1", "What is 6 times 7?", trace).run())
    assert result.status == "ok", result
    assert [c["node"] for c in trace.calls] == ["executor[0]@0.first", "executor[0]@0.second"]
    assert result.calls == 2
    assert result.cost <= plan.worst_case_cost


def test_without_the_method_the_combinator_is_unknown_to_both(toy, monkeypatch):
    monkeypatch.delattr(walk_module._Walker, "_twice")
    with pytest.raises(AttributeError):
        unroll(toy.topologies["linear"], {"executor": 1})


def _requests(topology, counts, answers):
    """Drive the walker by hand: every request it makes, answering decisions from `answers`."""
    seen, reply, steps = [], None, walk(topology, counts)
    while True:
        try:
            request = steps.send(reply)
        except StopIteration as done:
            return seen, done.value
        seen.append(request)
        if isinstance(request, Decision):
            reply = answers(request)
        elif isinstance(request, CallGroup):
            reply = [None] * len(request.calls)
        else:
            reply = None


def _program(name):
    return compile_file(os.path.join(STAGES, name)).program


def test_an_early_approval_ends_refine_and_its_answer_is_that_draft():
    program = _program("combinators.bam")
    (name,) = [t for t, topo in program.topologies.items() if any(type(s.expr).__name__ == "Refine" for s in topo.flow)][:1]
    topology = program.topologies[name]
    counts = {slot.name: 3 for slot in topology.slots}
    every, answer_every = _requests(topology, counts, lambda d: EVERY)
    approve, answer_approve = _requests(topology, counts, lambda d: True)
    calls = [r.id for r in approve if isinstance(r, CallRequest)]
    assert [r.id for r in every if isinstance(r, CallRequest)][: len(calls)] == calls
    assert len(calls) < len([r for r in every if isinstance(r, CallRequest)])
    assert answer_approve.nodes == (calls[0],) and len(answer_every.nodes) > 1 and answer_every.one_of


def test_a_plan_with_fewer_steps_makes_only_those_and_the_unroller_takes_the_most():
    program = _program("combinators.bam")
    plans = [t for t, topo in program.topologies.items() if any(type(s.expr).__name__ == "Plan" for s in topo.flow)]
    topology = program.topologies[plans[0]]
    counts = {slot.name: 2 for slot in topology.slots}
    every, _ = _requests(topology, counts, lambda d: EVERY)
    one_step, _ = _requests(topology, counts, lambda d: 1 if d.kind == "steps" else True)
    steps = [r for r in one_step if isinstance(r, CallRequest) and ".step" in r.id]
    assert [s.id for s in steps] == [f"{topology.flow[0].expr.executor.name}[0]@0.step0.0"]
    limit = next(d.limit for d in every if isinstance(d, Decision) and d.kind == "steps")
    assert len([r for r in every if isinstance(r, CallRequest) and ".step0." in r.id]) == limit


def test_a_vote_is_the_winner_at_run_time_and_any_draft_when_unrolled():
    program = _program("combinators.bam")
    votes = [t for t, topo in program.topologies.items() if any(type(s.expr).__name__ == "Vote" for s in topo.flow)]
    topology = program.topologies[votes[0]]
    counts = {slot.name: 3 for slot in topology.slots}
    every, answer_every = _requests(topology, counts, lambda d: EVERY)
    _, answer_won = _requests(topology, counts, lambda d: d.among[-1] if d.kind == "majority" else True)
    assert answer_every.one_of and len(answer_every.nodes) == 3
    assert answer_won.nodes == (answer_every.nodes[-1],)
    assert FlowValue(nodes=answer_won.nodes, one_of=True) == answer_won
