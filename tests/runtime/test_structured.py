"""Structured outputs end to end (the schema sent, reserved for and checked), cassettes of tool rounds,
providers that cannot use tools, and `answer = json`."""

from __future__ import annotations

import asyncio
import hashlib
import json

import pytest

from bamasc.combinators.tools import output_schema_tokens
from bamasc.plan.compile import compile_file
from bamasc.runtime.extract import extract_answer
from bamasc.metering.guard import BudgetGuard
from bamasc.runtime.interpreter import TaskRun
from bamasc.runtime.providers import make_provider
from bamasc.runtime.providers.base import Completion, Message, ProviderError, ToolCall
from bamasc.runtime.providers.replay import ReplayProvider, prompt_key
from bamasc.runtime.retry import RetryPolicy
from bamasc.runtime.structured import Structured, check_output, example_answer, structured
from bamasc.runtime.tools import ToolSpec
from tests.helpers.runtime import Collect

from .servers import anthropic_server, openai_server, raw, reply  # noqa: F401 (fixtures)

KEY = "sk-test-never-printed-0123456789"
POLICY = RetryPolicy(max_attempts=3, base_delay=0.01, max_delay=0.05, jitter=0.0, timeout=2.0)
SCHEMA = {"type": "object", "properties": {"intent": {"enum": ["billing", "technical", "account"]}},
          "required": ["intent"]}
SCHEMA_TEXT = json.dumps(SCHEMA)


def run(coroutine):
    return asyncio.run(coroutine)


def source(provider: str, base_url: str) -> str:
    return f"""
model remote {{
  provider = {provider}
  name     = "{'gpt-4o-mini' if provider == 'openai' else 'claude-3-5-haiku'}"
  base_url = "{base_url}"
  api_key  = env("BAMASC_TEST_KEY")
  price    {{ input = 0.5  output = 2.0 }}
  tier     = 1
}}
role Classifier {{
  max_output = 40
  output     = json(\"\"\"{SCHEMA_TEXT}\"\"\")
  prompt     = "Classify: {{{{task}}}}"
}}
topology single {{
  slot classifier : Classifier [1..1]
  flow {{ answer classifier(task) }}
}}
system s {{
  models     = [remote]
  topologies = [single]
  budget     = 5000
  answer     = json
}}
"""


@pytest.fixture(params=["openai", "anthropic"])
def wire(request, tmp_path, monkeypatch):
    server = request.getfixturevalue(f"{request.param}_server")
    monkeypatch.setenv("BAMASC_TEST_KEY", KEY)
    path = tmp_path / "structured.bam"
    path.write_text(source(request.param, server.base_url))
    result = compile_file(str(path))
    assert result.plan is not None, [d.message for d in result.diagnostics]
    return request.param, server, result.plan, result.program


def answer_reply(flavor: str, value: object, prompt_tokens: int = 30, completion_tokens: int = 6):
    """The model's answer in each protocol's structured form: JSON content, or the forced tool's input."""
    if flavor == "openai":
        return reply(value if isinstance(value, str) else json.dumps(value), prompt_tokens=prompt_tokens,
                     completion_tokens=completion_tokens)
    blocks = ([{"type": "text", "text": value}] if isinstance(value, str) else
              [{"type": "tool_use", "id": "toolu_1", "name": "answer", "input": value}])
    return raw(json.dumps({"id": "msg_1", "type": "message", "role": "assistant", "model": "m", "content": blocks,
                           "stop_reason": "tool_use", "stop_sequence": None,
                           "usage": {"input_tokens": prompt_tokens, "output_tokens": completion_tokens}}))


def run_task(plan, program):
    system = plan.systems[0]
    provider = make_provider(program.models["remote"])
    trace = Collect()
    task = TaskRun(program, system, system.template("single"), {"remote": provider}, BudgetGuard(system.budget),
                   "t1", "My card was charged twice", trace, POLICY)

    async def go():
        try:
            return await task.run(), provider.count_prompt_tokens
        finally:
            await provider.aclose()

    (result, counter) = run(go())
    return result, trace.calls, counter


