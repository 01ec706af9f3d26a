"""Tool calls and structured outputs through the official SDKs, against local servers that speak each protocol.

The servers (tests/runtime/servers.py) record each request's JSON, so every
test asserts the exact shape each API was sent, and reply with bodies written
here in each protocol's tool-calling form, hostile ones included.
"""

from __future__ import annotations

import asyncio
import hashlib
import json

import pytest

from bamasc.combinators.tools import TOOL_SPEC_FRAMING, TOOLS_FRAMING, canonical_json, output_schema_tokens
from bamasc.runtime.providers.base import Completion, Message, ProviderError, ToolCall
from bamasc.runtime.tools import ToolSpec

from .servers import anthropic_server, openai_server, raw  # noqa: F401 (fixtures)

SECRET = "sk-test-DO-NOT-LEAK-0123456789abcdef"
LOOKUP = ToolSpec("lookup_order", "Look up an order by its id",
                  {"type": "object", "properties": {"order_id": {"type": "string"}}, "required": ["order_id"]},
                  "lookup_order")
READ = ToolSpec("files__read_file", "Read a help page", {"type": "object", "properties": {"path": {"type": "string"}}},
                "files.read_file")
SCHEMA = {"type": "object", "properties": {"intent": {"enum": ["billing", "technical", "account"]}},
          "required": ["intent"]}
ASKED = [Message("system", "You help customers."), Message("user", "Where is order A1?")]
CALLS = (ToolCall("call_1", "lookup_order", '{"order_id":"A1"}'), ToolCall("call_2", "files__read_file", "{}"))
# Round 1 of a loop: round 0's prompt, its tool-call message, and a result for each call.
ROUND_1 = ASKED + [Message("assistant", "Let me look.", tool_calls=CALLS),
                   Message("tool", "shipped on Monday", tool_call_id="call_1"),
                   Message("tool", "error: there is no page", tool_call_id="call_2")]


def run(coroutine):
    return asyncio.run(coroutine)


@pytest.fixture
def sdk():
    made = []

    def make(flavor: str, server):
        if flavor == "openai":
            from bamasc.runtime.providers.openai_provider import OpenAIProvider

            made.append(OpenAIProvider("m1", "gpt-4o-mini", api_key=SECRET, base_url=server.base_url))
        else:
            from bamasc.runtime.providers.anthropic_provider import AnthropicProvider

            made.append(AnthropicProvider("m1", "claude-haiku-4-5", api_key=SECRET, base_url=server.base_url))
        return made[-1]

    yield make
    for provider in made:
        run(provider.aclose())


@pytest.fixture(params=["openai", "anthropic"])
def endpoint(request, sdk):
    server = request.getfixturevalue(f"{request.param}_server")
    return request.param, server, sdk(request.param, server)


def openai_body(calls: list | None, *, content: str | None = None, prompt_tokens: int = 40,
                completion_tokens: int = 12, **message) -> str:
    """A chat completion whose message carries `calls` as `tool_calls` (written as given, hostile ones too)."""
    message = {"role": "assistant", "content": content, **message}
    if calls is not None:
        message["tool_calls"] = calls
    return json.dumps({
        "id": "chatcmpl-tools", "object": "chat.completion", "created": 0, "model": "gpt-4o-mini",
        "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls" if calls else "stop"}],
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                  "total_tokens": prompt_tokens + completion_tokens},
    })


def openai_call(call_id, name, arguments) -> dict:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def anthropic_body(blocks: list, *, prompt_tokens: int = 40, completion_tokens: int = 12) -> str:
    return json.dumps({
        "id": "msg_tools", "type": "message", "role": "assistant", "model": "claude-haiku-4-5", "content": blocks,
        "stop_reason": "tool_use" if any(b.get("type") == "tool_use" for b in blocks) else "end_turn",
        "stop_sequence": None, "usage": {"input_tokens": prompt_tokens, "output_tokens": completion_tokens},
    })


def tool_use(call_id, name, value) -> dict:
    return {"type": "tool_use", "id": call_id, "name": name, "input": value}


