"""The flow walker composes the combinators' units: the calls and decisions it yields.

A toy combinator added in one file is tests/test_extension_points.py.
"""

from __future__ import annotations

import os

from bamasc.ir.walk import EVERY, CallGroup, CallRequest, Decision, FlowValue, walk
from bamasc.plan.compile import compile_file
from tests.conftest import ROOT

STAGES = os.path.join(ROOT, "tests", "fixtures", "stages")


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
