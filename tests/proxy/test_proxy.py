"""`bamasc proxy` with the official SDKs against an honest upstream: no scope spends past its budget, whatever the client does."""

from __future__ import annotations

import asyncio
import json
import os

import pytest

pytest.importorskip("starlette", reason="the proxy extra (starlette, uvicorn) is not installed")

import anthropic  # noqa: E402
import httpx  # noqa: E402
import openai  # noqa: E402

from tests.proxy.helpers import PRICES, TOKEN, ThreadProxy, charged_per_scope, config_text  # noqa: E402
from tests.proxy.upstream import Upstream  # noqa: E402

BUDGET = 556.0


@pytest.fixture(scope="module")
def upstream():
    server = Upstream(output=2000).start()
    yield server
    server.stop()


@pytest.fixture
def config(upstream, tmp_path, monkeypatch):
    monkeypatch.setenv("UPSTREAM_KEY", "upstream-key")
    path = tmp_path / "proxy.bam"
    path.write_text(config_text(upstream.url), encoding="utf-8")
    return str(path)


@pytest.fixture
def proxy(config, tmp_path):
    server = ThreadProxy(config, trace=str(tmp_path / "trace.jsonl"))
    yield server
    server.stop()


def openai_client(proxy, scope: str, budget: float | None = BUDGET) -> openai.OpenAI:
    headers = {"X-Bamasc-Task": scope, **({"X-Bamasc-Budget": f"{budget:g}"} if budget is not None else {})}
    return openai.OpenAI(base_url=f"{proxy.url}/v1", api_key=TOKEN, default_headers=headers, max_retries=0)


def anthropic_client(proxy, scope: str, budget: float = BUDGET) -> anthropic.Anthropic:
    headers = {"X-Bamasc-Task": scope, "X-Bamasc-Budget": f"{budget:g}"}
    return anthropic.Anthropic(base_url=proxy.url, api_key=TOKEN, default_headers=headers, max_retries=0)


def chain(client, calls: int = 3, **extra) -> tuple[int, list[str]]:
    """A 3-call chain that feeds each answer to the next; (calls answered, API errors seen)."""
    answered, errors, text = 0, [], "Plan a trip to the coast."
    for _ in range(calls):
        try:
            reply = client.chat.completions.create(model="gpt-4.1-mini", messages=[{"role": "user", "content": text}],
                                                   **extra)
        except openai.APIStatusError as problem:
            errors.append(f"{problem.status_code}: {problem.message}")
            continue
        answered += 1
        text = reply.choices[0].message.content[:200]
    return answered, errors


def test_a_chain_with_long_outputs_stays_within_each_scope_and_the_upstream_bills_what_the_trace_says(proxy, upstream, tmp_path):
    before = upstream.billed(_prices())
    for index in range(5):
        answered, errors = chain(openai_client(proxy, f"chain-{index}"))
        assert answered >= 1
        # The budget ends the chain with a clean API error that names it, never a forwarded call.
        assert errors and all(error.startswith("402: Error code: 402 - bamasc proxy: scope") and "556" in error for error in errors)
    proxy.stop()
    charged = charged_per_scope([str(tmp_path / "trace.jsonl")])
    assert set(charged) == {f"chain-{index}" for index in range(5)}
    assert all(0 < value <= BUDGET for value in charged.values())
    assert upstream.billed(_prices()) - before == pytest.approx(sum(charged.values()))


def test_a_client_cap_is_lowered_to_what_is_left_and_an_absent_one_is_set(proxy, upstream):
    client = openai_client(proxy, "caps")
    client.chat.completions.create(model="gpt-4.1-mini", messages=[{"role": "user", "content": "hi"}], max_tokens=20)
    assert upstream.calls[-1]["cap"] == 20  # a cap that fits is left alone
    client.chat.completions.create(model="gpt-4.1-mini", messages=[{"role": "user", "content": "hi"}], max_tokens=5000)
    sent = upstream.calls[-1]["cap"]
    assert 16 <= sent < 5000
    openai_client(proxy, "no-cap").chat.completions.create(model="gpt-4.1-mini", messages=[{"role": "user", "content": "hi"}])
    assert 16 <= upstream.calls[-1]["cap"] < 5000
    assert proxy.scope("caps")["charged"] <= BUDGET and proxy.scope("no-cap")["charged"] <= BUDGET