def tool_reply(flavor: str, calls: list[tuple], text: str = "") -> str:
    """A reply asking for `calls` ((id, name, arguments as an object)) in `flavor`'s form."""
    if flavor == "openai":
        return openai_body([openai_call(i, n, json.dumps(a)) for i, n, a in calls], content=text or None)
    return anthropic_body(([{"type": "text", "text": text}] if text else []) + [tool_use(*call) for call in calls])


# ---------------------------------------------------------------- a tool-call reply and what was sent


def test_openai_tool_calls_are_read_with_their_usage(openai_server, sdk):
    openai_server.script(raw(openai_body([openai_call("call_9", "lookup_order", '{"order_id": "A1"}')],
                                         prompt_tokens=57, completion_tokens=18)))
    completion = run(sdk("openai", openai_server).complete(ASKED, 64, timeout=5, tools=(LOOKUP, READ)))
    assert completion == Completion("", 57, 18, "tool_calls",
                                    tool_calls=(ToolCall("call_9", "lookup_order", '{"order_id": "A1"}'),),
                                    response_id="chatcmpl-tools", response_model="gpt-4o-mini")
    (request,) = openai_server.requests
    assert request.body["tools"] == [
        {"type": "function", "function": {"name": "lookup_order", "description": "Look up an order by its id",
                                          "parameters": LOOKUP.parameters}},
        {"type": "function", "function": {"name": "files__read_file", "description": "Read a help page",
                                          "parameters": READ.parameters}},
    ]
    assert "tool_choice" not in request.body and "response_format" not in request.body


def test_openai_next_round_sends_the_calls_and_their_results(openai_server, sdk):
    run(sdk("openai", openai_server).complete(ROUND_1, 64, timeout=5, tools=(LOOKUP,)))
    (request,) = openai_server.requests
    assert request.body["messages"] == [
        {"role": "system", "content": "You help customers."},
        {"role": "user", "content": "Where is order A1?"},
        {"role": "assistant", "content": "Let me look.", "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "lookup_order", "arguments": '{"order_id":"A1"}'}},
            {"id": "call_2", "type": "function", "function": {"name": "files__read_file", "arguments": "{}"}},
        ]},
        {"role": "tool", "tool_call_id": "call_1", "content": "shipped on Monday"},
        {"role": "tool", "tool_call_id": "call_2", "content": "error: there is no page"},
    ]


def test_openai_a_tool_call_message_without_text_has_null_content(openai_server, sdk):
    silent = ASKED + [Message("assistant", "", tool_calls=CALLS[:1]), Message("tool", "ok", tool_call_id="call_1")]
    run(sdk("openai", openai_server).complete(silent, 64, timeout=5))  # the final round: no tools offered
    (request,) = openai_server.requests
    assert request.body["messages"][2]["content"] is None
    assert "tools" not in request.body


def test_anthropic_tool_use_blocks_are_read_with_their_usage(anthropic_server, sdk):
    anthropic_server.script(raw(anthropic_body(
        [{"type": "text", "text": "Checking."}, tool_use("toolu_01A", "lookup_order", {"order_id": "A1", "n": "é"})],
        prompt_tokens=380, completion_tokens=44)))
    completion = run(sdk("anthropic", anthropic_server).complete(ASKED, 64, timeout=5, tools=(LOOKUP, READ)))
    assert completion == Completion("Checking.", 380, 44, "tool_use",
                                    tool_calls=(ToolCall("toolu_01A", "lookup_order", '{"order_id":"A1","n":"é"}'),),
                                    response_id="msg_tools", response_model="claude-haiku-4-5")
    (request,) = anthropic_server.requests
    assert request.body["tools"] == [
        {"name": "lookup_order", "description": "Look up an order by its id", "input_schema": LOOKUP.parameters},
        {"name": "files__read_file", "description": "Read a help page", "input_schema": READ.parameters},
    ]
    assert "tool_choice" not in request.body


