"""What an upstream may bill beyond the plain prompt and the cap: cache writes, tool prompts, caps a server reads
differently, and features billed outside tokens. Each is reserved for, or refused before it is forwarded."""

from __future__ import annotations

import json
import time

import httpx
import pytest

pytest.importorskip("starlette", reason="the proxy extra (starlette, uvicorn) is not installed")

from tests.proxy.helpers import TOKEN, ThreadProxy, config_text  # noqa: E402
from tests.proxy.upstream import Upstream  # noqa: E402


@pytest.fixture(scope="module")
def upstream():
    server = Upstream(output=2000).start()
    yield server
    server.stop()


@pytest.fixture
def proxy(upstream, tmp_path, monkeypatch):
    monkeypatch.setenv("UPSTREAM_KEY", "upstream-key")
    path = tmp_path / "proxy.bam"
    # Anthropic's cache-write premium (1.25 times input), declared as the catalogue declares it.
    cached = (f"model cached {{\n  provider = anthropic\n  name = \"claude-haiku-4-5-cachewrite\"\n"
              f"  base_url = \"{upstream.url}\"\n  api_key = env(\"UPSTREAM_KEY\")\n  tier = 1\n"
              f"  price {{ input = 1.0  output = 5.0  cache_write = 1.25 }}\n}}\n")
    tiered = (f"model tiered {{\n  provider = anthropic\n  name = \"claude-sonnet-4-5\"\n"
              f"  base_url = \"{upstream.url}\"\n  api_key = env(\"UPSTREAM_KEY\")\n  tier = 1\n"
              f"  price {{ input = 3.0  output = 15.0  long_prompt {{ above = 200000  input = 6.0  output = 22.5 }} }}\n}}\n")
    path.write_text(config_text(upstream.url, suffixes=("", "-legacy", "-nodelta", "-earlyusage", "-perbyte")) + cached + tiered,
                    encoding="utf-8")
    server = ThreadProxy(str(path), trace=str(tmp_path / "trace.jsonl"))
    yield server
    server.stop()


def _post(proxy, body, scope: str, budget: float, path: str = "/v1/messages") -> httpx.Response:
    headers = {"authorization": f"Bearer {TOKEN}", "x-bamasc-task": scope, "x-bamasc-budget": f"{budget:g}",
               "content-type": "application/json"}
    # json.dumps escapes a lone surrogate as \ud800, as a hostile client may send it.
    return httpx.post(f"{proxy.url}{path}", content=json.dumps(body).encode(), headers=headers, timeout=60)


def _charged(proxy, scope: str) -> float:
    lines = [json.loads(line) for line in open(proxy.ledger.trace.path, encoding="utf-8")]
    return sum(line["charged"] for line in lines if line["type"] == "call" and line["task_id"] == scope)


def test_a_prompt_written_to_the_cache_is_reserved_at_the_cache_write_rate(proxy, upstream):
    # 20,000 bytes of system prompt marked for the cache: an upstream may bill each byte as a token written
    # (1.25 µ$ each), 25,000 µ$, where the plain input rate reserves about 20,200.
    system = [{"type": "text", "text": "x" * 20_000, "cache_control": {"type": "ephemeral"}}]
    body = {"model": "claude-haiku-4-5-cachewrite", "max_tokens": 2000, "system": system,
            "messages": [{"role": "user", "content": "hi"}]}
    calls = len(upstream.calls)
    response = _post(proxy, body, "cache-write", 22_000)
    assert response.status_code == 402, response.text
    assert len(upstream.calls) == calls
    assert proxy.scope("cache-write")["charged"] == 0
    # With room for the dearest rate it goes through, and stays within its budget.
    assert _post(proxy, body, "cache-write-rich", 40_000).status_code == 200
    assert 25_000 <= _charged(proxy, "cache-write-rich") <= 40_000
    assert proxy.scope("cache-write-rich")["status"] == "open"


def test_a_stream_is_charged_the_cache_writes_its_first_event_reported(proxy, upstream):
    system = [{"type": "text", "text": "x" * 20_000, "cache_control": {"type": "ephemeral"}}]
    body = {"model": "claude-haiku-4-5-cachewrite", "max_tokens": 100, "system": system, "stream": True,
            "messages": [{"role": "user", "content": "hi"}]}
    with httpx.stream("POST", f"{proxy.url}/v1/messages", json=body, timeout=60,
                      headers={"authorization": f"Bearer {TOKEN}", "x-bamasc-task": "streamed-write",
                               "x-bamasc-budget": "40000"}) as response:
        assert response.status_code == 200
        response.read()
    for _ in range(500):  # the stream's end is handled after the client has its last byte
        if proxy.scope("streamed-write")["held"] == 0:
            break
        time.sleep(0.02)
    # message_start reported 20,002 tokens written to the cache (1.25 µ$ each); message_delta left them null.
    assert _charged(proxy, "streamed-write") == pytest.approx(20_002 * 1.25 + 100 * 5.0)


