"""`route`: the walker runs one branch, the unroller every branch, and the bound takes the costliest.

The hand-computed case: one model at 1 µ$ per input token and 2 µ$ per output
token (1 and 2 USD per million), task_tokens = 100, and each prompt's fixed
text counted one token per byte plus 8 for the message (ir/tokens.py):

    router   "Route: {{task}}"     7 + 8 + 100 = 115 in,  4 out:  115 + 8   = 123
    a        "A {{task}}"          2 + 8 + 100 = 110 in, 50 out:  110 + 100 = 210
    b, 1st   "W {{task}}{{previous?}}"  2 + 8 + 100 = 110 in, 30 out: 110 + 60 = 170
    b, 2nd   the same and the 1st's 30 tokens: 140 in, 30 out:    140 + 60  = 200
    otherwise: the task itself, no call                                       0

    worst case = router + max(a, b, otherwise) = 123 + max(210, 370, 0) = 493 µ$
    (the sum over every call would be 123 + 210 + 370 = 703 µ$)
"""

from __future__ import annotations

import pytest

from bamasc.ir.alternatives import Choice, worst_case
from bamasc.ir.unroll import unroll
from bamasc.ir.walk import CallGroup, Decision, walk
from bamasc.plan.compile import compile_file

SOURCE = '''
model one { provider = fake  name = "one"  price { input = 1  output = 2 }  tier = 1 }
role Router { max_output = 4  prompt = "Route: {{task}}" }
role A { max_output = 50  prompt = "A {{task}}" }
role W { max_output = 30  prompt = "W {{task}}{{previous?}}" }
topology t {
  slot router : Router [1..1]
  slot a      : A      [1..1]
  slot w      : W      [2..2]
  flow {
    answer route router(task) {
      a: a(task)
      b: chain w(task)
      otherwise: task
    }
  }
}
system s { models = [one]  topologies = [t]  budget = 493  task_tokens = 100 }
'''


@pytest.fixture()
def compiled(tmp_path):
    path = tmp_path / "route.bam"
    path.write_text(SOURCE)
    result = compile_file(str(path))
    assert result.plan is not None, [d.message for d in result.diagnostics]
    return result


def test_the_hand_computed_bound_equals_the_compilers(compiled):
    template = compiled.plan.systems[0].template("t")
    assert template.feasible  # the budget is exactly the bound: the sum (703) would not fit
    assert template.worst_case_cost == pytest.approx(123 + max(210, 170 + 200, 0))
    costs = {node.id: node.cost for node in template.nodes}
    assert costs == pytest.approx({
        "router[0]@0.route": 123, "a[0]@0.a.call": 210, "w[1]@0.b.chain0": 170, "w[0]@0.b.chain1": 200,
    })
    (decision,) = template.decisions
    assert decision.id == "router[0]@0.route" and decision.fallback == "otherwise"
    assert decision.worst_case_branch == "b"
    assert {b.name: b.cost for b in decision.branches} == pytest.approx({"a": 210, "b": 370, "otherwise": 0})
    assert {b.name: b.nodes for b in decision.branches}["b"] == ("w[1]@0.b.chain0", "w[0]@0.b.chain1")


def test_one_more_token_of_budget_is_not_needed_and_one_less_is_infeasible(tmp_path):
    path = tmp_path / "route.bam"
    path.write_text(SOURCE.replace("budget = 493", "budget = 492.9"))
    result = compile_file(str(path))
    assert result.plan is None or not result.plan.systems[0].template("t").feasible


def _drive(program, choose):
    """The walker driven as the interpreter drives it: every call made, each route answered by `choose`."""
    made, reply = [], None
    steps = walk(program.topologies["t"], {"router": 1, "a": 1, "w": 2})
    while True:
        try:
            request = steps.send(reply)
        except StopIteration as done:
            return made, done.value
        if isinstance(request, Decision):
            reply = choose(request) if request.kind == "branch" else True
        elif isinstance(request, CallGroup):
            made += [c.id for c in request.calls]
            reply = [None] * len(request.calls)
        else:
            made.append(request.id)
            reply = None


@pytest.mark.parametrize("branch, calls", [
    ("a", ["router[0]@0.route", "a[0]@0.a.call"]),
    ("b", ["router[0]@0.route", "w[1]@0.b.chain0", "w[0]@0.b.chain1"]),
    ("otherwise", ["router[0]@0.route"]),
])
def test_a_run_makes_only_the_chosen_branchs_calls(compiled, branch, calls):
    made, value = _drive(compiled.program, lambda decision: branch)
    assert made == calls
    unrolled = unroll(compiled.program.topologies["t"], {"router": 1, "a": 1, "w": 2})
    assert set(made) <= {c.id for c in unrolled.calls}  # every call made is a node of the proven graph
    assert value.task == (branch == "otherwise")


def test_the_unroller_tags_every_branch_call_with_its_alternative(compiled):
    unrolled = unroll(compiled.program.topologies["t"], {"router": 1, "a": 1, "w": 2})
    tags = {c.id: c.alternative for c in unrolled.calls}
    assert tags["router[0]@0.route"] == ()
    assert tags["a[0]@0.a.call"] == (("router[0]@0.route", "a"),)
    assert tags["w[0]@0.b.chain1"] == (("router[0]@0.route", "b"),)
    assert unrolled.choices == (Choice("router[0]@0.route", (), ("a", "b", "otherwise"), "otherwise"),)


def test_nested_alternatives_take_the_costliest_path():
    outer, inner = "r[0]@0.route", "q[0]@0.x.route"
    amounts = [
        ((), 1.0),
        (((outer, "x"),), 2.0),  # the inner router
        (((outer, "x"), (inner, "p")), 10.0),
        (((outer, "x"), (inner, "q")), 3.0),
        (((outer, "y"),), 11.0),
    ]
    worst = worst_case(amounts)
    assert worst.total == 1.0 + max(2.0 + max(10.0, 3.0), 11.0)
    assert worst.chosen == {inner: "p", outer: "x"}
    assert worst.on_path(((outer, "x"), (inner, "p"))) and not worst.on_path(((outer, "y"),))
    # A branch that makes no call costs nothing but still counts as a branch; ties go to the first declared.
    tie = worst_case([(((outer, "y"),), 0.0)], [Choice(outer, (), ("x", "y"), None)])
    assert tie.chosen == {outer: "x"} and tie.total == 0.0


def test_the_deadline_takes_the_slowest_branch_not_the_sum(tmp_path):
    """Each call takes 1 + 0.01·cap s: router 1.04, a 1.5, each w 1.3. The slowest branch is b
    (2.6 s), so the bound is 3.64 s; summing every step would give 5.14 s, past the deadline."""
    source = SOURCE.replace('tier = 1 }', 'tier = 1  latency { first_token = 1  per_token = 0.01 } }').replace(
        "budget = 493", "budget = 1000  deadline = 3.7")
    path = tmp_path / "route.bam"
    path.write_text(source)
    result = compile_file(str(path))
    assert result.plan is not None, [d.message for d in result.diagnostics]
    template = result.plan.systems[0].template("t")
    assert template.feasible
    assert template.worst_case_latency_s == pytest.approx(1.04 + 2 * 1.3)
    (decision,) = template.decisions
    assert {b.name: b.latency_s for b in decision.branches} == pytest.approx({"a": 1.5, "b": 2.6, "otherwise": 0.0})
    tighter = tmp_path / "tighter.bam"
    tighter.write_text(source.replace("deadline = 3.7", "deadline = 3.6"))
    late = compile_file(str(tighter))
    assert late.plan is None or not late.plan.systems[0].template("t").feasible