def test_the_anthropic_sdk_streaming_and_not_stays_within_its_scope(proxy, upstream):
    client = anthropic_client(proxy, "claude", budget=6000)
    outcomes = []
    for index in range(4):
        try:
            if index % 2:
                with client.messages.stream(model="claude-haiku-4-5", max_tokens=2000,
                                            messages=[{"role": "user", "content": "Tell me a story."}]) as stream:
                    outcomes.append(len(stream.get_final_text().split()))
            else:
                reply = client.messages.create(model="claude-haiku-4-5", max_tokens=2000,
                                               messages=[{"role": "user", "content": "Tell me a story."}])
                outcomes.append(reply.usage.output_tokens)
        except anthropic.APIStatusError as problem:
            assert problem.status_code == 402 and "bamasc proxy" in str(problem)
            outcomes.append("refused")
    assert "refused" in outcomes and outcomes[0] != "refused"
    view = proxy.scope("claude")
    assert view["charged"] <= 6000 and view["held"] == 0


def test_an_openai_stream_is_charged_what_the_upstream_bills_and_gets_no_usage_it_did_not_ask_for(proxy, upstream):
    before = upstream.billed(_prices())
    stream = openai_client(proxy, "streamed").chat.completions.create(
        model="gpt-4.1-mini", messages=[{"role": "user", "content": "count"}], stream=True)
    chunks = list(stream)
    # The proxy asked the upstream for usage on the client's behalf, read it, and passed on no chunk of it.
    assert chunks and all(chunk.choices and chunk.usage is None for chunk in chunks)
    view = proxy.scope("streamed")
    assert view["held"] == 0 and view["charged"] == pytest.approx(upstream.billed(_prices()) - before)


def test_every_choice_of_n_is_reserved(proxy, upstream):
    reply = openai_client(proxy, "choices").chat.completions.create(
        model="gpt-4.1-mini", messages=[{"role": "user", "content": "three ways"}], n=3)
    assert len(reply.choices) == 3
    cap = upstream.calls[-1]["cap"]
    assert upstream.calls[-1]["completion"] == 3 * cap  # the upstream wrote the whole cap three times
    assert proxy.scope("choices")["charged"] <= BUDGET


def test_an_upstream_that_bills_past_the_cap_closes_the_scope_as_overbilled(proxy):
    client = openai_client(proxy, "overbilled", budget=5000)
    client.chat.completions.create(model="gpt-4.1-mini-overbill", messages=[{"role": "user", "content": "x"}],
                                   max_tokens=50)
    view = proxy.scope("overbilled")
    assert view["status"] == "overbilled" and "100 completion tokens for a cap of 50" in view["overbilled"]
    with pytest.raises(openai.APIStatusError) as refused:
        client.chat.completions.create(model="gpt-4.1-mini", messages=[{"role": "user", "content": "x"}])
    assert refused.value.status_code == 402 and "is closed" in refused.value.message


@pytest.mark.parametrize(
    ("model", "outcome"),
    [("gpt-4.1-mini-busy", "released"), ("gpt-4.1-mini-broken", "kept"), ("gpt-4.1-mini-drop", "kept")],
)
@pytest.mark.parametrize("stream", [False, True])
def test_what_the_upstream_surely_did_not_bill_is_released_and_anything_unknown_is_kept(proxy, model, outcome, stream):
    client = openai_client(proxy, f"{model}-{stream}", budget=5000)
    try:
        result = client.chat.completions.create(model=model, messages=[{"role": "user", "content": "x"}],
                                                max_tokens=100, stream=stream)
        if stream:
            list(result)
    except (openai.APIError, httpx.HTTPError, ValueError):  # ValueError: the cut reply's JSON
        pass
    view = _settled(proxy, f"{model}-{stream}")
    trace = [json.loads(line) for line in open(proxy.ledger.trace.path, encoding="utf-8")]
    call = [line for line in trace if line["type"] == "call" and line["task_id"] == f"{model}-{stream}"][-1]
    assert call["outcome"] == outcome
    assert view["charged"] == (0 if outcome == "released" else pytest.approx(call["reserved"]))


def test_the_upstreams_rate_limit_headers_and_429s_pace_its_key(proxy):
    from bamasc.metering.limiter import rate_key

    client = openai_client(proxy, "paced", budget=5000)
    with pytest.raises(openai.RateLimitError):
        client.chat.completions.create(model="gpt-4.1-mini-busy", messages=[{"role": "user", "content": "x"}])
    model = proxy.settings.upstreams[("openai", "gpt-4.1-mini-busy")].model
    # The 429's headers reached the limiter that paces this upstream key (and the hold was released).
    assert proxy.settings.limiter.limits(rate_key(model)) == (3000.0, None)
    assert proxy.scope("paced")["charged"] == 0