def test_a_reply_held_to_the_schema_is_the_json_answer(wire):
    flavor, server, plan, program = wire
    server.script(answer_reply(flavor, {"intent": "billing"}))
    result, calls, _ = run_task(plan, program)
    assert result.status == "ok" and result.answer == '{"intent":"billing"}'
    (call,) = calls
    assert call["charged"] == pytest.approx(0.5 * 30 + 2.0 * 6)
    sent = server.requests[0].body
    if flavor == "openai":
        assert sent["response_format"]["json_schema"]["schema"] == SCHEMA
    else:
        assert sent["tool_choice"] == {"type": "tool", "name": "answer"}


@pytest.mark.parametrize("bad", ["billing", {"intent": "refund"}, {}], ids=["not-json", "not-in-enum", "missing"])
def test_a_reply_that_fails_the_schema_is_a_failed_attempt_that_is_retried(wire, bad):
    flavor, server, plan, program = wire
    server.script(answer_reply(flavor, bad), answer_reply(flavor, {"intent": "account"}, 31, 7))
    result, calls, _ = run_task(plan, program)
    assert result.status == "ok" and result.answer == '{"intent":"account"}'
    first, second = calls
    assert first["error"].startswith("malformed: structured output")
    # The malformed attempt may have been billed: it is charged its whole reservation, as any malformed reply.
    assert first["reserved"] > 0 and first["charged"] == pytest.approx(first["reserved"])
    assert result.cost == pytest.approx(first["reserved"] + 0.5 * 31 + 2.0 * 7)
    assert result.cost <= plan.systems[0].budget
    assert len(server.requests) == 2


def test_every_attempt_failing_the_schema_ends_the_task_without_a_traceback(wire):
    flavor, server, plan, program = wire
    server.script(*[answer_reply(flavor, "nope")] * 3)
    result, calls, _ = run_task(plan, program)
    assert result.status == "error" and "structured output: the reply is not JSON" in result.error
    assert len(calls) == 3 and result.cost <= plan.systems[0].budget


def test_the_reservation_holds_the_schema_and_stays_within_the_bound(wire):
    flavor, server, plan, program = wire
    server.script(answer_reply(flavor, "nope"), answer_reply(flavor, {"intent": "billing"}))
    result, calls, counter = run_task(plan, program)
    messages = [Message("user", "Classify: My card was charged twice")]
    from bamasc.runtime.tokens import safe_prompt_bound

    counted = counter(messages)
    own = safe_prompt_bound(messages) if counted is None else counted
    assert calls[0]["prompt_tokens"] == own + output_schema_tokens(SCHEMA)  # the unsettled attempt shows its reservation
    (node,) = plan.systems[0].template("single").nodes
    assert calls[0]["prompt_tokens"] <= node.input_tokens and calls[0]["reserved"] <= node.cost


def test_the_wrapper_leaves_roles_without_a_schema_alone_and_closes_nothing():
    class Inner:
        name = "m"
        closed = False

        def count_prompt_tokens(self, messages):
            return None

        async def complete(self, messages, max_tokens, *, timeout, decoding=None, expect="text"):
            return Completion('{"intent": "billing"}', 3, 2)

        async def aclose(self):
            self.closed = True

    inner = Inner()
    assert structured(inner, None) is inner
    wrapped = structured(inner, SCHEMA)
    assert isinstance(wrapped, Structured) and wrapped.name == "m"
    assert wrapped.count_prompt_tokens([Message("user", "hi")]) == 2 + 8 + output_schema_tokens(SCHEMA)
    # A provider whose complete takes no output_schema is not sent one (BAM609 keeps it from such roles).
    assert run(wrapped.complete([Message("user", "hi")], 5, timeout=1)).text == '{"intent": "billing"}'
    run(wrapped.aclose())
    assert not inner.closed


def test_check_output_says_where_a_reply_fails():
    assert check_output(SCHEMA, '{"intent": "technical"}') == '{"intent": "technical"}'
    with pytest.raises(ProviderError) as caught:
        check_output({"type": "object", "properties": {"n": {"type": "object", "properties": {"m": {"type": "integer"}}}}},
                     '{"n": {"m": "x"}}')
    assert caught.value.kind == "malformed" and caught.value.outcome_unknown
    assert "at n/m: 'x' is not of type 'integer'" in caught.value.message
    with pytest.raises(ProviderError) as deep:
        check_output(SCHEMA, "[" * 100_000 + "]" * 100_000)
    assert deep.value.kind == "malformed"