def test_anthropic_next_round_sends_tool_use_then_tool_result_blocks(anthropic_server, sdk):
    run(sdk("anthropic", anthropic_server).complete(ROUND_1, 64, timeout=5, tools=(LOOKUP,)))
    (request,) = anthropic_server.requests
    assert request.body["system"] == "You help customers."
    assert request.body["messages"] == [
        {"role": "user", "content": "Where is order A1?"},
        {"role": "assistant", "content": [
            {"type": "text", "text": "Let me look."},
            {"type": "tool_use", "id": "call_1", "name": "lookup_order", "input": {"order_id": "A1"}},
            {"type": "tool_use", "id": "call_2", "name": "files__read_file", "input": {}},
        ]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "call_1", "content": "shipped on Monday"},
            {"type": "tool_result", "tool_use_id": "call_2", "content": "error: there is no page"},
        ]},
    ]


def test_anthropic_a_user_message_after_results_joins_their_message(anthropic_server, sdk):
    messages = ROUND_1[:4] + [Message("user", "Answer now.")]
    run(sdk("anthropic", anthropic_server).complete(messages, 64, timeout=5))
    (request,) = anthropic_server.requests
    assert request.body["messages"][-1] == {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "call_1", "content": "shipped on Monday"},
        {"type": "text", "text": "Answer now."},
    ]}
    assert len(request.body["messages"]) == 3 and "tools" not in request.body


def test_a_whole_loop_round_trips_through_each_protocol(endpoint):
    """Round 0 asks for two tools; its calls go back as the protocol wants them in round 1, which answers."""
    flavor, server, provider = endpoint
    server.script(raw(tool_reply(flavor, [("id_a", "lookup_order", {"order_id": "A1"}), ("id_b", "files__read_file", {})])))

    async def loop():  # one event loop: the SDK's HTTP session belongs to the loop that opened it
        first = await provider.complete(ASKED, 64, timeout=5, tools=(LOOKUP, READ))
        results = [Message("tool", f"result {call.name}", tool_call_id=call.id) for call in first.tool_calls]
        asked = ASKED + [Message("assistant", first.text, tool_calls=first.tool_calls)] + results
        return first, await provider.complete(asked, 64, timeout=5, tools=(LOOKUP, READ))

    first, second = run(loop())
    assert [call.id for call in first.tool_calls] == ["id_a", "id_b"]
    assert second.text == "Hello from the test server." and second.tool_calls == ()
    sent = server.requests[1].body["messages"]
    if flavor == "openai":
        assert [m["role"] for m in sent] == ["system", "user", "assistant", "tool", "tool"]
        assert [m["tool_call_id"] for m in sent[3:]] == ["id_a", "id_b"]
    else:
        assert [m["role"] for m in sent] == ["user", "assistant", "user"]
        assert [b["tool_use_id"] for b in sent[2]["content"]] == ["id_a", "id_b"]
        assert sent[1]["content"][0]["input"] == {"order_id": "A1"}


def test_openai_counts_tool_prompts_by_the_safe_bound():
    from bamasc.runtime.providers.openai_provider import OpenAIProvider

    provider = OpenAIProvider("m1", "gpt-4o-mini", api_key=SECRET, base_url="http://127.0.0.1:9/v1")
    try:
        assert provider.count_prompt_tokens(ROUND_1) is None  # no published rule for tool messages
    finally:
        run(provider.aclose())


# ---------------------------------------------------------------- hostile replies


def test_arguments_that_are_not_json_pass_through_for_the_loop_to_answer(openai_server, sdk):
    openai_server.script(raw(openai_body([openai_call("call_1", "lookup_order", '{"order_id": "A1"')])))
    completion = run(sdk("openai", openai_server).complete(ASKED, 64, timeout=5, tools=(LOOKUP,)))
    assert completion.tool_calls == (ToolCall("call_1", "lookup_order", '{"order_id": "A1"'),)