def test_an_anthropic_stream_without_its_final_usage_keeps_its_hold(proxy, upstream):
    # message_start counts 1 output token; without message_delta's count the output's bill is unknown.
    body = {"model": "claude-haiku-4-5-nodelta", "max_tokens": 300, "stream": True,
            "messages": [{"role": "user", "content": "hi"}]}
    with httpx.stream("POST", f"{proxy.url}/v1/messages", json=body, timeout=60,
                      headers={"authorization": f"Bearer {TOKEN}", "x-bamasc-task": "no-delta",
                               "x-bamasc-budget": "40000"}) as response:
        assert response.status_code == 200
        response.read()
    for _ in range(500):  # the stream's end is handled after the client has its last byte
        if proxy.scope("no-delta")["held"] == 0:
            break
        time.sleep(0.02)
    assert upstream.calls[-1]["completion"] == 300
    assert _charged(proxy, "no-delta") >= 300 * 5.0  # at least what the upstream billed for its output


def test_a_one_hour_cache_write_is_refused(proxy, upstream):
    system = [{"type": "text", "text": "policy", "cache_control": {"type": "ephemeral", "ttl": "1h"}}]
    body = {"model": "claude-haiku-4-5", "max_tokens": 100, "system": system,
            "messages": [{"role": "user", "content": "hi"}]}
    calls = len(upstream.calls)
    response = _post(proxy, body, "one-hour", 5000)
    assert response.status_code == 400 and "ttl" in response.json()["error"]["message"]
    assert len(upstream.calls) == calls


def test_anthropics_tool_use_system_prompt_is_reserved(proxy, upstream):
    # A tiny tool is a few dozen bytes, but Anthropic adds its tool-use system prompt to every request with tools.
    body = {"model": "claude-haiku-4-5", "max_tokens": 2000, "messages": [{"role": "user", "content": "hi"}],
            "tools": [{"name": "f", "input_schema": {"type": "object"}}]}
    for index in range(3):
        _post(proxy, body, "tools", 900)
    view = proxy.scope("tools")
    assert view["calls"] >= 1 and view["status"] == "open", view
    assert _charged(proxy, "tools") <= 900


@pytest.mark.parametrize(
    ("path", "body", "says"),
    [
        ("/v1/messages", {"tools": [{"type": "web_search_20250305", "name": "web_search"}]}, "web_search_20250305"),
        ("/v1/messages", {"tools": [{"type": "bash_20250124", "name": "bash"}]}, "bash_20250124"),
        ("/v1/messages", {"tools": [{"type": "\ud800", "name": "x"}]}, "tool is defined"),  # echoed, not UTF-8
        ("/v1/messages", {"mcp_servers": [{"type": "url", "url": "https://example.com/sse", "name": "m"}]},
         "mcp_servers"),
        # An image by URL is a few bytes and about 1,600 tokens, also inside a tool's result.
        ("/v1/messages", {"messages": [
            {"role": "user", "content": "look"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "f", "input": {}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": [
                {"type": "image", "source": {"type": "url", "url": "https://example.com/a.png"}}]}]}],
          "tools": [{"name": "f", "input_schema": {"type": "object"}}]}, "image"),
        ("/v1/chat/completions", {"web_search_options": {}}, "web_search_options"),
        ("/v1/chat/completions", {"modalities": ["text", "audio"], "audio": {"voice": "alloy", "format": "wav"}},
         "audio"),
        ("/v1/chat/completions", {"prediction": {"type": "content", "content": "draft"}}, "prediction"),
        ("/v1/chat/completions", {"service_tier": "priority"}, "service_tier"),
    ],
)
def test_features_billed_past_the_prompt_and_the_cap_are_refused(proxy, upstream, path, body, says):
    model = "claude-haiku-4-5" if path == "/v1/messages" else "gpt-4.1-mini"
    calls = len(upstream.calls)
    response = _post(proxy, {"model": model, "max_tokens": 50, "messages": [{"role": "user", "content": "hi"}], **body},
                     "extras", 5000, path)
    assert response.status_code == 400, response.text
    assert says in response.text
    assert len(upstream.calls) == calls


