"""The OpenAI Responses API through the proxy, against an upstream that bills its own tokens: the official SDK,
streaming and not, function tools, the OpenAI Agents SDK on its default model; and what cannot be bounded, refused."""

from __future__ import annotations

import json
import random

import httpx
import pytest

pytest.importorskip("starlette", reason="the proxy extra (starlette, uvicorn) is not installed")
openai = pytest.importorskip("openai", reason="the openai SDK is not installed (the openai extra)")

from tests.proxy.helpers import TOKEN, ThreadProxy, config_text  # noqa: E402
from tests.proxy.upstream import Upstream  # noqa: E402

PRICE_IN, PRICE_OUT = 0.4, 1.6  # gpt-4.1-mini's, as config_text declares them


@pytest.fixture(scope="module")
def upstream():
    server = Upstream(output=300).start()
    yield server
    server.stop()


@pytest.fixture
def proxy(upstream, tmp_path, monkeypatch):
    monkeypatch.setenv("UPSTREAM_KEY", "upstream-key")
    path = tmp_path / "proxy.bam"
    path.write_text(config_text(upstream.url, suffixes=("", "-drop", "-earlyusage", "-busy")), encoding="utf-8")
    server = ThreadProxy(str(path), trace=str(tmp_path / "trace.jsonl"))
    yield server
    server.stop()


def _client(proxy, scope: str, budget: float):
    return openai.OpenAI(base_url=f"{proxy.url}/v1", api_key=TOKEN, max_retries=0,
                         default_headers={"x-bamasc-task": scope, "x-bamasc-budget": f"{budget:g}"})


def _billed(calls) -> float:
    return sum(call["prompt"] * PRICE_IN + call["completion"] * PRICE_OUT for call in calls if call["billed"])


def _lines(proxy, scope: str) -> list[dict]:
    lines = [json.loads(line) for line in open(proxy.ledger.trace.path, encoding="utf-8")]
    return [line for line in lines if line["task_id"] == scope]


def _charged(proxy, scope: str) -> float:
    return sum(line["charged"] for line in _lines(proxy, scope) if line["type"] == "call")


def test_a_response_is_reserved_capped_and_settled_to_the_upstreams_own_bill(proxy, upstream):
    before = len(upstream.calls)
    reply = _client(proxy, "plain", 5000).responses.create(model="gpt-4.1-mini", input="say some words",
                                                           instructions="be brief", max_output_tokens=100)
    assert reply.usage.output_tokens == 100 and reply.output_text.split() == ["word"] * 100
    call = upstream.calls[before]
    assert call["protocol"] == "responses" and call["model"] == "gpt-4.1-mini" and call["cap"] == 100
    assert _charged(proxy, "plain") == pytest.approx(_billed([call]))


def test_a_stream_is_settled_from_its_completed_event(proxy, upstream):
    before = len(upstream.calls)
    with _client(proxy, "streamed", 5000).responses.stream(model="gpt-4.1-mini", input="words please",
                                                          max_output_tokens=400) as stream:
        text = "".join(event.delta for event in stream if event.type == "response.output_text.delta")
        final = stream.get_final_response()
    assert text.split() == ["word"] * 300 and final.usage.output_tokens == 300
    assert _charged(proxy, "streamed") == pytest.approx(_billed(upstream.calls[before:]))


@pytest.mark.parametrize("stream", [False, True])
def test_a_scope_runs_out_with_a_402_and_is_never_billed_past_its_budget(proxy, upstream, stream):
    """Calls until the scope refuses, for a family of budgets: the upstream's own bill stays within each."""
    rng = random.Random(11 if stream else 5)
    for budget in (rng.uniform(60, 1500) for _ in range(4)):
        scope = f"runs-out-{stream}-{budget:.0f}"
        client = _client(proxy, scope, budget)
        before = len(upstream.calls)
        refused = None
        for _ in range(60):
            try:
                if stream:
                    with client.responses.stream(model="gpt-4.1-mini", input="more words " * 5) as events:
                        events.until_done()  # cut short (`response.incomplete`) where the cap was lowered
                else:
                    client.responses.create(model="gpt-4.1-mini", input="more words " * 5)
            except openai.APIStatusError as error:
                refused = error
                break
        assert refused is not None and refused.status_code == 402
        assert refused.body["type"] == "budget_exceeded"
        assert _billed(upstream.calls[before:]) <= budget + 1e-6
        assert _charged(proxy, scope) == pytest.approx(_billed(upstream.calls[before:]))


def test_a_stream_whose_only_usage_came_early_keeps_its_whole_hold(proxy, upstream):
    """The input's usage (0 output tokens) as the stream starts and none at its end: the early count is not the
    bill, so the whole reservation is kept, and the upstream's bill stays within it."""
    before = len(upstream.calls)
    with _client(proxy, "early", 5000).responses.stream(model="gpt-4.1-mini-earlyusage", input="hello",
                                                       max_output_tokens=200) as stream:
        stream.until_done()
    [call] = [line for line in _lines(proxy, "early") if line["type"] == "call"]
    assert call["outcome"] == "kept" and call["charged"] == call["reserved"]
    assert _billed(upstream.calls[before:]) <= call["charged"]


@pytest.mark.parametrize("stream", [False, True])
def test_a_reply_cut_short_keeps_its_whole_hold(proxy, upstream, stream):
    body = {"model": "gpt-4.1-mini-drop", "input": "hello", "max_output_tokens": 200, "stream": stream}
    response = httpx.post(f"{proxy.url}/v1/responses", json=body, timeout=60,
                          headers={"authorization": f"Bearer {TOKEN}", "x-bamasc-task": f"cut-{stream}",
                                   "x-bamasc-budget": "5000"})
    if not stream:
        assert response.status_code == 200
    [call] = [line for line in _lines(proxy, f"cut-{stream}") if line["type"] == "call"]
    assert call["outcome"] == "kept" and call["charged"] == call["reserved"] > 0


