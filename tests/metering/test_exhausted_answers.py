"""The answer a protocol gives in place of a call a spent budget cannot fit (`WireProtocol.exhausted`), read by the
official SDKs and by agent frameworks as they read a model's reply: the text exactly, a turn ended normally, no tool
call, usage 0, and an agent loop that ends with the answer."""

from __future__ import annotations

import asyncio
import importlib
import json

import anthropic
import openai
import pytest

from bamasc.metering.protocols import CHAT, MESSAGES, RESPONSES, Asked, StreamReader
from bamasc.prices import Usage

TEXTS = {
    "plain": "The budget for this scope is spent; no further calls are made.",
    "unicode": "Бюджет исчерпан — 予算が尽きました 💸 café",
    "quotes": 'She said "stop", it\'s \\ done </s> {"json": true}',
    "newlines": "line one\nline two\r\n\n\tindented\n",
    "line ends": "a\u2028b\u2029c\x85d\x1ce",  # line ends to str.splitlines, not to server-sent events
    "event lookalike": "data: [DONE]\n\nevent: message_stop\ndata: {}\n\n",
    "blank": " ",
    "empty": "",
}
TEXT_IDS = list(TEXTS)
MODEL = "gpt-asked-4"
CLAUDE = "claude-asked-4"
# The events of a Responses stream, in the order the SDKs read them.
RESPONSES_EVENTS = ["response.created", "response.in_progress", "response.output_item.added",
                    "response.content_part.added", "response.output_text.delta", "response.output_text.done",
                    "response.content_part.done", "response.output_item.done", "response.completed"]
MESSAGES_EVENTS = ["message_start", "content_block_start", "content_block_delta", "content_block_stop",
                   "message_delta", "message_stop"]
OPENAI_TOOL = {"type": "function", "function": {"name": "spend", "description": "Spend money.",
                                                 "parameters": {"type": "object", "properties": {}}}}
RESPONSES_TOOL = {"type": "function", "name": "spend", "description": "Spend money.",
                  "parameters": {"type": "object", "properties": {}}}
ANTHROPIC_TOOL = {"name": "spend", "description": "Spend money.", "input_schema": {"type": "object", "properties": {}}}


def _http(sdk):
    """The HTTP package `sdk` is built on: httpx, or httpx2 in later releases (an SDK on httpx2 may refuse an httpx
    client), so the mock transport is one the SDK takes."""
    base = next(cls for cls in sdk.DefaultHttpxClient.__mro__[1:] if cls.__module__.startswith("httpx"))
    return importlib.import_module(base.__module__.partition(".")[0])


def _answering(protocol, text: str, seen: list, http):
    """A transport (of HTTP package `http`) that answers every call on `protocol`'s routes as the proxy will when
    the budget is spent: it reads the request as the proxy does and sends `exhausted`'s body, as the proxy sends it.
    Each request's path and body go to `seen`."""

    def handle(request):
        body = json.loads(request.content)
        seen.append((request.url.path, body))
        if request.url.path not in protocol.routes:
            return http.Response(404, json=protocol.error(f"no route {request.url.path}", "not_found"))
        asked = protocol.read(body)
        return http.Response(200, content=protocol.exhausted(asked, text),
                             headers={"content-type": protocol.media_type(asked)})

    return http.MockTransport(handle)


def _openai(protocol, text: str, seen: list) -> openai.OpenAI:
    http = _http(openai)
    return openai.OpenAI(api_key="sk-test", base_url="http://proxy.invalid/v1", max_retries=0,
                         http_client=http.Client(transport=_answering(protocol, text, seen, http)))


def _async_openai(protocol, text: str, seen: list) -> openai.AsyncOpenAI:
    http = _http(openai)
    return openai.AsyncOpenAI(api_key="sk-test", base_url="http://proxy.invalid/v1", max_retries=0,
                              http_client=http.AsyncClient(transport=_answering(protocol, text, seen, http)))


def _anthropic(text: str, seen: list) -> anthropic.Anthropic:
    http = _http(anthropic)
    return anthropic.Anthropic(api_key="sk-test", base_url="http://proxy.invalid", max_retries=0,
                               http_client=http.Client(transport=_answering(MESSAGES, text, seen, http)))