def test_a_megabyte_of_arguments_passes_through_whole(endpoint):
    flavor, server, provider = endpoint
    big = "x" * (1 << 20)
    server.script(raw(tool_reply(flavor, [("call_1", "lookup_order", {"order_id": big})])))
    completion = run(provider.complete(ASKED, 64, timeout=5, tools=(LOOKUP,)))
    (call,) = completion.tool_calls
    assert json.loads(call.arguments) == {"order_id": big}
    assert (completion.prompt_tokens, completion.completion_tokens) == (40, 12)


def test_an_unknown_tool_name_passes_through(endpoint):
    flavor, server, provider = endpoint
    server.script(raw(tool_reply(flavor, [("call_1", "rm_rf", {"path": "/"})])))
    completion = run(provider.complete(ASKED, 64, timeout=5, tools=(LOOKUP,)))
    assert [(call.name, json.loads(call.arguments)) for call in completion.tool_calls] == [("rm_rf", {"path": "/"})]


async def twice(provider, **options) -> tuple[Completion, Completion]:
    """Two calls on one event loop (the SDK's HTTP session belongs to the loop that opened it)."""
    return (await provider.complete(ASKED, 64, timeout=5, **options),
            await provider.complete(ASKED, 64, timeout=5, **options))


def failure(provider, **options) -> ProviderError:
    with pytest.raises(ProviderError) as caught:
        run(provider.complete(ASKED, 64, timeout=5, **options))
    return caught.value


HOSTILE_OPENAI = {
    "no id": [{"type": "function", "function": {"name": "lookup_order", "arguments": "{}"}}],
    "empty id": [openai_call("", "lookup_order", "{}")],
    "id not text": [openai_call(7, "lookup_order", "{}")],
    "no function": [{"id": "call_1", "type": "function"}],
    "not a function call": [{"id": "call_1", "type": "custom", "custom": {"name": "x", "input": "y"}}],
    "name not text": [openai_call("call_1", None, "{}")],
    "arguments not text": [openai_call("call_1", "lookup_order", 12)],
    "a call that is a string": ["lookup_order"],
    "tool_calls not a list": {"call_1": "lookup_order"},
    "two calls with one id": [openai_call("call_1", "lookup_order", "{}"), openai_call("call_1", "lookup_order", "{}")],
}


@pytest.mark.parametrize("case", sorted(HOSTILE_OPENAI))
def test_openai_tool_calls_that_cannot_be_answered_are_malformed(case, openai_server, sdk):
    openai_server.script(raw(openai_body(HOSTILE_OPENAI[case])))
    problem = failure(sdk("openai", openai_server), tools=(LOOKUP,))
    assert problem.kind == "malformed" and problem.outcome_unknown and problem.retryable
    assert "malformed" in problem.message and SECRET not in problem.message


HOSTILE_ANTHROPIC = {
    "no id": [{"type": "tool_use", "name": "lookup_order", "input": {}}],
    "input not an object": [tool_use("toolu_1", "lookup_order", '{"order_id": "A1"}')],
    "name not text": [tool_use("toolu_1", ["lookup_order"], {})],
    "two calls with one id": [tool_use("toolu_1", "lookup_order", {}), tool_use("toolu_1", "lookup_order", {})],
}


@pytest.mark.parametrize("case", sorted(HOSTILE_ANTHROPIC))
def test_anthropic_tool_uses_that_cannot_be_answered_are_malformed(case, anthropic_server, sdk):
    anthropic_server.script(raw(anthropic_body(HOSTILE_ANTHROPIC[case])))
    problem = failure(sdk("anthropic", anthropic_server), tools=(LOOKUP,))
    assert problem.kind == "malformed" and problem.outcome_unknown


def test_tool_calls_in_a_round_sent_no_tools_are_dropped_and_its_text_is_the_answer(endpoint):
    flavor, server, provider = endpoint
    server.script(raw(tool_reply(flavor, [("call_1", "lookup_order", {})], text="It shipped.")))
    completion = run(provider.complete(ASKED, 64, timeout=5))
    assert completion.text == "It shipped." and completion.tool_calls == ()
    assert (completion.prompt_tokens, completion.completion_tokens) == (40, 12)