def test_a_function_tool_round_trip_is_metered_call_by_call(proxy, upstream):
    client = _client(proxy, "tools", 20000)
    tools = [{"type": "function", "name": "lookup", "description": "find a fact",
              "parameters": {"type": "object", "properties": {}}, "strict": False}]
    before = len(upstream.calls)
    first = client.responses.create(model="gpt-4.1-mini", input="what is it?", tools=tools, max_output_tokens=50)
    [asked] = [item for item in first.output if item.type == "function_call"]
    follow = [{"role": "user", "content": "what is it?"}, asked.model_dump(exclude_none=True),
              {"type": "function_call_output", "call_id": asked.call_id, "output": "forty-two"}]
    second = client.responses.create(model="gpt-4.1-mini", input=follow, tools=tools, max_output_tokens=50)
    assert second.output_text.split() == ["word"] * 50
    assert len([line for line in _lines(proxy, "tools") if line["type"] == "call"]) == 2
    assert _charged(proxy, "tools") == pytest.approx(_billed(upstream.calls[before:]))


_UNBOUNDED = [
    ({"previous_response_id": "resp_abc"}, "previous_response_id"),
    ({"conversation": "conv_abc"}, "conversation"),
    ({"conversation": {"id": "conv_abc"}}, "conversation"),
    ({"prompt": {"id": "pmpt_abc"}}, "prompt"),
    ({"background": True}, "background"),
    ({"service_tier": "priority"}, "service_tier"),
    ({"input": [{"type": "item_reference", "id": "msg_abc"}]}, "input"),
    ({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "https://x/y.png"}]}]}, "input"),
    ({"input": [{"role": "user", "content": [{"type": "input_file", "file_id": "file_1"}]}]}, "input"),
    ({"input": [{"type": "function_call_output", "call_id": "c",
                 "output": [{"type": "input_image", "image_url": "https://x/y.png"}]}]}, "input"),
    ({"input": ""}, "input"), ({"input": []}, "input"), ({"input": 7}, "input"), ({"input": ["text"]}, "input"),
    ({"max_output_tokens": 0}, "max_output_tokens"), ({"max_output_tokens": "9"}, "max_output_tokens"),
    ({"instructions": ["x"]}, "instructions"), ({"stream": "yes"}, "stream"), ({"tools": {}}, "tools"),
] + [({"tools": [{"type": kind}]}, "tools") for kind in (
    "web_search", "web_search_preview", "file_search", "code_interpreter", "computer_use_preview", "image_generation",
    "mcp", "local_shell", None)]


@pytest.mark.parametrize("extra, field", _UNBOUNDED, ids=[json.dumps(extra)[:60] for extra, _ in _UNBOUNDED])
def test_what_the_proxy_cannot_bound_is_refused_before_anything_is_reserved(proxy, upstream, extra, field):
    body = {"model": "gpt-4.1-mini", "input": "hi", **extra}
    before = len(upstream.calls)
    response = httpx.post(f"{proxy.url}/v1/responses", json=body, timeout=60,
                          headers={"authorization": f"Bearer {TOKEN}", "x-bamasc-task": "refused",
                                   "x-bamasc-budget": "5000"})
    assert response.status_code == 400, response.text
    assert response.json()["error"]["param"] == field
    assert len(upstream.calls) == before and _lines(proxy, "refused") == []


def test_the_openai_agents_sdk_on_its_default_model_with_a_function_tool_stays_within_its_scope(proxy, upstream):
    """The Agents SDK's default model speaks the Responses API. Runs until the scope's budget ends them with a clean
    API error: the upstream's own bill stays within the budget, and the tool ran between metered calls."""
    agents = pytest.importorskip("agents", reason="the OpenAI Agents SDK is not installed (the test extra)")
    budget = 3000.0
    client = openai.AsyncOpenAI(base_url=f"{proxy.url}/v1", api_key=TOKEN, max_retries=0,
                                default_headers={"x-bamasc-task": "agents", "x-bamasc-budget": f"{budget:g}"})
    ran = []

    @agents.function_tool
    def lookup() -> str:
        """Find the fact the question needs."""
        ran.append(1)
        return "forty-two"

    model = agents.OpenAIResponsesModel(model="gpt-4.1-mini", openai_client=client)
    agent = agents.Agent(name="asker", instructions="answer with the tool", tools=[lookup], model=model,
                         model_settings=agents.ModelSettings(max_tokens=400))
    before = len(upstream.calls)
    ended, answered, cut = None, 0, 0
    agents.set_tracing_disabled(True)
    for _ in range(30):
        try:
            result = agents.Runner.run_sync(agent, "what is the fact?")
        except agents.exceptions.ModelBehaviorError:
            cut += 1  # the scope's last µ$ paid for a shorter answer than the agent asked (`response.incomplete`)
            continue
        except openai.APIStatusError as error:
            ended = error
            break
        answered += 1
        assert result.final_output.split() == ["word"] * 300
    assert answered >= 2
    assert ended is not None and ended.status_code == 402 and "budget" in ended.message
    assert ran, "the agent never called its tool through the proxy"
    assert _billed(upstream.calls[before:]) <= budget + 1e-6
    assert _charged(proxy, "agents") == pytest.approx(_billed(upstream.calls[before:]))