def test_a_schema_jsonschema_refuses_is_a_client_error_before_anything_is_sent():
    class Never:
        name = "m"

        async def complete(self, *args, **options):
            raise AssertionError("sent")

    with pytest.raises(ProviderError) as caught:
        run(Structured(Never(), {"type": "object", "minProperties": -1}).complete([], 5, timeout=1))
    assert caught.value.kind == "client" and not caught.value.retryable and not caught.value.outcome_unknown


def test_example_answers_are_held_to_their_schema_and_fill_the_size():
    nested = {"type": "object", "required": ["a", "b", "c"], "properties": {
        "a": {"type": "array", "minItems": 2, "items": {"type": "string", "minLength": 3}},
        "b": {"type": "integer", "minimum": 5}, "c": {"anyOf": [{"type": "null"}, {"type": "string"}]}}}
    for schema in (SCHEMA, nested):
        text = example_answer(schema)
        assert check_output(schema, text) == text
        padded = example_answer(schema, 200)
        assert len(padded.encode()) == 200 and json.loads(padded) == json.loads(text)
    assert example_answer({"type": "object", "required": ["p"], "properties": {"p": {"type": "string", "pattern": "^z"}}}) is None


# ---------------------------------------------------------------- answer = json


def test_answer_json_prints_the_object_compact():
    assert extract_answer("json", ' {"intent": "billing", "n": [1, 2]}\n') == '{"intent":"billing","n":[1,2]}'
    assert extract_answer("json", '{"é": "ü"}') == '{"é":"ü"}'
    assert extract_answer("json", "billing") is None
    assert extract_answer("json", "[" * 100_000) is None


# ---------------------------------------------------------------- cassettes of tool rounds


class ToolModel:
    """Asks for one tool in a round sent tools, and answers otherwise."""

    name = "m1"

    def __init__(self):
        self.calls = []

    def count_prompt_tokens(self, messages):
        return 7

    async def complete(self, messages, max_tokens, *, timeout, decoding=None, expect="text", tools=(),
                       output_schema=None):
        self.calls.append((len(messages), tuple(tool.name for tool in tools), output_schema))
        if tools:
            return Completion("", 10, 4, "tool_calls", tool_calls=(ToolCall("call_1", "lookup", '{"id":"A1"}'),))
        return Completion("shipped", 20, 2, "stop")

    async def aclose(self):
        pass


LOOKUP = ToolSpec("lookup", "Look an order up", {"type": "object"}, "lookup")


def test_tool_rounds_are_recorded_and_played_back(tmp_path):
    cassette = tmp_path / "tools.jsonl"
    inner = ToolModel()
    recorder = ReplayProvider("m1", cassette, inner=inner, record=True)
    asked = [Message("user", "Where is A1?")]

    async def loop(provider):
        first = await provider.complete(asked, 30, timeout=1, tools=(LOOKUP,))
        answered = asked + [Message("assistant", "", tool_calls=first.tool_calls),
                            Message("tool", "shipped Monday", tool_call_id="call_1")]
        return first, await provider.complete(answered, 30, timeout=1, output_schema=SCHEMA)

    recorded = run(loop(recorder))
    assert inner.calls == [(1, ("lookup",), None), (3, (), SCHEMA)]
    lines = [json.loads(line) for line in cassette.read_text().splitlines()]
    assert lines[0]["tool_calls"] == [{"id": "call_1", "name": "lookup", "arguments": '{"id":"A1"}'}]
    assert lines[1]["messages"][1]["tool_calls"] == lines[0]["tool_calls"]
    assert lines[1]["messages"][2] == {"role": "tool", "content": "shipped Monday", "tool_call_id": "call_1"}
    assert "tool_calls" not in lines[1]

    player = ReplayProvider("m1", cassette)
    assert run(loop(player)) == recorded
    # The tools offered, the results sent and the schema are in the key: another round is not played back.
    changed = asked + [Message("assistant", "", tool_calls=recorded[0].tool_calls),
                       Message("tool", "lost in transit", tool_call_id="call_1")]
    for messages, options in ((changed, {"output_schema": SCHEMA}), (asked, {}), (changed, {})):
        with pytest.raises(ProviderError) as caught:
            run(player.complete(messages, 30, timeout=1, **options))
        assert caught.value.kind == "not_found"


