"""Providers through the official SDKs against scripted local servers; retry policy; fake and replay providers."""

from __future__ import annotations

import asyncio
import email.utils
import json
import random
import subprocess
import sys
import time

import aiohttp
import pytest

from bamasc.records import replace
from bamasc.program import Model
from bamasc.runtime.providers import (
    Completion,
    Message,
    Provider,
    ProviderError,
    make_provider,
)
from bamasc.runtime.providers.base import Decoding
from bamasc.runtime.providers.failures import parse_retry_after, transport_error
from bamasc.runtime.providers.fake import FakeProvider
from bamasc.runtime.providers.replay import ReplayProvider, prompt_key
from bamasc.runtime.retry import RetryPolicy
from bamasc.runtime.tokens import exact_prompt_tokens
from tests.conftest import model_declaration

from .servers import (  # noqa: F401
    anthropic_server,
    drop,
    malformed,
    openai_server,
    reply,
    slow,
    status,
    truncated,
)

SECRET = "sk-test-DO-NOT-LEAK-0123456789abcdef"
MESSAGES = [Message("system", "You are terse."), Message("user", "What is 6 * 7? End with #### <number>.")]
QUICK = 0.4  # seconds: the client timeout in the slow-server tests


def run(coroutine):
    return asyncio.run(coroutine)


def model(provider: str = "openai", **fields) -> Model:
    return model_declaration(provider=provider, **fields)


def sdk_provider(flavor: str, server, **options):
    if flavor == "openai":
        from bamasc.runtime.providers.openai_provider import OpenAIProvider

        return OpenAIProvider("m1", "gpt-4o-mini", api_key=SECRET, base_url=server.base_url, **options)
    from bamasc.runtime.providers.anthropic_provider import AnthropicProvider

    return AnthropicProvider("m1", "claude-haiku-4-5", api_key=SECRET, base_url=server.base_url, **options)


@pytest.fixture
def sdk():
    """Makes providers as `sdk_provider` does and closes them after the test: an open aiohttp session warns."""
    made = []

    def make(flavor: str, server, **options):
        made.append(sdk_provider(flavor, server, **options))
        return made[-1]

    yield make
    for provider in made:
        run(provider.aclose())


@pytest.fixture(params=["openai", "anthropic"])
def endpoint(request):
    """A scripted server of either flavor and a provider pointed at it: (server, provider)."""
    server = request.getfixturevalue(f"{request.param}_server")
    provider = sdk_provider(request.param, server)
    yield server, provider
    run(provider.aclose())


def fail(provider, *, max_tokens: int = 32, timeout: float = 5.0) -> ProviderError:
    with pytest.raises(ProviderError) as caught:
        run(provider.complete(MESSAGES, max_tokens, timeout=timeout))
    return caught.value


# --- normal replies and what the SDKs sent


def test_openai_reply_usage_and_request(openai_server, sdk):
    openai_server.script(reply("The answer. #### 42", prompt_tokens=23, completion_tokens=9))
    provider = sdk("openai", openai_server)
    completion = run(provider.complete(MESSAGES, 64, timeout=5))
    # The reply's id and model are kept for the trace (an OpenTelemetry span's gen_ai.response.*).
    assert completion == Completion("The answer. #### 42", 23, 9, "stop", response_id="chatcmpl-test",
                                    response_model="gpt-4o-mini")
    assert provider.server == ("127.0.0.1", int(openai_server.base_url.rsplit(":", 1)[1].split("/")[0]))
    (request,) = openai_server.requests
    assert request.path == "/v1/chat/completions"
    assert request.body["model"] == "gpt-4o-mini"
    assert request.body["max_completion_tokens"] == 64
    assert "max_tokens" not in request.body
    assert request.body["messages"] == [{"role": m.role, "content": m.content} for m in MESSAGES]
    assert request.had_auth and "authorization" not in request.headers
    assert request.headers.get("x-stainless-retry-count") == "0"


