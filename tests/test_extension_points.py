"""A new combinator is one class and one grammar rule, and nothing else changes.

`twice S(args)` is written here and only here: its AST record, its grammar rule
with its builder and layout (bamasc.syntax.forms), and its class (what it
checks, calls, passes and shows). Instance 0 drafts; the slot's last instance
writes again, reading the draft (`{{previous}}`). A `.bam` file using it then
lints, formats, shows in the language server's index, symbols and hover,
binds as brute force does with the bound worked out by hand, and runs on the
fake provider within that bound.
"""

from __future__ import annotations

import pytest

import bamasc
from bamasc.combinators import Combinator, register, site, unregister
from bamasc.combinators.requests import one
from bamasc.diagnostics import error
from bamasc.fmt import format_source
from bamasc.lint import lint_paths
from bamasc.lsp.analysis import Analysis
from bamasc.lsp.bounds import COMPUTING
from bamasc.lsp.hover import hover_text
from bamasc.lsp.navigate import document_symbols
from bamasc.optimize import bind
from bamasc.records import record
from bamasc.syntax import ast, forms
from tests.helpers.milp import brute_force, load, objective, same


@record
class TwiceNode:
    call: ast.SlotCall
    span: object = None


class Twice(Combinator):
    node = TwiceNode
    name = "twice"

    def check(self, node: TwiceNode, flow) -> str:
        flow.call(node.call)
        slot = flow.slot(node.call.slot)
        if slot is not None and slot.lo < 1:
            flow.diagnostics.append(error("BAM307", "twice needs a first instance", node.call.span))
        return "single"

    def walk(self, walker, node: TwiceNode):
        slot = node.call.slot
        base = walker.args(node.call)
        first = walker.call(slot, 0, "first", base, None, self.name)
        yield first
        again = walker.call(slot, walker.count(slot) - 1, "again", base + (("previous", one(first.id)),), None, self.name)
        yield again
        return one(again.id)

    def sites(self, node: TwiceNode, optional):
        return [site(node.call, node.call.slot, node.call.span, sometimes=("previous",))]


TWICE = forms.Form(
    "twice",
    '"twice" slot_call',
    lambda transformer, node, children: TwiceNode(transformer.visit(children[0]), transformer.span(node)),
    lambda children, flow: "twice " + flow(children[0]),
)

SOURCE = """\
model strong { provider = fake  name = "strong"  price { input = 3  output = 15 }  tier = 1 }
model cheap { provider = fake  name = "cheap"  price { input = 0.5  output = 1.5 }  tier = 2 }
role Solver { max_output = 40  prompt = "Solve {{task}} {{previous?}}" }
topology t {
  slot solver : Solver [1..2]
  flow {
    best = twice   solver( task )
    answer best
  }
}
system s { models = [strong, cheap]  topologies = [t]  budget = %s  task_tokens = 50  min_agents = 1 }
"""


@pytest.fixture
def twice():
    forms.add_form(TWICE)
    combinator = register(Twice())
    yield
    unregister(combinator)
    forms.remove_form("twice")


def _write(tmp_path, budget: int = 900) -> str:
    path = tmp_path / "twice.bam"
    path.write_text(SOURCE % budget)
    return str(path)


def test_it_lints_and_formats(twice, tmp_path):
    path = _write(tmp_path)
    assert [d.message for d in lint_paths([path]).diagnostics if d.severity == "error"] == []
    formatted = format_source(open(path).read(), path)
    assert "    best = twice solver(task)\n" in formatted
    assert format_source(formatted, path) == formatted


def test_its_names_show_in_the_index_symbols_and_hover(twice, tmp_path):
    path = _write(tmp_path)
    analysis = Analysis(path, {})
    assert not analysis.errors
    line = SOURCE.splitlines().index("    best = twice   solver( task )") + 1
    slot = analysis.index.at(path, line, SOURCE.splitlines()[line - 1].index("solver") + 1)
    assert (slot.kind, slot.name) == ("slot", "solver")
    assert "**slot** `solver` : `Solver` [1..2]" in hover_text(analysis, slot, (COMPUTING, None))
    task = analysis.index.at(path, line, SOURCE.splitlines()[line - 1].index("task") + 1)
    assert (task.kind, task.name) == ("flow", "task")
    (topology,) = [s for s in document_symbols(analysis.loaded.modules[path]) if s.kind == "topology"]
    assert [child.name for child in topology.children] == ["solver", "best"]


def test_its_check_speaks_through_its_class(twice, tmp_path):
    path = tmp_path / "bad.bam"
    path.write_text((SOURCE % 900).replace("[1..2]", "[0..2]"))
    errors = [d for d in lint_paths([str(path)]).diagnostics if d.severity == "error"]
    assert [(d.code, d.message) for d in errors] == [("BAM307", "twice needs a first instance")]


@pytest.mark.parametrize("budget", [300, 900, 3000])
def test_it_binds_as_brute_force_with_the_bound_worked_out_by_hand(twice, tmp_path, budget):
    program = load(tmp_path, SOURCE % budget)
    system = program.systems["s"]
    found = bind.bind_template(program, system, "t", system.budget)
    assert same(objective(found), brute_force(program, system.budget))
    if not found.feasible:
        return
    models = {(seat.slot, seat.instance): program.models[seat.model] for seat in found.seats}
    first, last = models[("solver", 0)], models[("solver", max(i for _, i in models))]
    # A prompt's own text is bounded by its bytes plus 8 tokens for the chat format (ir/tokens.py),
    # the task by task_tokens, and the draft the second call reads by the draft's output cap.
    draft_in = len("Solve  ") + 8 + 50
    again_in = draft_in + 40
    by_hand = (draft_in * first.price_input + 40 * first.price_output
               + again_in * last.price_input + 40 * last.price_output)
    assert found.worst_case_cost == pytest.approx(by_hand)
    assert found.worst_case_cost <= budget


def test_it_runs_on_the_fake_provider_within_its_bound(twice, tmp_path):
    plan = bamasc.load(_write(tmp_path)).compile(system="s")
    assert plan.bound is not None
    for mode in ("echo", "verbose"):
        result = plan.run_sync("What is 6 times 7?", provider=bamasc.providers.fake(mode))
        assert result.status == "ok", result
        assert [call.node for call in result.calls] == ["solver[0]@0.first", f"solver[{plan.templates[0].binding[-1].instance}]@0.again"]
        # The bound at the task's own length (18 bytes, the fake's tokens), below the plan's at task_tokens = 50.
        assert 0 < result.cost <= result.bound < plan.bound
        if mode == "verbose":
            assert result.cost == pytest.approx(result.bound)