def test_a_client_that_disconnects_mid_stream_leaks_no_reservation(proxy, upstream):
    body = {"model": "gpt-4.1-mini", "messages": [{"role": "user", "content": "long"}], "stream": True}
    headers = {"authorization": f"Bearer {TOKEN}", "x-bamasc-task": "gone", "x-bamasc-budget": "5000"}
    with httpx.Client(timeout=30) as client:
        with client.stream("POST", f"{proxy.url}/v1/chat/completions", json=body, headers=headers) as response:
            for _ in response.iter_raw(64):
                break  # read one piece, then hang up
    view = _settled(proxy, "gone")
    assert view["held"] == 0 and 0 < view["charged"] <= 5000


def test_concurrent_calls_of_one_scope_never_take_more_than_its_budget(proxy):
    async def one(client, index):
        try:
            await client.chat.completions.create(model="gpt-4.1-mini", messages=[{"role": "user", "content": f"q{index}"}])
            return True
        except openai.APIStatusError as problem:
            assert problem.status_code == 402
            return False

    async def run():
        client = openai.AsyncOpenAI(base_url=f"{proxy.url}/v1", api_key=TOKEN, max_retries=0,
                                    default_headers={"X-Bamasc-Task": "crowd", "X-Bamasc-Budget": "2000"})
        return await asyncio.gather(*(one(client, index) for index in range(40)))

    answered = asyncio.run(run())
    assert 1 <= sum(answered) < 40
    assert proxy.scope("crowd")["charged"] <= 2000


def test_a_total_budget_holds_across_scopes(config, tmp_path, upstream):
    server = ThreadProxy(config, total=1500.0, trace=str(tmp_path / "total.jsonl"))
    try:
        for index in range(8):
            chain(openai_client(server, f"scope-{index}"))
    finally:
        server.stop()
    charged = charged_per_scope([str(tmp_path / "total.jsonl")])
    assert 0 < sum(charged.values()) <= 1500.0
    assert all(value <= BUDGET for value in charged.values())


def test_a_restart_on_the_same_trace_keeps_each_scopes_spend(config, tmp_path):
    trace = str(tmp_path / "kept.jsonl")
    first = ThreadProxy(config, trace=trace)
    try:
        chain(openai_client(first, "durable"), calls=1)
        spent = first.scope("durable")["charged"]
    finally:
        first.stop()
    second = ThreadProxy(config, trace=trace)
    try:
        with pytest.raises(openai.APIStatusError) as refused:
            openai_client(second, "durable").chat.completions.create(
                model="gpt-4.1-mini", messages=[{"role": "user", "content": "again"}])
        assert refused.value.status_code == 402
        assert f"{BUDGET - spent:.2f} µ$ left" in refused.value.message
    finally:
        second.stop()


# ---------------------------------------------------------------- hostile clients


def _post(proxy, body, headers=None, path="/v1/chat/completions", raw: bytes | None = None):
    base = {"authorization": f"Bearer {TOKEN}", "x-bamasc-task": "hostile", "x-bamasc-budget": "556"}
    base.update(headers or {})
    base = {key: value for key, value in base.items() if value is not None}
    content = raw if raw is not None else json.dumps(body).encode()
    return httpx.post(f"{proxy.url}{path}", content=content, headers={**base, "content-type": "application/json"},
                      timeout=60)


GOOD = {"model": "gpt-4.1-mini", "messages": [{"role": "user", "content": "hi"}]}