def test_every_call_asks_for_greedy_decoding_unless_told_otherwise(endpoint):
    server, provider = endpoint
    chosen = Decoding(temperature=0.7, top_p=0.9, seed=5, stop=("END",))

    async def both():  # one event loop: the provider's HTTP session is bound to it
        await provider.complete(MESSAGES, 8, timeout=5)
        await provider.complete(MESSAGES, 8, timeout=5, decoding=chosen)

    run(both())
    greedy, chosen = (request.body for request in server.requests)
    assert greedy["temperature"] == 0 and "top_p" not in greedy and "seed" not in greedy
    assert (chosen["temperature"], chosen["top_p"]) == (0.7, 0.9)
    if server.flavor == "openai":
        assert chosen["seed"] == 5 and chosen["stop"] == ["END"]
    else:  # the Messages API has no seed
        assert "seed" not in chosen and chosen["stop_sequences"] == ["END"]


def test_openai_reasoning_models_get_no_sampling_fields_they_refuse(openai_server):
    from bamasc.runtime.providers.openai_provider import OpenAIProvider

    provider = OpenAIProvider("m1", "o3-mini", api_key=SECRET, base_url=openai_server.base_url)
    try:
        run(provider.complete(MESSAGES, 8, timeout=5, decoding=Decoding(temperature=0.0, seed=3, stop=("x",))))
    finally:
        run(provider.aclose())
    body = openai_server.requests[0].body
    assert "temperature" not in body and "stop" not in body and body["seed"] == 3


def test_openai_compatible_server_gets_max_tokens(openai_server, sdk):
    provider = sdk("openai", openai_server, token_param="max_tokens")
    run(provider.complete(MESSAGES, 17, timeout=5))
    body = openai_server.requests[0].body
    assert body["max_tokens"] == 17 and "max_completion_tokens" not in body


def test_anthropic_reply_usage_and_request(anthropic_server, sdk):
    anthropic_server.script(
        reply("CONCLUSION: CORRECT", prompt_tokens=31, completion_tokens=4, finish_reason="end_turn")
    )
    provider = sdk("anthropic", anthropic_server)
    messages = [Message("system", "Be brief."), Message("system", "Audit only."), Message("user", "Check 2+2=4.")]
    completion = run(provider.complete(messages, 99, timeout=5))
    assert completion == Completion("CONCLUSION: CORRECT", 31, 4, "end_turn", response_id="msg_test",
                                    response_model="claude-haiku-4-5")
    assert provider.server == ("127.0.0.1", int(anthropic_server.base_url.rsplit(":", 1)[1].split("/")[0]))
    (request,) = anthropic_server.requests
    assert request.path == "/v1/messages"
    assert request.body["model"] == "claude-haiku-4-5"
    assert request.body["max_tokens"] == 99
    assert request.body["system"] == "Be brief.\n\nAudit only."
    assert request.body["messages"] == [{"role": "user", "content": "Check 2+2=4."}]
    assert request.had_auth and "x-api-key" not in request.headers


def test_reply_without_usage_is_malformed(openai_server, sdk):
    body = {
        "id": "x",
        "object": "chat.completion",
        "created": 0,
        "model": "m",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}],
    }
    openai_server.script(status(200, body=body))
    error = fail(sdk("openai", openai_server))
    assert (error.kind, error.retryable, error.outcome_unknown) == ("malformed", True, True)
    assert "usage" in str(error)


# --- failures, each one attempt only


def test_rate_limited_with_retry_after(endpoint):
    server, provider = endpoint
    server.script(status(429, headers={"Retry-After": "2"}))
    error = fail(provider)
    assert error.kind == "rate_limited" and error.retryable
    assert error.retry_after == 2.0
    assert error.outcome_unknown is False and error.status == 429
    assert "m1" in str(error) and len(server.requests) == 1  # the SDK did not retry on its own


def test_rate_limited_with_http_date(endpoint):
    server, provider = endpoint
    server.script(status(429, headers={"Retry-After": email.utils.formatdate(time.time() + 30, usegmt=True)}))
    error = fail(provider)
    assert 20 < error.retry_after <= 30