def _asked(protocol, stream: bool, choices: int = 1) -> Asked:
    return Asked(CLAUDE if protocol is MESSAGES else MODEL, None, None, choices, stream)


# ------------------------------------------------------------ the bytes, read back by the proxy's own reader

@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
@pytest.mark.parametrize("protocol", [CHAT, MESSAGES, RESPONSES], ids=lambda p: p.name)
def test_the_proxys_own_reader_reads_usage_zero_and_the_end(protocol, stream):
    """The answer reads, to the protocol's own usage reader, as a finished reply that used nothing."""
    asked = _asked(protocol, stream)
    body = protocol.exhausted(asked, TEXTS["newlines"])
    assert isinstance(body, bytes) and body.isascii()
    if not stream:
        assert protocol.media_type(asked) == "application/json"
        data = json.loads(body)
        assert data["model"] == asked.model
        assert protocol.counts(data).usage() == Usage(0, 0, 0, 0)
        return
    assert protocol.media_type(asked) == "text/event-stream"
    reader = StreamReader(protocol)
    assert reader.feed(body) + reader.rest() == body  # whole events, none held back
    assert reader.done and reader.usage() == Usage(0, 0, 0, 0)
    assert {_event_model(protocol, event) for event in _payloads(body)} - {None} == {asked.model}


def _payloads(body: bytes) -> list:
    """The JSON each event of a stream carries (chat's closing `[DONE]` is no JSON)."""
    return [json.loads(line[5:]) for line in body.splitlines() if line.startswith(b"data:") and line != b"data: [DONE]"]


def _event_model(protocol, event: dict) -> str | None:
    if protocol is CHAT:
        return event["model"]
    return (event.get("message") or event.get("response") or {}).get("model")


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
@pytest.mark.parametrize("protocol", [CHAT, MESSAGES, RESPONSES], ids=lambda p: p.name)
def test_any_text_encodes_and_reads_back_exactly(protocol, stream):
    """A text no request could carry (a lone surrogate) still makes an answer, and every text reads back as given."""
    for text in [*TEXTS.values(), "lone \ud800 surrogate"]:
        body = protocol.exhausted(_asked(protocol, stream), text)
        assert text in _strings(_payloads(body) if stream else json.loads(body)), text


def _strings(value) -> set[str]:
    """Every string in a JSON value."""
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, list):
        return set().union(*map(_strings, value)) if value else set()
    return {value} if isinstance(value, str) else set()


@pytest.mark.parametrize("protocol", [CHAT, MESSAGES, RESPONSES], ids=lambda p: p.name)
def test_each_answer_has_an_id_of_its_own(protocol):
    prefix = {CHAT: "chatcmpl-bamasc-", MESSAGES: "msg_bamasc_", RESPONSES: "resp_bamasc_"}[protocol]
    ids = {json.loads(protocol.exhausted(_asked(protocol, False), "spent"))["id"] for _ in range(20)}
    assert len(ids) == 20 and all(found.startswith(prefix) for found in ids)


# ------------------------------------------------------------ OpenAI chat completions

@pytest.mark.parametrize("choices", [1, 3])
@pytest.mark.parametrize("text", TEXT_IDS)
def test_openai_chat_reads_the_answer(text, choices):
    text, seen = TEXTS[text], []
    reply = _openai(CHAT, text, seen).chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "spend it"}], tools=[OPENAI_TOOL], n=choices)
    assert len(seen) == 1 and reply.model == MODEL and reply.id.startswith("chatcmpl-bamasc-")
    assert [choice.index for choice in reply.choices] == list(range(choices))
    for choice in reply.choices:
        assert choice.message.content == text and choice.message.role == "assistant"
        assert choice.finish_reason == "stop" and not choice.message.tool_calls
    assert (reply.usage.prompt_tokens, reply.usage.completion_tokens, reply.usage.total_tokens) == (0, 0, 0)