def test_an_id_longer_than_the_bound_assumes_is_shortened_alike_every_time(endpoint):
    flavor, server, provider = endpoint
    long_id = "chatcmpl-tool-" + "0123456789abcdef" * 2  # 46 bytes, as vLLM writes them
    odd_id = "call 1/ü"
    server.script(*[raw(tool_reply(flavor, [(long_id, "lookup_order", {}), (odd_id, "lookup_order", {})]))] * 2)
    first, again = run(twice(provider, tools=(LOOKUP,)))
    expected = ["call_" + hashlib.sha256(raw_id.encode()).hexdigest()[:24] for raw_id in (long_id, odd_id)]
    assert [call.id for call in first.tool_calls] == expected == [call.id for call in again.tool_calls]
    assert all(len(call.id) <= 40 for call in first.tool_calls)


def test_openai_refusal_of_a_structured_output_is_malformed(openai_server, sdk):
    openai_server.script(raw(openai_body(None, refusal="I cannot help with that.")))
    problem = failure(sdk("openai", openai_server), output_schema=SCHEMA)
    assert problem.kind == "malformed" and "refused: I cannot help with that." in problem.message


# ---------------------------------------------------------------- structured outputs


def test_openai_structured_output_is_a_json_schema_response_format(openai_server, sdk):
    openai_server.script(raw(openai_body(None, content='{"intent": "billing"}')))
    completion = run(sdk("openai", openai_server).complete(ASKED, 64, timeout=5, output_schema=SCHEMA))
    assert completion.text == '{"intent": "billing"}' and completion.tool_calls == ()
    (request,) = openai_server.requests
    sent = request.body["response_format"]
    assert sent == {"type": "json_schema", "json_schema": {"name": "answer", "schema": SCHEMA, "strict": False}}
    assert "tools" not in request.body
    # What goes with the prompt is at most what every prompt bound of the role holds for it.
    assert len(canonical_json(sent).encode()) <= output_schema_tokens(SCHEMA)


def test_anthropic_structured_output_is_a_forced_tool_whose_input_is_the_answer(anthropic_server, sdk):
    anthropic_server.script(raw(anthropic_body([tool_use("toolu_1", "answer", {"intent": "billing"})])))
    completion = run(sdk("anthropic", anthropic_server).complete(ASKED, 64, timeout=5, output_schema=SCHEMA))
    assert completion.text == '{"intent":"billing"}' and completion.tool_calls == ()
    assert (completion.prompt_tokens, completion.completion_tokens) == (40, 12)
    (request,) = anthropic_server.requests
    assert request.body["tools"] == [{"name": "answer", "input_schema": SCHEMA}]
    assert request.body["tool_choice"] == {"type": "tool", "name": "answer"}
    # The forced tool is one spec (its framing included); TOOLS_FRAMING covers the tool-use system prompt.
    tool = canonical_json(request.body["tools"][0]).encode()
    assert len(tool) <= len(canonical_json(SCHEMA).encode()) + TOOL_SPEC_FRAMING
    assert output_schema_tokens(SCHEMA) == len(canonical_json(SCHEMA).encode()) + TOOL_SPEC_FRAMING + TOOLS_FRAMING


def test_anthropic_structured_output_with_tools_must_call_one_and_the_answer_ends_the_round(anthropic_server, sdk):
    named = ToolSpec("answer", "A python tool that happens to be called answer", {"type": "object"}, "answer")
    anthropic_server.script(
        raw(anthropic_body([tool_use("toolu_1", "lookup_order", {"order_id": "A1"})])),
        raw(anthropic_body([tool_use("toolu_2", "lookup_order", {}), tool_use("toolu_3", "answer_", {"intent": "account"})])),
    )
    asking, answered = run(twice(sdk("anthropic", anthropic_server), tools=(LOOKUP, named), output_schema=SCHEMA))
    assert [call.name for call in asking.tool_calls] == ["lookup_order"] and asking.text == ""
    assert answered.text == '{"intent":"account"}' and answered.tool_calls == ()
    request = anthropic_server.requests[0].body
    assert [tool["name"] for tool in request["tools"]] == ["lookup_order", "answer", "answer_"]
    assert request["tool_choice"] == {"type": "any"}