@pytest.mark.parametrize("code, unknown", [(500, True), (503, False), (400, False), (408, True), (409, True)])
def test_whether_an_error_may_have_been_billed_is_the_metering_rule(endpoint, code, unknown):
    """A 500 may come after the model ran (its hold is kept, as the proxy keeps it); an overload or a refusal of the
    request itself was surely not billed (metering/replies.py)."""
    server, provider = endpoint
    server.script(status(code))
    error = fail(provider)
    assert (error.outcome_unknown, error.status) == (unknown, code)
    assert len(server.requests) == 1


def test_gateway_error_leaves_the_outcome_unknown(endpoint):
    server, provider = endpoint
    server.script(status(504))
    error = fail(provider)
    assert (error.kind, error.retryable, error.outcome_unknown) == ("server", True, True)


def test_anthropic_overloaded(anthropic_server, sdk):
    anthropic_server.script(status(529))
    error = fail(sdk("anthropic", anthropic_server))
    assert (error.kind, error.retryable, error.status) == ("server", True, 529)
    assert "overloaded" in str(error)


def test_slow_reply_times_out_with_unknown_outcome(endpoint):
    server, provider = endpoint
    server.script(slow(10.0))
    started = time.monotonic()
    error = fail(provider, timeout=QUICK)
    assert time.monotonic() - started < 3.0
    assert (error.kind, error.retryable, error.outcome_unknown) == ("timeout", True, True)


def test_malformed_json_body(endpoint):
    server, provider = endpoint
    server.script(malformed())
    error = fail(provider)
    assert (error.kind, error.retryable, error.outcome_unknown) == ("malformed", True, True)


def test_truncated_body_is_retryable_with_unknown_outcome(endpoint):
    server, provider = endpoint
    server.script(truncated())
    error = fail(provider)
    assert error.retryable and error.outcome_unknown
    assert error.kind == "connection"


def test_dropped_connection(endpoint):
    server, provider = endpoint
    server.script(drop())
    error = fail(provider)
    assert (error.kind, error.retryable, error.outcome_unknown) == ("connection", True, True)


def test_refused_connection_was_never_sent(endpoint):
    server, provider = endpoint
    server.close()
    error = fail(provider, timeout=2.0)
    assert (error.kind, error.retryable, error.outcome_unknown) == ("connection", True, False)


class ConnectTimeout(Exception):
    """Named as the SDKs' aiohttp adapter names what it re-raises for every aiohttp connection error."""


@pytest.mark.parametrize(
    ("cause", "kind", "outcome_unknown"),
    [
        (aiohttp.ServerDisconnectedError(), "connection", True),
        (aiohttp.ClientPayloadError("cut short"), "connection", True),
        (aiohttp.SocketTimeoutError(), "timeout", True),
        (aiohttp.ConnectionTimeoutError(), "timeout", False),
        (None, "timeout", False),
    ],
    ids=["dropped", "truncated", "read-timeout", "connect-timeout", "no-aiohttp-cause"],
)
def test_aiohttp_errors_are_judged_by_aiohttp_not_by_the_adapter(cause, kind, outcome_unknown):
    error = ConnectTimeout()
    error.__cause__ = cause
    failure = transport_error(error, provider="openai", model="m1", timeout=1.0)
    assert (failure.kind, failure.outcome_unknown) == (kind, outcome_unknown)


@pytest.mark.parametrize(("code", "kind"), [(400, "client"), (422, "client"), (401, "auth"), (404, "not_found")])
def test_client_errors_are_final(endpoint, code, kind):
    server, provider = endpoint
    server.script(status(code))
    error = fail(provider)
    assert (error.kind, error.retryable, error.outcome_unknown, error.status) == (kind, False, False, code)


