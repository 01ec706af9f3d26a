"""Required placeholders: lint finds a call that cannot fill one, and the interpreter never sends it empty."""

from __future__ import annotations

import asyncio

import pytest

from bamasc.lint import lint_paths
from bamasc.runtime.interpreter import TaskError, TaskRun

HEADER = """
model m {
  provider = fake
  name     = "echo"
  price    { input = 0  output = 0 }
  tier     = 1
}
"""


def lint(tmp_path, body):
    path = tmp_path / "p.bam"
    path.write_text(HEADER + body, encoding="utf-8")
    return [(d.code, d.span.line, d.span.col) for d in lint_paths([str(path)]).diagnostics]


DEBATE = """
role Debater {
  max_output = 64
  prompt     = "Opponent said: {{argument%s}}"
}
topology debate {
  slot first  : Debater [1..1]
  slot second : Debater [1..1]
  flow {
    argument = first(task)
    answer second(argument)
  }
}
"""


def test_a_call_that_cannot_fill_a_required_placeholder_is_reported_at_the_call(tmp_path):
    found = lint(tmp_path, DEBATE % "")
    # line 17 is `argument = first(task)`, whose call has no argument
    assert ("BAM212", 17, 16) in found
    assert not any(code == "BAM212" and line != 17 for code, line, _ in found)


def test_an_optional_placeholder_needs_no_value(tmp_path):
    assert not [f for f in lint(tmp_path, DEBATE % "?") if f[0] == "BAM212"]


def test_chain_gives_previous_only_from_its_second_call(tmp_path):
    body = """
role R {
  max_output = 64
  prompt     = "{{task}} {{previous%s}}"
}
topology t {
  slot r : R [1..3]
  flow {
    answer chain r(task)
  }
}
"""
    assert [f[0] for f in lint(tmp_path, body % "")] == ["BAM212"]
    assert lint(tmp_path, body % "?") == []


def test_refine_and_plan_supply_their_inputs(tmp_path):
    body = """
role Writer  { max_output = 64  prompt = "{{task}} {{solution?}} {{feedback?}}" }
role Critic  { max_output = 64  prompt = "{{task}} {{solution}}" }
role Planner { max_output = 64  prompt = "{{task}} {{feedback?}}" }
role Doer    { max_output = 64  prompt = "{{task}} {{plan}} {{step}} {{previous?}}" }
topology t {
  slot w : Writer [1..2]
  slot c : Critic [1..1]
  slot p : Planner [1..1]
  slot d : Doer [1..2]
  flow {
    draft = refine w(task) with c until approved
    answer plan p(task) using d review c max_steps 3
  }
}
"""
    assert lint(tmp_path, body) == []


def test_an_argument_no_prompt_shows_is_a_warning(tmp_path):
    body = """
role R { max_output = 64  prompt = "Solve: {{task}}" }
topology t {
  slot a : R [1..1]
  slot b : R [1..1]
  flow {
    draft = a(task)
    answer b(task, draft)
  }
}
"""
    result = lint(tmp_path, body)
    assert result == [("BAM213", 15, 20)]


def test_the_interpreter_refuses_to_send_a_required_placeholder_empty():
    run = TaskRun.__new__(TaskRun)  # render needs no plan
    assert run.render("a {{x?}}b", {}) == "a b"
    assert run.render("a {{ x }}", {"x": ""}) == "a "
    with pytest.raises(TaskError, match=r"\{\{x\}\}"):
        run.render("Opponent said: {{x}}", {}, "call 1: ")


def test_every_shipped_file_lints_clean():
    import glob

    from tests.conftest import ROOT

    paths = sorted(glob.glob(f"{ROOT}/examples/*.bam") + glob.glob(f"{ROOT}/stdlib_topologies/*.bam"))
    assert paths
    for path in paths:
        assert lint_paths([path]).diagnostics == [], path
