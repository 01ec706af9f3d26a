"""Silent misroutes are lint warnings at the branch: a branch its router will never name (BAM314) and a value of the
router's output enum that names no branch (BAM315). The rule lint applies is the one the run applies
(`chosen_branch`), so each case is also checked against a reply the schema allows."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings, strategies as st

from bamasc.combinators.route_names import ReplyStrings, chosen_branch
from bamasc.lint import lint_file

HEAD = 'model m {\n  provider = fake\n  name = "steady"\n  price { input = 1.0  output = 4.0 }\n  tier = 1\n}\n'
AGENT = 'role Agent {\n  max_output = 64\n  prompt = "Answer: {{task}}"\n}\n'


def _source(router: str, branches: list[str]) -> str:
    arms = "".join(f"      {name}: agent(task)\n" for name in branches)
    return (HEAD + router + AGENT + "topology desk {\n  slot triage : Triage [1..1]\n  slot agent : Agent [1..1]\n"
            "  flow {\n    answer route triage(task) {\n" + arms + "      otherwise: agent(task)\n    }\n  }\n}\n"
            "system s {\n  models = [m]\n  topologies = [desk]\n  budget = 100000\n  task_tokens = 100\n}\n")


def _schema_router(schema: dict) -> str:
    return ('role Triage {\n  max_output = 16\n  prompt = "Route {{task}}"\n'
            f'  output = json("""{json.dumps(schema)}""")\n}}\n')


def _prompt_router(prompt: str) -> str:
    return f'role Triage {{\n  max_output = 16\n  prompt = "{prompt} {{{{task}}}}"\n}}\n'


def _lint(tmp_path, text: str):
    path = tmp_path / "desk.bam"
    path.write_text(text, encoding="utf-8")
    diagnostics = lint_file(str(path))[2]
    return text.splitlines(), [d for d in diagnostics if d.code in ("BAM314", "BAM315")]


def _at(lines: list[str], diagnostic) -> str:
    """The text under the diagnostic's caret."""
    line = lines[diagnostic.span.line - 1]
    return line[diagnostic.span.col - 1: diagnostic.span.end_col - 1]


TEAM = {"type": "object", "properties": {"team": {"enum": ["billing", "refunds", "technical"]}},
        "required": ["team"]}


def test_an_enum_value_and_a_branch_that_differ_by_a_letter_are_both_reported_at_the_branch(tmp_path):
    lines, found = _lint(tmp_path, _source(_schema_router(TEAM), ["billing", "refund", "technical"]))
    assert sorted((d.code, d.severity, _at(lines, d)) for d in found) == [
        ("BAM314", "warning", "refund"), ("BAM315", "warning", "refund")]
    never = next(d for d in found if d.code == "BAM314")
    assert "can never run" in never.message and never.hint == "did you mean 'refunds'?"
    unrouted = next(d for d in found if d.code == "BAM315")
    assert "'refunds'" in unrouted.message and "takes the 'otherwise' branch" in unrouted.message
    # What lint says is what the run does: the reply the schema allows goes to `otherwise`.
    assert chosen_branch('{"team":"refunds"}', ("billing", "refund", "technical"), "") == ""


def test_a_route_that_matches_its_enum_lints_clean(tmp_path):
    assert _lint(tmp_path, _source(_schema_router(TEAM), ["billing", "refunds", "technical"]))[1] == []


def test_an_enum_value_no_branch_takes_is_reported_at_the_fallback(tmp_path):
    schema = {"type": "object", "properties": {"team": {"enum": ["billing", "technical", "shipping"]}}}
    lines, found = _lint(tmp_path, _source(_schema_router(schema), ["billing", "technical"]))
    assert [(d.code, _at(lines, d)) for d in found] == [("BAM315", "otherwise")]


def test_the_value_otherwise_is_meant_for_the_fallback(tmp_path):
    schema = {"type": "object", "properties": {"team": {"enum": ["billing", "technical", "otherwise"]}}}
    assert _lint(tmp_path, _source(_schema_router(schema), ["billing", "technical"]))[1] == []


def test_a_router_in_free_text_wrapped_in_json_is_left_to_its_prompt(tmp_path):
    schema = {"type": "object", "properties": {"team": {"type": "string"}}, "required": ["team"]}
    assert _lint(tmp_path, _source(_schema_router(schema), ["billing", "anything"]))[1] == []


def test_beside_free_text_a_branch_no_enum_value_names_is_still_reported(tmp_path):
    schema = {"type": "object", "properties": {"team": {"enum": ["billing", "technical"]},
                                               "reason": {"type": "string"}}}
    lines, found = _lint(tmp_path, _source(_schema_router(schema), ["billing", "tech"]))
    # And `technical` names no branch (`tech` is not a word of it): both are shown at `tech`.
    assert [(d.code, _at(lines, d)) for d in found] == [("BAM314", "tech"), ("BAM315", "tech")]
    assert "will likely never run" in found[0].message


def test_a_typo_the_prompt_never_names_is_reported_with_the_word_it_means(tmp_path):
    router = _prompt_router("Which team: billing, shipping or account? Reply with the name only.")
    lines, found = _lint(tmp_path, _source(router, ["billing", "shiping", "account"]))
    assert [(d.code, d.severity, _at(lines, d)) for d in found] == [("BAM314", "warning", "shiping")]
    assert found[0].hint == "did you mean 'shipping'?"


def test_a_prompt_that_lists_no_choice_says_nothing(tmp_path):
    assert _lint(tmp_path, _source(_prompt_router("Route this ticket."), ["billing", "shiping"]))[1] == []


def test_the_shipped_support_desk_lints_clean_of_both():
    diagnostics = lint_file("examples/support.bam")[2]
    assert not [d for d in diagnostics if d.code in ("BAM314", "BAM315")]


# ------------------------------------------------ lint's reading of a schema agrees with the run

WORDS = st.sampled_from(["billing", "refund", "refunds", "tech", "technical", "Billing", "billing-2", "other"])


@settings(max_examples=60, deadline=None)
@given(values=st.lists(WORDS, min_size=1, max_size=4, unique=True),
       branches=st.lists(WORDS, min_size=1, max_size=3, unique_by=str.lower))
def test_a_closed_enum_lint_reports_is_exactly_the_replies_that_never_reach_a_branch(values, branches):
    """For a closed schema, BAM314's "no word names it" holds exactly when no reply the schema allows picks it."""
    reply = ReplyStrings({"type": "object", "properties": {"k": {"enum": values}}, "required": ["k"]})
    assert not reply.open
    words = [*reply.keys, *(value for enum in reply.enums for value in enum)]
    for branch in branches:
        reached = any(chosen_branch(json.dumps({"k": value}), tuple(branches), "") == branch for value in values)
        named = any(chosen_branch(word, (branch,), None) == branch for word in words)
        # Named by some word is needed to be reached (an earlier branch may still take the reply).
        assert named or not reached


@pytest.mark.parametrize("schema, is_open", [
    ({"type": "string"}, True),
    ({"enum": ["a", "b"]}, False),
    ({"type": "object", "properties": {"a": {"const": "x"}}, "additionalProperties": True}, True),
    ({"type": "object", "properties": {"a": {"type": "integer"}, "b": {"anyOf": [{"enum": ["x"]}, {"type": "null"}]}}},
     False),
    ({"type": "array", "items": {"type": "string"}}, True),
    ({}, True),
])
def test_which_schemas_allow_strings_lint_cannot_list(schema, is_open):
    assert ReplyStrings(schema).open is is_open