def test_anthropic_forced_answer_missing_leaves_text_for_the_check(anthropic_server, sdk):
    from bamasc.runtime.structured import check_output

    anthropic_server.script(raw(anthropic_body([{"type": "text", "text": "billing, I think"}])))
    completion = run(sdk("anthropic", anthropic_server).complete(ASKED, 64, timeout=5, output_schema=SCHEMA))
    with pytest.raises(ProviderError) as caught:
        check_output(SCHEMA, completion.text)
    assert caught.value.kind == "malformed" and "not JSON" in caught.value.message


# ---------------------------------------------------------------- a whole tool loop through exec


LOOP_SOURCE = """
tool lookup_order {{
  python      = "shop:lookup"
  description = "Look up an order by its id"
  parameters  = \"\"\"{{"type": "object", "properties": {{"order_id": {{"type": "string"}}}}, "required": ["order_id"]}}\"\"\"
  max_result  = 60 tokens
  timeout     = 5 s
}}
model remote {{
  provider = {flavor}
  name     = "{model}"
  base_url = "{base_url}"
  api_key  = env("BAMASC_TEST_KEY")
  price    {{ input = 0.5  output = 2.0 }}
  tier     = 1
}}
role Support {{
  tools           = [lookup_order]
  max_tool_rounds = 2
  max_output      = 64
  prompt          = "Answer the customer: {{{{task}}}}"
}}
topology single {{
  slot support : Support [1..1]
  flow {{ answer support(task) }}
}}
system s {{
  models     = [remote]
  topologies = [single]
  budget     = 20000
}}
"""


def test_exec_runs_a_tool_loop_through_each_protocol(endpoint, tmp_path, monkeypatch, capsys):
    from bamasc.cli import main

    flavor, server, _ = endpoint
    monkeypatch.setenv("BAMASC_TEST_KEY", SECRET)
    (tmp_path / "shop.py").write_text("def lookup(order_id: str) -> str:\n    return f'order {order_id} shipped Monday'\n")
    path = tmp_path / "loop.bam"
    path.write_text(LOOP_SOURCE.format(flavor=flavor, base_url=server.base_url,
                                       model="gpt-4o-mini" if flavor == "openai" else "claude-haiku-4-5"))
    server.script(raw(tool_reply(flavor, [("call_7", "lookup_order", {"order_id": "A1"})])))  # then a plain answer
    trace = tmp_path / "trace.jsonl"
    assert main(["exec", str(path), "--task", "Where is A1?", "--trace", str(trace)]) == 0, capsys.readouterr().err
    assert "Hello from the test server." in capsys.readouterr().out
    first, second = (request.body for request in server.requests)
    assert [tool.get("name") or tool["function"]["name"] for tool in first["tools"]] == ["lookup_order"]
    if flavor == "openai":
        assert second["messages"][-2:] == [
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "call_7", "type": "function", "function": {"name": "lookup_order", "arguments": '{"order_id": "A1"}'}}]},
            {"role": "tool", "tool_call_id": "call_7", "content": "order A1 shipped Monday"},
        ]
    else:
        assert second["messages"][-2:] == [
            {"role": "assistant", "content": [
                {"type": "tool_use", "id": "call_7", "name": "lookup_order", "input": {"order_id": "A1"}}]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "call_7", "content": "order A1 shipped Monday"}]},
        ]
    lines = [json.loads(line) for line in trace.read_text().splitlines()]
    (tool,) = [line for line in lines if line["type"] == "tool"]
    assert tool["name"] == "lookup_order" and tool["error"] is None and tool["round"] == 0
    (task,) = [line for line in lines if line["type"] == "task"]
    assert task["status"] == "ok" and task["cost"] <= task["bound"]