@pytest.mark.parametrize("cap", [{"max_completion_tokens": 20}, {"max_completion_tokens": 20, "max_tokens": 5000}])
def test_a_server_that_reads_only_max_tokens_gets_the_cap(proxy, upstream, cap):
    body = {"model": "gpt-4.1-mini-legacy", "messages": [{"role": "user", "content": "hi"}], **cap}
    scope = f"legacy-{len(cap)}"
    assert _post(proxy, body, scope, 5000, "/v1/chat/completions").status_code == 200
    assert upstream.calls[-1]["completion"] <= 20
    assert proxy.scope(scope)["status"] == "open"


@pytest.mark.parametrize("path, model", [("/v1/chat/completions", "gpt-4.1-mini-earlyusage"),
                                         ("/v1/messages", "claude-haiku-4-5-earlyusage")])
@pytest.mark.parametrize("calls", [1, 3])
def test_a_stream_that_reports_its_usage_before_its_output_keeps_its_hold(proxy, upstream, path, model, calls):
    """A usage reported early (0 or 1 output tokens, then the output, then no usage) counts none of the output
    after it: the hold is charged in full, so the scope never pays less than the upstream bills."""
    cap = 300
    scope = f"early-{model}-{calls}"
    for _ in range(calls):
        body = {"model": model, "max_tokens": cap, "stream": True, "messages": [{"role": "user", "content": "hi"}]}
        with httpx.stream("POST", f"{proxy.url}{path}", json=body, timeout=60,
                          headers={"authorization": f"Bearer {TOKEN}", "x-bamasc-task": scope,
                                   "x-bamasc-budget": "40000"}) as response:
            assert response.status_code == 200
            response.read()
        assert upstream.calls[-1]["completion"] == cap  # it wrote (and bills) the whole cap
    for _ in range(500):  # the stream's end is handled after the client has its last byte
        if proxy.scope(scope)["held"] == 0:
            break
        time.sleep(0.02)
    price_out = 5.0 if model.startswith("claude") else 1.6
    assert _charged(proxy, scope) >= calls * cap * price_out


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("typed, declared, path", [
    ("m0_0", "gpt-4.1-mini", "/v1/chat/completions"), ("gpt-4.1-mini", "gpt-4.1-mini", "/v1/chat/completions"),
    ("m0_1", "gpt-4.1-mini-legacy", "/v1/chat/completions"),
    ("m1_0", "claude-haiku-4-5", "/v1/messages"), ("m1_2", "claude-haiku-4-5-nodelta", "/v1/messages"),
])
def test_a_model_asked_for_by_its_bam_name_goes_upstream_as_its_declared_name(proxy, upstream, typed, declared,
                                                                               path, stream):
    """The reservation is at the declared model's prices, so the upstream must be asked for that model."""
    body = {"model": typed, "max_tokens": 50, "stream": stream, "messages": [{"role": "user", "content": "hi"}]}
    response = _post(proxy, body, f"alias-{typed}-{stream}", 40_000, path)
    assert response.status_code == 200, response.text
    assert upstream.calls[-1]["model"] == declared


@pytest.mark.parametrize("asks_usage", [False, True])
def test_the_openai_sdks_stream_loop_reads_choices_0_and_the_usage_chunk_only_when_asked(proxy, upstream, asks_usage):
    """The proxy asks every stream for its usage; a client that did not ask must not get that chunk (no choices),
    or the most common loop, `chunk.choices[0]`, raises IndexError through the proxy and not without it."""
    import openai

    scope = f"sdk-loop-{asks_usage}"
    client = openai.OpenAI(base_url=f"{proxy.url}/v1", api_key=TOKEN, max_retries=0,
                           default_headers={"x-bamasc-task": scope, "x-bamasc-budget": "40000"})
    extra = {"stream_options": {"include_usage": True}} if asks_usage else {}
    text, usage = [], []
    for chunk in client.chat.completions.create(model="gpt-4.1-mini", max_tokens=120, stream=True,
                                                messages=[{"role": "user", "content": "say words"}], **extra):
        if chunk.usage is not None:
            usage.append(chunk.usage)
            assert asks_usage and chunk.choices == []
            continue
        text.append(chunk.choices[0].delta.content or "")
    assert "".join(text).split() == ["word"] * 120
    assert [u.completion_tokens for u in usage] == ([120] if asks_usage else [])
    for _ in range(500):  # the stream's end is handled after the client has its last byte
        if proxy.scope(scope)["held"] == 0:
            break
        time.sleep(0.02)
    # Settled at the upstream's own usage, which the proxy read even where the client did not see it.
    assert _charged(proxy, scope) == pytest.approx(upstream.calls[-1]["prompt"] * 0.4 + 120 * 1.6)