def test_a_call_without_tools_is_keyed_as_before():
    messages = [Message("system", "s"), Message("user", "hi")]
    before = json.dumps({"max_tokens": 5, "messages": [["system", "s"], ["user", "hi"]], "model": "m"},
                        ensure_ascii=False, sort_keys=True, separators=(",", ":"))
    assert prompt_key("m", messages, 5) == hashlib.sha256(before.encode()).hexdigest()


def test_a_cassette_line_with_a_bad_tool_call_is_refused(tmp_path):
    cassette = tmp_path / "bad.jsonl"
    line = {"key": "k", "model": "m1", "max_tokens": 5, "messages": [], "text": "", "prompt_tokens": 1,
            "completion_tokens": 1, "tool_calls": [{"id": 1, "name": "lookup", "arguments": "{}"}]}
    cassette.write_text(json.dumps(line) + "\n")
    with pytest.raises(ProviderError) as caught:
        ReplayProvider("m1", cassette)
    assert "line 1 is not a recorded call" in caught.value.message


# ---------------------------------------------------------------- providers that cannot


def test_llamacpp_refuses_a_round_with_tools_before_it_evaluates_anything():
    from bamasc.runtime.providers.llamacpp_provider import LlamaCppProvider

    provider = LlamaCppProvider.__new__(LlamaCppProvider)  # no model loaded: the refusal comes first
    provider.name = "local"
    for options in ({"tools": (LOOKUP,)}, {"output_schema": SCHEMA}):
        with pytest.raises(ProviderError) as caught:
            run(provider.complete([Message("user", "hi")], 5, timeout=1, **options))
        assert caught.value.kind == "client" and not caught.value.retryable
        assert "llamacpp model 'local'" in caught.value.message and "cannot" in caught.value.message


def test_exec_refuses_a_llamacpp_seat_for_a_tool_role_before_spending(tmp_path, capsys):
    from bamasc.cli import main

    (tmp_path / "shop.py").write_text("def lookup(order_id: str) -> str:\n    return 'shipped'\n")
    path = tmp_path / "local.bam"
    path.write_text("""
tool lookup {
  python      = "shop:lookup"
  description = "Look an order up"
  max_result  = 50 tokens
}
model local {
  provider   = llamacpp
  name       = "smollm2-135m"
  price      { input = 0  output = 0 }
  tier       = 1
  max_output = 64
}
role Support {
  tools           = [lookup]
  max_tool_rounds = 2
  prompt          = "Help: {{task}}"
}
topology single {
  slot support : Support [1..1]
  flow { answer support(task) }
}
system s {
  models     = [local]
  topologies = [single]
  budget     = 100
}
""")
    trace = tmp_path / "trace.jsonl"
    code = main(["exec", str(path), "--task", "Where is A1?", "--trace", str(trace)])
    err = capsys.readouterr().err
    assert code != 0
    assert "BAM609" in err and "model 'local' as role 'Support'" in err and "cannot call tools" in err
    assert not trace.exists() or trace.read_text() == ""


def test_exec_names_the_extra_a_structured_output_needs_before_any_call(tmp_path, capsys, monkeypatch):
    import importlib.util
    import sys

    from bamasc.cli import main

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *args, **kw: None if name.split(".")[0] == "jsonschema" else real(name, *args, **kw))
    monkeypatch.setitem(sys.modules, "jsonschema", None)
    path = tmp_path / "classify.bam"
    path.write_text(source("fake", "http://127.0.0.1:9").replace('  base_url = "http://127.0.0.1:9"\n', "")
                    .replace('  api_key  = env("BAMASC_TEST_KEY")\n', ""))
    trace = tmp_path / "trace.jsonl"
    assert main(["exec", str(path), "--task", "charged twice", "--trace", str(trace)]) == 1
    err = capsys.readouterr().err
    assert "role Classifier's structured output needs the mcp extra (jsonschema not installed)" in err
    assert not trace.exists() or trace.read_text() == ""
    monkeypatch.undo()
    assert main(["exec", str(path), "--task", "charged twice"]) == 0
    assert 'answer: {"intent":"billing"}' in capsys.readouterr().out