@pytest.mark.parametrize(
    ("headers", "body", "status", "says"),
    [
        ({"x-bamasc-budget": "NaN"}, GOOD, 400, "x-bamasc-budget"),
        ({"x-bamasc-budget": "-5"}, GOOD, 400, "x-bamasc-budget"),
        ({"x-bamasc-budget": "1e400"}, GOOD, 400, "x-bamasc-budget"),
        ({"x-bamasc-budget": "abc"}, GOOD, 400, "x-bamasc-budget"),
        ({"x-bamasc-task": "has space"}, GOOD, 400, "x-bamasc-task"),
        ({"authorization": None}, GOOD, 401, "token"),
        ({"authorization": "Bearer wrong"}, GOOD, 401, "token"),
        ({}, {**GOOD, "model": "gpt-9"}, 404, "not declared"),
        ({}, {**GOOD, "n": 0}, 400, "`n`"),
        ({}, {**GOOD, "max_tokens": -3}, 400, "max_tokens"),
        ({}, {**GOOD, "messages": []}, 400, "messages"),
        ({}, {**GOOD, "messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]},
         400, "image_url"),
        ({}, [1, 2], 400, "JSON object"),
        ({}, {**GOOD, "modalities": ["audio"]}, 400, "modalities"),
        # A 10 MB prompt may cost far more than the scope has: refused before it is forwarded.
        ({}, {**GOOD, "messages": [{"role": "user", "content": "x " * 5_000_000}]}, 402, "prompt alone"),
    ],
)
def test_hostile_requests_are_refused_before_anything_is_forwarded(proxy, upstream, headers, body, status, says):
    calls = len(upstream.calls)
    response = _post(proxy, body, headers)
    assert response.status_code == status
    assert says in json.dumps(response.json())
    assert len(upstream.calls) == calls


# 900 levels: the decoder reads it, the encoder on the way upstream (deeper in the stack) would not.
_DEEP = b'{"model": "gpt-4.1-mini", "messages": [{"role": "user", "content": "x", "x": ' + b"[" * 900 + b"]" * 900 + b"}]}"


@pytest.mark.parametrize("raw", [b"{", b"\xff\xfe", b"[" * 100_000 + b"]" * 100_000, b'{"model": 1e999999}', _DEEP])
def test_malformed_bodies_are_400s(proxy, upstream, raw):
    calls = len(upstream.calls)
    response = _post(proxy, None, {"x-bamasc-budget": "50000"}, raw=raw)
    assert response.status_code == 400 and "error" in response.json()
    assert len(upstream.calls) == calls
    assert proxy.scope("hostile") == {"error": {"message": "no such scope", "type": "not_found_error",
                                                "param": None, "code": "not_found_error"}}  # nothing reserved


def test_a_body_past_the_cap_is_413(config, tmp_path, upstream):
    server = ThreadProxy(config)
    try:
        server_settings_cap = 32 << 20
        response = _post(server, None, raw=b" " * (server_settings_cap + 1))
        assert response.status_code == 413
    finally:
        server.stop()


def test_without_a_budget_header_or_a_default_the_request_is_refused(upstream, tmp_path, monkeypatch):
    monkeypatch.setenv("UPSTREAM_KEY", "upstream-key")
    path = tmp_path / "nodefault.bam"
    path.write_text(config_text(upstream.url, budget=None), encoding="utf-8")
    server = ThreadProxy(str(path))
    try:
        response = _post(server, GOOD, {"x-bamasc-budget": None})
        assert response.status_code == 400 and "no budget for scope 'hostile'" in response.json()["error"]["message"]
    finally:
        server.stop()


def test_without_a_task_header_each_client_key_is_one_scope_at_the_default_budget(proxy):
    response = _post(proxy, GOOD, {"x-bamasc-task": None, "x-bamasc-budget": None})
    assert response.status_code == 200
    totals = httpx.get(f"{proxy.url}/v1/budget", headers={"authorization": f"Bearer {TOKEN}"}).json()
    assert totals["scopes"] == 1 and 0 < totals["charged"] <= BUDGET


def test_one_client_key_is_one_scope_however_its_header_is_spelled(proxy):
    spellings = [{"authorization": f"Bearer {TOKEN}"}, {"authorization": f"bearer {TOKEN}"},
                 {"authorization": f"Bearer  {TOKEN}"}, {"authorization": None, "x-api-key": TOKEN}]
    for spelling in spellings:
        assert _post(proxy, {**GOOD, "max_tokens": 20}, {"x-bamasc-task": None, "x-bamasc-budget": None, **spelling}
                     ).status_code == 200
    totals = httpx.get(f"{proxy.url}/v1/budget", headers={"authorization": f"Bearer {TOKEN}"}).json()
    assert totals["scopes"] == 1


def _settled(proxy, scope: str) -> dict:
    """The scope once nothing is held (a stream's end is handled after the client has its last byte)."""
    import time

    for _ in range(500):
        view = proxy.scope(scope)
        if view.get("held") == 0:
            return view
        time.sleep(0.02)
    return proxy.scope(scope)


def _prices() -> dict:
    names = {}
    for model, rates in PRICES.items():
        for suffix in ("", "-overbill", "-drop", "-busy", "-broken", "-hang"):
            names[model + suffix] = rates
    return names


def test_the_config_must_exist_and_the_extra_is_named(tmp_path, capsys):
    from bamasc.cli import main

    assert main(["proxy", "--config", str(tmp_path / "missing.bam"), "--no-auth"]) == 2
    assert "no such file" in capsys.readouterr().err
    assert os.path.exists(os.path.join(os.path.dirname(__file__), "upstream.py"))


def test_a_proxy_trace_exports_to_opentelemetry(proxy, tmp_path):
    pytest.importorskip("opentelemetry.sdk", reason="the otel extra is not installed")
    from bamasc.cli import main

    openai_client(proxy, "exported").chat.completions.create(
        model="gpt-4.1-mini", messages=[{"role": "user", "content": "x"}], max_tokens=30)
    proxy.stop()
    out = tmp_path / "spans.json"
    assert main(["trace", "export", proxy.ledger.trace.path, "-o", str(out)]) == 0
    spans = [span for resource in json.loads(out.read_text())["resourceSpans"]
             for scope in resource["scopeSpans"] for span in scope["spans"]]
    chats = [span for span in spans if span["name"].startswith("chat")]
    assert len(chats) == 1
    usage = {item["key"]: item["value"] for item in chats[0]["attributes"]}
    assert usage["gen_ai.usage.output_tokens"] == {"intValue": "30"}
    # The vendor's model id, the provider and the upstream it was forwarded to, as the call line names them.
    (line,) = [json.loads(text) for text in open(proxy.ledger.trace.path) if '"type": "call"' in text]
    assert usage["gen_ai.request.model"] == {"stringValue": line["model_id"]} and line["provider"] == "openai"
    assert usage["gen_ai.provider.name"] == {"stringValue": "openai"}
    assert usage["server.address"] == {"stringValue": line["server_address"]} == {"stringValue": "127.0.0.1"}
    assert usage["server.port"] == {"intValue": str(line["server_port"])}
    assert chats[0]["name"] == f"chat {line['model_id']}"


def test_the_proxy_process_logs_no_traceback_under_hostile_clients(config, upstream):
    from tests.proxy.helpers import process_proxy, traceback_free

    process, url = process_proxy(config, "--graceful-timeout", "1", env={"UPSTREAM_KEY": "upstream-key"})
    try:
        headers = {"authorization": f"Bearer {TOKEN}", "content-type": "application/json"}
        for raw in (b"{", b"\xff", b"[" * 50_000, b'{"model": "gpt-4.1-mini", "messages": "x"}', b"null"):
            assert httpx.post(f"{url}/v1/chat/completions", content=raw, headers=headers).status_code == 400
        for budget in ("nan", "-1", "inf", "1e999", "0"):
            response = httpx.post(f"{url}/v1/messages", json=GOOD | {"model": "claude-haiku-4-5", "max_tokens": 10},
                                  headers={**headers, "x-bamasc-budget": budget, "x-bamasc-task": "h"})
            assert response.status_code == 400 and response.json()["type"] == "error"
        # A client that hangs up mid-stream, then one that hangs up before the reply.
        body = GOOD | {"stream": True}
        with httpx.stream("POST", f"{url}/v1/chat/completions", json=body,
                          headers={**headers, "x-bamasc-budget": "5000", "x-bamasc-task": "cut"}) as response:
            next(response.iter_raw(16))
        with pytest.raises(httpx.ReadTimeout):
            httpx.post(f"{url}/v1/chat/completions", json=GOOD | {"model": "gpt-4.1-mini-hang"},
                       headers={**headers, "x-bamasc-budget": "5000", "x-bamasc-task": "hung"}, timeout=0.5)
        assert httpx.get(f"{url}/healthz").status_code == 200  # still serving
    finally:
        process.terminate()
        _, errors = process.communicate(timeout=60)
    assert process.returncode == 0  # a graceful stop, the hung call cut after --graceful-timeout
    assert traceback_free(errors), errors[-3000:]


def test_a_restart_keeps_a_tightened_budget_and_a_closed_scope(config, tmp_path):
    trace = str(tmp_path / "limits.jsonl")
    first = ThreadProxy(config, trace=trace)
    try:
        for budget in (5000, 900):  # the second request tightens the scope to 900 µ$
            openai_client(first, "tightened", budget).chat.completions.create(
                model="gpt-4.1-mini", messages=[{"role": "user", "content": "x"}], max_tokens=20)
        openai_client(first, "closed", 50_000).chat.completions.create(
            model="gpt-4.1-mini-overbill", messages=[{"role": "user", "content": "x"}], max_tokens=20)
        assert first.scope("closed")["status"] == "overbilled"
    finally:
        first.stop()
    second = ThreadProxy(config, trace=trace)
    try:
        # The same scopes asked for with their first, larger budgets: still 900 µ$, still closed.
        openai_client(second, "tightened", 5000).chat.completions.create(
            model="gpt-4.1-mini", messages=[{"role": "user", "content": "x"}], max_tokens=20)
        assert second.scope("tightened")["budget"] == 900
        with pytest.raises(openai.APIStatusError) as refused:
            openai_client(second, "closed", 50_000).chat.completions.create(
                model="gpt-4.1-mini", messages=[{"role": "user", "content": "x"}], max_tokens=20)
        assert refused.value.status_code == 402 and "is closed" in refused.value.message
    finally:
        second.stop()


def test_an_upstream_that_compresses_its_replies_is_read_and_passed_on_plain(tmp_path, monkeypatch):
    monkeypatch.setenv("UPSTREAM_KEY", "upstream-key")
    compressing = Upstream(output=2000, compress=True).start()
    path = tmp_path / "gzip.bam"
    path.write_text(config_text(compressing.url), encoding="utf-8")
    server = ThreadProxy(str(path), trace=str(tmp_path / "gzip.jsonl"))
    try:
        reply = openai_client(server, "compressed", 5000).chat.completions.create(
            model="gpt-4.1-mini", messages=[{"role": "user", "content": "x"}], max_tokens=50)
        assert reply.choices[0].message.content.split() == ["word"] * 50
        view = _settled(server, "compressed")
        # Charged what the upstream billed (1 prompt token, 50 output tokens), not the whole hold.
        assert view["charged"] == pytest.approx(0.4 * 1 + 1.6 * 50)
    finally:
        server.stop()
        compressing.stop()


def test_the_sdks_list_the_configs_models(proxy):
    listed = [model.id for model in openai_client(proxy, "models").models.list()]
    assert "gpt-4.1-mini" in listed and "m0_0" in listed and "claude-haiku-4-5" not in listed
    anthropic_listed = [model.id for model in anthropic_client(proxy, "models").models.list()]
    assert "claude-haiku-4-5" in anthropic_listed and "gpt-4.1-mini" not in anthropic_listed
    bare = httpx.get(f"{proxy.url}/v1/models", timeout=30)  # no proxy token
    assert bare.status_code == 401 and bare.json()["error"]["type"] == "authentication_error"


@pytest.mark.parametrize("method, path, status", [
    ("POST", "/v1/audio/speech", 404), ("POST", "/v1/embeddings", 404), ("GET", "/v1/responses/resp_1", 404),
    ("POST", "/v2/x", 404), ("POST", "/", 404), ("GET", "/%ff%fe", 404),
    ("GET", "/v1/chat/completions", 405), ("PUT", "/v1/messages", 405), ("DELETE", "/v1/models", 405),
])
def test_a_route_the_proxy_does_not_serve_gets_the_protocols_json_error(proxy, method, path, status):
    response = httpx.request(method, f"{proxy.url}{path}", timeout=30, headers={"authorization": f"Bearer {TOKEN}"})
    assert response.status_code == status
    error = response.json()
    if path.startswith("/v1/messages"):  # Anthropic's shape
        assert error["type"] == "error" and error["error"]["type"] == "invalid_request_error"
        message = error["error"]["message"]
    else:
        assert error["error"]["type"] == ("not_found_error" if status == 404 else "invalid_request_error")
        message = error["error"]["message"]
    assert ("is not served" if status == 404 else f"does not take {method}") in message
    if status == 405:  # which methods the route takes
        assert response.headers["allow"] in ("POST", "GET, HEAD")  # in one order, whatever the hash seed


def test_the_openai_sdk_reads_an_unserved_route_as_an_api_error(proxy):
    with pytest.raises(openai.NotFoundError) as found:
        openai_client(proxy, "embeddings").embeddings.create(model="gpt-4.1-mini", input="hi")
    assert "/v1/embeddings is not served" in found.value.message