def test_key_echoed_by_the_server_is_scrubbed(endpoint):
    server, provider = endpoint
    echo = f"Incorrect API key provided: {SECRET}."
    body = {"error": {"message": echo, "type": "invalid_request_error"}, "type": "error"}
    server.script(status(401, body=body))
    error = fail(provider)
    assert error.kind == "auth"
    assert SECRET not in str(error) and SECRET not in repr(error)
    assert SECRET not in repr(provider)


def test_provider_error_defaults_and_pickling():
    import pickle

    error = ProviderError("openai model 'm1' rate limited", kind="rate_limited", retry_after=2.5, status=429)
    assert error.retryable and not error.outcome_unknown
    copy = pickle.loads(pickle.dumps(error))
    assert (copy.kind, copy.retry_after, copy.status, str(copy)) == ("rate_limited", 2.5, 429, str(error))
    assert not ProviderError("x", kind="client").retryable
    with pytest.raises(ValueError):
        ProviderError("x", kind="exploded")


# --- make_provider


def test_missing_key_names_the_variable_not_a_value():
    env = {"OPENAI_API_KEY": SECRET}
    with pytest.raises(ProviderError) as caught:
        make_provider(model(api_key_env="BAMASC_TEST_KEY"), env=env)
    error = caught.value
    assert error.kind == "auth" and not error.retryable
    assert "BAMASC_TEST_KEY" in str(error)
    assert SECRET not in str(error) and SECRET not in repr(error)


def test_anthropic_reads_its_usual_variable():
    with pytest.raises(ProviderError) as caught:
        make_provider(model("anthropic", model_id="claude-haiku-4-5"), env={})
    assert "ANTHROPIC_API_KEY" in str(caught.value)
    provider = make_provider(model("anthropic", model_id="claude-haiku-4-5"), env={"ANTHROPIC_API_KEY": SECRET})
    assert isinstance(provider, Provider) and SECRET not in repr(provider)


def test_official_openai_endpoint_settings():
    provider = make_provider(model(api_key_env="MY_KEY"), env={"MY_KEY": SECRET})
    assert provider.token_param == "max_completion_tokens"
    assert provider.count_prompt_tokens(MESSAGES) == exact_prompt_tokens("gpt-4o-mini", MESSAGES)


def test_other_server_gets_max_tokens_and_never_the_openai_key(openai_server):
    provider = make_provider(model(base_url=openai_server.base_url), env={"OPENAI_API_KEY": SECRET})
    assert provider.token_param == "max_tokens"
    assert provider.count_prompt_tokens(MESSAGES) is None  # not OpenAI's tokenizer unless the model says so
    assert provider._api_key != SECRET
    run(provider.complete(MESSAGES, 8, timeout=5))
    run(provider.aclose())
    assert openai_server.requests[0].body["max_tokens"] == 8


def test_dispatch_to_offline_providers(tmp_path):
    assert isinstance(make_provider(model("fake")), FakeProvider)
    fake = make_provider(model("openai"), fake_mode="verbose", env={})
    assert isinstance(fake, FakeProvider) and fake.mode == "verbose"
    with pytest.raises(ProviderError) as caught:
        make_provider(model("replay"))
    assert caught.value.kind == "client" and "cassette" in str(caught.value)
    cassette = tmp_path / "c.jsonl"
    cassette.write_text("")
    assert isinstance(make_provider(model("openai"), cassette=str(cassette), env={}), ReplayProvider)


def test_a_llamacpp_name_that_is_no_bundled_model_nor_a_file_is_a_client_error():
    with pytest.raises(ProviderError) as caught:
        make_provider(model("llamacpp"))  # named "gpt-4o-mini": neither bundled nor a .gguf path
    assert caught.value.kind == "client" and "not installed as a local model" in str(caught.value)