def test_the_usage_chunk_is_taken_out_wherever_the_bytes_are_split():
    """Every split of a stream into pieces (as TCP delivers it) passes on the same events, the usage chunk out,
    and reads the same usage."""
    import random

    from bamasc.metering.protocols import CHAT, StreamReader
    from bamasc.prices import Usage

    def event(data) -> bytes:
        return f"data: {json.dumps(data)}\n\n".encode()

    content = [event({"choices": [{"index": 0, "delta": {"content": f"w{i} "}}]}) for i in range(5)]
    usage = event({"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 5}})
    for ending in (b"\n\n", b"\r\n\r\n"):
        stream = b"".join(content).replace(b"\n\n", ending) + usage.replace(b"\n\n", ending) + b"data: [DONE]" + ending
        expected = stream.replace(usage.replace(b"\n\n", ending), b"")
        rng = random.Random(7)
        for _ in range(300):
            cuts = sorted(rng.sample(range(1, len(stream)), rng.randint(1, 40)))
            pieces = [stream[a:b] for a, b in zip([0, *cuts], [*cuts, len(stream)])]
            reader = StreamReader(CHAT, hide=True)
            assert b"".join(reader.feed(piece) for piece in pieces) + reader.rest() == expected
            assert reader.usage() == Usage(3, 5)


@pytest.mark.parametrize("model, beta, passed", [
    ("claude-haiku-4-5", "context-1m-2025-08-07", False),  # long prompts at twice the input rate, no tier declared
    ("claude-haiku-4-5", "prompt-caching-2024-07-31, context-1m-2025-08-07", False),
    ("claude-haiku-4-5", "some-new-feature-2026-01-01", False),
    ("claude-haiku-4-5", "Context-1M-2025-08-07", False),
    ("claude-haiku-4-5", "prompt-caching-2024-07-31", True),
    ("claude-haiku-4-5", "token-efficient-tools-2025-02-19,interleaved-thinking-2025-05-14", True),
    ("tiered", "context-1m-2025-08-07", True),  # the price declares the long-prompt tier: reserved at it
])
def test_an_anthropic_beta_the_reservation_cannot_bound_is_refused_before_it_is_forwarded(proxy, upstream, model,
                                                                                          beta, passed):
    body = {"model": model, "max_tokens": 50, "messages": [{"role": "user", "content": "hi"}]}
    calls = len(upstream.calls)
    response = httpx.post(f"{proxy.url}/v1/messages", json=body, timeout=60,
                          headers={"authorization": f"Bearer {TOKEN}", "x-bamasc-task": f"beta-{model}-{beta}".replace(" ", ""),
                                   "x-bamasc-budget": "40000", "anthropic-beta": beta})
    if passed:
        assert response.status_code == 200, response.text
        assert len(upstream.calls) == calls + 1
    else:
        assert response.status_code == 400 and "anthropic-beta" in response.json()["error"]["message"]
        assert len(upstream.calls) == calls


@pytest.mark.skipif(not __import__("bamasc.runtime.tokens").runtime.tokens.tokenizer_available(),
                    reason="the offline OpenAI tokenizer (the tokenizers extra, bpe-openai) is not installed")
@pytest.mark.parametrize("text", ["abcdefgh" * 500, "x" * 4000, "日本語のテキスト" * 200, "🙂" * 1000])
def test_a_model_named_like_openais_behind_another_server_is_bounded_by_its_bytes(proxy, upstream, text):
    """Its name says nothing of the tokenizer behind another base_url: counted with OpenAI's, a prompt this
    server bills a token per byte was reserved at a fraction of its bill."""
    budget = 1000.0
    body = {"model": "gpt-4.1-mini-perbyte", "max_tokens": 50, "messages": [{"role": "user", "content": text}]}
    scope = f"perbyte-{len(text)}-{text[0].encode().hex()}"
    calls = len(upstream.calls)
    response = _post(proxy, body, scope, budget, "/v1/chat/completions")
    assert response.status_code == 402, response.text  # every text is over 1,000 µ$ at a token per byte
    assert len(upstream.calls) == calls and _charged(proxy, scope) == 0  # refused before it was forwarded