@pytest.mark.parametrize("text", TEXT_IDS)
def test_openai_chat_stream_reads_the_answer_in_the_common_loop(text):
    text, seen = TEXTS[text], []
    client = _openai(CHAT, text, seen)
    chunks = list(client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "spend it"}],
                                                 tools=[OPENAI_TOOL], stream=True))
    said = ""
    for chunk in chunks:
        said += chunk.choices[0].delta.content or ""
    assert said == text
    assert [chunk.choices[0].finish_reason for chunk in chunks if chunk.choices[0].finish_reason] == ["stop"]
    assert not any(chunk.choices[0].delta.tool_calls for chunk in chunks)
    assert {chunk.model for chunk in chunks} == {MODEL} and len({chunk.id for chunk in chunks}) == 1
    usage = chunks[-1].usage
    assert (usage.prompt_tokens, usage.completion_tokens, usage.total_tokens) == (0, 0, 0)


@pytest.mark.parametrize("text", TEXT_IDS)
def test_openai_chat_stream_helper_and_n_choices_read_the_answer(text):
    text, seen = TEXTS[text], []
    client = _openai(CHAT, text, seen)
    with client.chat.completions.stream(model=MODEL, messages=[{"role": "user", "content": "spend it"}],
                                        tools=[OPENAI_TOOL], stream_options={"include_usage": True}) as stream:
        final = stream.get_final_completion()
    assert final.choices[0].message.content == text and final.choices[0].finish_reason == "stop"
    assert not final.choices[0].message.tool_calls and final.usage.total_tokens == 0
    said: dict[int, str] = {}
    for chunk in client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "spend it"}],
                                                n=3, stream=True):
        for choice in chunk.choices:
            said[choice.index] = said.get(choice.index, "") + (choice.delta.content or "")
    assert said == {0: text, 1: text, 2: text}


# ------------------------------------------------------------ OpenAI Responses

def _responses_usage_is_zero(usage) -> bool:
    return (usage.input_tokens, usage.output_tokens, usage.total_tokens,
            usage.input_tokens_details.cached_tokens, usage.output_tokens_details.reasoning_tokens) == (0, 0, 0, 0, 0)


@pytest.mark.parametrize("text", TEXT_IDS)
def test_openai_responses_reads_the_answer(text):
    text, seen = TEXTS[text], []
    reply = _openai(RESPONSES, text, seen).responses.create(model=MODEL, input="spend it", tools=[RESPONSES_TOOL])
    assert len(seen) == 1 and reply.model == MODEL and reply.id.startswith("resp_bamasc_")
    assert reply.output_text == text and reply.status == "completed" and reply.error is None
    assert [item.type for item in reply.output] == ["message"]
    assert _responses_usage_is_zero(reply.usage)


@pytest.mark.parametrize("text", TEXT_IDS)
def test_openai_responses_stream_reads_the_answer(text):
    text, seen = TEXTS[text], []
    client = _openai(RESPONSES, text, seen)
    with client.responses.stream(model=MODEL, input="spend it", tools=[RESPONSES_TOOL]) as stream:
        events = list(stream)
        final = stream.get_final_response()
    assert [event.type for event in events] == RESPONSES_EVENTS
    assert "".join(event.delta for event in events if event.type == "response.output_text.delta") == text
    assert [event.sequence_number for event in events] == list(range(len(RESPONSES_EVENTS)))
    assert final.output_text == text and final.status == "completed" and final.model == MODEL
    assert [item.type for item in final.output] == ["message"] and _responses_usage_is_zero(final.usage)
    raw = list(client.responses.create(model=MODEL, input="spend it", stream=True))
    assert [event.type for event in raw] == RESPONSES_EVENTS and raw[-1].response.output_text == text


# ------------------------------------------------------------ Anthropic messages

@pytest.mark.parametrize("text", TEXT_IDS)
def test_anthropic_messages_reads_the_answer(text):
    text, seen = TEXTS[text], []
    reply = _anthropic(text, seen).messages.create(model=CLAUDE, max_tokens=64, tools=[ANTHROPIC_TOOL],
                                                   messages=[{"role": "user", "content": "spend it"}])
    assert len(seen) == 1 and reply.model == CLAUDE and reply.id.startswith("msg_bamasc_")
    assert [(block.type, block.text) for block in reply.content] == [("text", text)]
    assert reply.stop_reason == "end_turn" and reply.role == "assistant"
    assert (reply.usage.input_tokens, reply.usage.output_tokens) == (0, 0)