def test_importing_providers_loads_no_sdk():
    code = (
        "import sys, bamasc.runtime.providers, bamasc.runtime.retry;"
        "print(sorted(m for m in ('openai', 'anthropic', 'httpx', 'httpx2', 'aiohttp', 'bpe_openai') if m in sys.modules))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"


# --- retry policy


def failure(retry_after: float | None = None, retryable: bool = True) -> ProviderError:
    return ProviderError("x", kind="server" if retryable else "client", retry_after=retry_after)


def test_backoff_doubles_and_caps_without_jitter():
    policy = RetryPolicy(base_delay=0.5, max_delay=3.0, jitter=0.0)
    rng = random.Random(0)
    delays = [policy.delay(attempt, failure(), rng) for attempt in range(1, 7)]
    assert delays == [0.5, 1.0, 2.0, 3.0, 3.0, 3.0]


def test_jitter_stays_in_its_band_and_is_seeded():
    policy = RetryPolicy(base_delay=1.0, max_delay=20.0, jitter=0.5)
    draws = [policy.delay(3, failure(), random.Random(seed)) for seed in range(200)]
    assert all(2.0 <= d <= 4.0 for d in draws)
    assert max(draws) - min(draws) > 1.0  # actually jittered
    again = [policy.delay(3, failure(), random.Random(seed)) for seed in range(200)]
    assert draws == again
    full = RetryPolicy(base_delay=1.0, jitter=1.0)
    assert min(full.delay(2, failure(), random.Random(s)) for s in range(200)) < 0.1


def test_retry_after_is_a_capped_floor():
    policy = RetryPolicy(base_delay=0.5, max_delay=20.0, jitter=0.5)
    rng = random.Random(1)
    assert policy.delay(1, failure(retry_after=7.0), rng) == 7.0
    assert policy.delay(1, failure(retry_after=500.0), rng) == 20.0
    assert policy.delay(1, failure(retry_after=0.0), rng) <= 0.5


def test_should_retry_counts_attempts_and_kinds():
    policy = RetryPolicy(max_attempts=3)
    assert policy.should_retry(1, failure()) and policy.should_retry(2, failure())
    assert not policy.should_retry(3, failure())
    assert not policy.should_retry(1, failure(retryable=False))
    with pytest.raises(ValueError):
        RetryPolicy(max_attempts=0)
    with pytest.raises(ValueError):
        RetryPolicy(jitter=1.5)


def test_parse_retry_after_forms():
    now = 1_700_000_000.0
    assert parse_retry_after({"Retry-After": "3"}) == 3.0
    assert parse_retry_after({"retry-after": "1.5"}) == 1.5
    assert parse_retry_after({"Retry-After": email.utils.formatdate(now + 12, usegmt=True)}, now=now) == 12.0
    assert parse_retry_after({"Retry-After": email.utils.formatdate(now - 60, usegmt=True)}, now=now) == 0.0
    assert parse_retry_after({"retry-after-ms": "250", "Retry-After": "9"}) == 0.25
    assert parse_retry_after({"Retry-After": "soon"}) is None
    assert parse_retry_after({"Retry-After": "-4"}) is None
    assert parse_retry_after({}) is None


# --- fake provider


def test_fake_echo_is_deterministic_and_answers_the_format():
    first = run(FakeProvider("f").complete(MESSAGES, 200, timeout=1))
    second = run(FakeProvider("f").complete(MESSAGES, 200, timeout=1))
    assert first == second
    assert first.text.endswith("#### 7")  # the last number of the prompt
    assert first.completion_tokens == len(first.text.encode()) and first.finish_reason == "stop"
    critic = [Message("user", 'Audit it. End with "CONCLUSION: CORRECT" or "CONCLUSION: INCORRECT".')]
    assert "CONCLUSION: CORRECT" in run(FakeProvider("f").complete(critic, 200, timeout=1)).text


def test_fake_counts_its_own_prompt_exactly():
    fake = FakeProvider("f")
    completion = run(fake.complete(MESSAGES, 50, timeout=1))
    expected = sum(len(m.content.encode()) + 8 for m in MESSAGES)
    assert completion.prompt_tokens == fake.count_prompt_tokens(MESSAGES) == expected


@pytest.mark.parametrize("max_tokens", [1, 5, 37, 1000])
def test_fake_verbose_always_spends_the_whole_cap(max_tokens):
    completion = run(FakeProvider("f", mode="verbose").complete(MESSAGES, max_tokens, timeout=1))
    assert completion.completion_tokens == max_tokens
    assert len(completion.text.encode()) == max_tokens
    assert completion.finish_reason == "length"


def test_fake_echo_truncates_at_the_cap():
    completion = run(FakeProvider("f", reply="é" * 50).complete(MESSAGES, 7, timeout=1))
    assert completion.completion_tokens <= 7 and completion.finish_reason == "length"


def outcomes(fake: FakeProvider, prompts: int = 120) -> list[str]:
    results = []
    for index in range(prompts):
        try:
            run(fake.complete([Message("user", f"task {index}")], 16, timeout=1))
            results.append("ok")
        except ProviderError as error:
            results.append(error.kind)
    return results


def test_fake_failures_are_seeded_and_reproducible():
    kinds = ("server", "timeout")
    first = outcomes(FakeProvider("f", seed=3, fail_rate=0.5, fail_kinds=kinds))
    assert first == outcomes(FakeProvider("f", seed=3, fail_rate=0.5, fail_kinds=kinds))
    assert first != outcomes(FakeProvider("f", seed=4, fail_rate=0.5, fail_kinds=kinds))
    assert 30 < first.count("ok") < 90
    assert {"server", "timeout"} <= set(first)


def test_fake_injected_error_attributes_and_fresh_retries():
    fake = FakeProvider("f", fail_rate=1.0, fail_kinds=("timeout",))
    error = fail(fake)
    assert (error.kind, error.retryable, error.outcome_unknown) == ("timeout", True, True)
    flaky = FakeProvider("f", seed=0, fail_rate=0.5)
    tries = 0
    while True:  # the same prompt draws afresh each time, so it succeeds within a few tries
        tries += 1
        try:
            run(flaky.complete(MESSAGES, 8, timeout=1))
            break
        except ProviderError as error:
            assert error.kind == "server" and not error.outcome_unknown
        assert tries < 30


def test_fake_latency_past_the_timeout():
    error = fail(FakeProvider("f", first_token_s=5.0), timeout=0.05)
    assert error.kind == "timeout" and error.outcome_unknown


# --- replay


class Counting:
    """A provider that counts its calls, standing in for a paid one."""

    name = "m1"

    def __init__(self):
        self.calls = 0
        self.inner = FakeProvider("m1")

    async def complete(self, messages, max_tokens, *, timeout, decoding=None, expect="text"):
        self.calls += 1
        return await self.inner.complete(messages, max_tokens, timeout=timeout)

    def count_prompt_tokens(self, messages):
        return self.inner.count_prompt_tokens(messages) + 1000  # tells a replayed count from a fresh one

    async def aclose(self):
        pass


def test_record_then_replay(tmp_path):
    cassette = tmp_path / "run.jsonl"
    inner = Counting()
    recorder = ReplayProvider("m1", cassette, inner=inner, record=True)
    prompts = [[Message("user", f"question {i} #### ?")] for i in range(3)]
    recorded = [run(recorder.complete(p, 40, timeout=1)) for p in prompts]
    assert inner.calls == 3
    lines = cassette.read_text().splitlines()
    assert len(lines) == 3 and json.loads(lines[0])["key"] == prompt_key("m1", prompts[0], 40)

    player = ReplayProvider("m1", cassette)
    assert [run(player.complete(p, 40, timeout=1)) for p in prompts] == recorded
    # The guard reserves with the count the recording run used, so it clamps alike.
    assert player.count_prompt_tokens(prompts[1]) == inner.count_prompt_tokens(prompts[1])
    assert player.count_prompt_tokens([Message("user", "never asked")]) is None

    again = Counting()
    rerecorder = ReplayProvider("m1", cassette, inner=again, record=True)
    run(rerecorder.complete(prompts[0], 40, timeout=1))
    assert again.calls == 0 and len(cassette.read_text().splitlines()) == 3


def test_a_cassette_keeps_the_replys_id_and_model_and_an_older_one_plays_back_without(tmp_path):
    class Vendor(Counting):
        server = ("api.example.test", 443)

        async def complete(self, messages, max_tokens, **options):
            completion = await super().complete(messages, max_tokens, **options)
            return replace(completion, response_id="chatcmpl-1", response_model="gpt-4.1-mini-2025-04-14")

    cassette = tmp_path / "run.jsonl"
    prompt = [Message("user", "question #### ?")]
    recorder = ReplayProvider("m1", cassette, inner=Vendor(), record=True)
    recorded = run(recorder.complete(prompt, 40, timeout=1))
    assert recorder.server == ("api.example.test", 443)  # recording: the calls go to the inner provider's server
    player = ReplayProvider("m1", cassette)
    assert player.server is None  # played back, no server answers
    played = run(player.complete(prompt, 40, timeout=1))
    assert played == recorded and played.response_id == "chatcmpl-1"
    assert played.response_model == "gpt-4.1-mini-2025-04-14"
    line = json.loads(cassette.read_text())
    older = {key: value for key, value in line.items() if key not in ("response_id", "response_model")}
    cassette.write_text(json.dumps(older) + "\n")
    again = run(ReplayProvider("m1", cassette).complete(prompt, 40, timeout=1))
    assert again.response_id is None and again.response_model is None and again.text == recorded.text
    for hostile in (7, "", ["x"], None):
        cassette.write_text(json.dumps({**line, "response_id": hostile}) + "\n")
        assert run(ReplayProvider("m1", cassette).complete(prompt, 40, timeout=1)).response_id is None


def test_repeated_prompt_plays_back_in_order(tmp_path):
    cassette = tmp_path / "run.jsonl"
    replies = iter(["first", "second"])

    class Sequence(Counting):
        async def complete(self, messages, max_tokens, *, timeout, decoding=None, expect="text"):
            return Completion(next(replies), 3, 2, "stop")

    recorder = ReplayProvider("m1", cassette, inner=Sequence(), record=True)
    assert [run(recorder.complete(MESSAGES, 9, timeout=1)).text for _ in range(2)] == ["first", "second"]
    player = ReplayProvider("m1", cassette)
    assert [run(player.complete(MESSAGES, 9, timeout=1)).text for _ in range(3)] == ["first", "second", "second"]


def test_replay_miss_names_model_and_prompt_hash(tmp_path):
    cassette = tmp_path / "run.jsonl"
    run(ReplayProvider("m1", cassette, inner=Counting(), record=True).complete(MESSAGES, 40, timeout=1))
    player = ReplayProvider("m1", cassette)
    error = fail(player, max_tokens=41)  # another cap is another prompt
    assert error.kind == "not_found" and not error.retryable
    assert "m1" in str(error) and prompt_key("m1", MESSAGES, 41)[:16] in str(error)


def test_missing_cassette_and_torn_last_line(tmp_path):
    with pytest.raises(ProviderError) as caught:
        ReplayProvider("m1", tmp_path / "absent.jsonl")
    assert caught.value.kind == "not_found"
    cassette = tmp_path / "torn.jsonl"
    run(ReplayProvider("m1", cassette, inner=Counting(), record=True).complete(MESSAGES, 40, timeout=1))
    with open(cassette, "a") as handle:
        handle.write('{"key": "abc", "mod')  # a run that stopped mid-write
    recorder = ReplayProvider("m1", cassette, inner=Counting(), record=True)
    run(recorder.complete([Message("user", "new")], 40, timeout=1))
    assert run(ReplayProvider("m1", cassette).complete([Message("user", "new")], 40, timeout=1)).text


def test_recording_a_real_provider_writes_no_key(tmp_path, openai_server):
    cassette = tmp_path / "real.jsonl"
    recorder = ReplayProvider("m1", cassette, inner=sdk_provider("openai", openai_server), record=True)
    run(recorder.complete(MESSAGES, 12, timeout=5))
    run(recorder.aclose())
    text = cassette.read_text()
    assert "Hello from the test server." in text
    assert SECRET not in text and "127.0.0.1" not in text


def test_plain_http_endpoints_skip_the_ca_bundle_and_trust_nothing():
    import ssl
    import types

    from bamasc.runtime.providers.sdk import aiohttp_client

    recorder = types.SimpleNamespace(DefaultAioHttpClient=lambda **options: options)
    local = aiohttp_client(recorder, "http://127.0.0.1:8080/v1")["verify"]
    assert isinstance(local, ssl.SSLContext)
    assert local.cert_store_stats()["x509_ca"] == 0  # nothing loaded ...
    assert local.verify_mode == ssl.CERT_REQUIRED and local.check_hostname  # ... and nothing unchecked
    remote = aiohttp_client(recorder, "https://api.openai.com/v1")
    assert "verify" not in remote  # the SDK's own verified default
    assert list(remote["event_hooks"]) == ["response"]  # the body cap
    assert "verify" not in aiohttp_client(recorder, None)


def test_an_openai_family_is_counted_exactly_only_at_openai_or_by_its_declared_tokenizer(monkeypatch):
    """Behind another base_url a name like `gpt-4o-mini` may be any model (one server counted a token per byte:
    a task was billed five times its bound): it is bounded safely unless the model declares its tokenizer."""
    import bamasc.runtime.tokens as tokens
    from bamasc.encodings import encoding_for
    from bamasc.runtime.providers.openai_provider import OpenAIProvider

    # The offline tokenizer is an optional extra; count one token per character in its place.
    monkeypatch.setattr(tokens, "_counter", lambda encoding: len)
    gateway = "http://127.0.0.1:9/v1"
    official = [OpenAIProvider("m", model_id, api_key=SECRET, base_url=url)
                for model_id in ("gpt-4o-mini", "openai/gpt-4.1") for url in (None, "https://api.openai.com/v1")]
    declared = [OpenAIProvider("m", "gpt-4o-mini", api_key=SECRET, base_url=gateway, tokenizer=tokenizer)
                for tokenizer in ("gpt-4o", "o200k_base")]
    elsewhere = [OpenAIProvider("m", model_id, api_key=SECRET, base_url=gateway)
                 for model_id in ("gpt-4o-mini", "openai/gpt-4.1", "deepseek-chat")]
    try:
        assert all(provider.count_prompt_tokens(MESSAGES) is not None for provider in official + declared)
        assert all(provider.count_prompt_tokens(MESSAGES) is None for provider in elsewhere)  # bounded safely
    finally:
        for provider in (*official, *declared, *elsewhere):
            run(provider.aclose())
    assert encoding_for("openai/gpt-4o") == "o200k_base" and encoding_for("deepseek-v3") is None


# ---------------------------------------------------------------- the fake reads the role, not only the prompt


def test_the_fake_answers_as_the_role_reads_even_with_a_verdict_in_the_prompt():
    """A re-plan or a revision holds the critic's verdict in its prompt; it still owes cards or an answer."""
    import json as _json

    from bamasc.runtime.providers.fake import echo_reply, worst_case_reply

    replan = [Message("user", "Break it into steps; answer with a JSON list of step cards.\nCONCLUSION: INCORRECT - no")]
    assert isinstance(_json.loads(worst_case_reply(replan, 80, "plan")), list)
    assert isinstance(_json.loads(echo_reply(replan, "plan")), list)
    revise = [Message("user", "Solve 3 + 4.\nFeedback: CONCLUSION: INCORRECT - wrong sum\nEnd with a line \"#### <number>\".")]
    assert "####" in echo_reply(revise, "answer") and "CONCLUSION" not in echo_reply(revise, "answer")
    assert "CONCLUSION" not in worst_case_reply(revise, 200, "answer")
    # A role that reads plain text still gets the prompt's cue.
    assert "CONCLUSION: CORRECT" in echo_reply(revise, "text")
    assert "CONCLUSION: INCORRECT" in worst_case_reply([Message("user", "Audit: End with CONCLUSION")], 200, "verdict")