@pytest.mark.parametrize("text", TEXT_IDS)
def test_anthropic_messages_stream_reads_the_answer(text):
    text, seen = TEXTS[text], []
    client = _anthropic(text, seen)
    with client.messages.stream(model=CLAUDE, max_tokens=64, tools=[ANTHROPIC_TOOL],
                                messages=[{"role": "user", "content": "spend it"}]) as stream:
        said = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert said == text
    assert [(block.type, block.text) for block in final.content] == [("text", text)]
    assert final.stop_reason == "end_turn" and final.model == CLAUDE
    assert (final.usage.input_tokens, final.usage.output_tokens) == (0, 0)
    raw = list(client.messages.create(model=CLAUDE, max_tokens=64, stream=True,
                                      messages=[{"role": "user", "content": "spend it"}]))
    assert [event.type for event in raw] == MESSAGES_EVENTS
    assert raw[-2].delta.stop_reason == "end_turn" and raw[-2].usage.output_tokens == 0


# ------------------------------------------------------------ agent frameworks: the loop ends with the answer

def _agent(model):
    import agents

    agents.set_tracing_disabled(True)
    called: list[str] = []

    @agents.function_tool
    def spend(what: str) -> str:
        """Spend money on `what`."""
        called.append(what)
        return "spent"

    return agents.Agent(name="spender", instructions="Spend the budget.", tools=[spend], model=model), called


@pytest.mark.parametrize("streamed", [False, True], ids=["run", "streamed"])
@pytest.mark.parametrize("protocol", [RESPONSES, CHAT], ids=lambda p: p.name)
@pytest.mark.parametrize("text", TEXT_IDS)
def test_an_openai_agent_ends_with_the_answer_and_calls_no_tool(text, protocol, streamed):
    import agents

    text, seen = TEXTS[text], []
    client = _async_openai(protocol, text, seen)
    if protocol is RESPONSES:
        model = agents.OpenAIResponsesModel(model=MODEL, openai_client=client)
    else:
        model = agents.OpenAIChatCompletionsModel(model=MODEL, openai_client=client)
    agent, called = _agent(model)
    if streamed:
        async def run():
            result = agents.Runner.run_streamed(agent, "Spend it all.")
            async for _ in result.stream_events():
                pass
            return result

        result = asyncio.run(run())
    else:
        result = agents.Runner.run_sync(agent, "Spend it all.")
    assert result.final_output == text and called == []
    assert len(seen) == 1 and seen[0][1].get("stream", False) is streamed
    assert [tool.get("name") or tool["function"]["name"] for tool in seen[0][1]["tools"]] == ["spend"]


@pytest.mark.parametrize("text", TEXT_IDS)
def test_langchain_chat_openai_ends_with_the_answer(text):
    langchain_openai = pytest.importorskip("langchain_openai")
    text, seen = TEXTS[text], []
    http = _http(openai)
    transport = _answering(CHAT, text, seen, http)
    chat = langchain_openai.ChatOpenAI(model=MODEL, api_key="sk-test", base_url="http://proxy.invalid/v1",
                                       max_retries=0, http_client=http.Client(transport=transport))
    reply = chat.bind_tools([OPENAI_TOOL]).invoke("Spend it all.")
    assert reply.content == text and reply.tool_calls == []
    assert reply.response_metadata["finish_reason"] == "stop" and reply.usage_metadata["total_tokens"] == 0
    chunks = list(chat.bind_tools([OPENAI_TOOL]).stream("Spend it all."))
    assert "".join(chunk.content for chunk in chunks) == text
    assert not any(chunk.tool_call_chunks for chunk in chunks)
    assert [path for path, _ in seen] == ["/v1/chat/completions"] * 2 and seen[1][1]["stream"] is True
