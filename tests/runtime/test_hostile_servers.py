"""Servers that misbehave, through both official SDKs: the budget still holds and every task ends with a line.

Each case is a reply no honest provider sends (usage that is no token
count, usage beyond what the call allowed, bodies too big, too slow, cut or
never sent). The promise under test: a reply whose usage is not a token count
is malformed and keeps its whole reservation; usage beyond the reservation is
charged as billed and stops the task as `overbilled`; no task whose server
honoured its limits spends past its budget; `exec` never aborts the dataset.
"""

from __future__ import annotations

import asyncio
import json

import pytest

from bamasc.cli import main
from bamasc.runtime.providers import make_provider
from bamasc.runtime.providers.base import Message, ProviderError
from bamasc.runtime.providers.sdk import MAX_BODY_BYTES
from tests.runtime.servers import (  # noqa: F401 (fixtures)
    Action,
    anthropic_server,
    drip,
    hang,
    huge,
    openai_server,
    raw,
    reply,
    truncated,
)
from tests.helpers.runtime import KEY

MESSAGES = [Message("user", "What is 40 plus 2?")]


def usage_body(flavor: str, prompt: str, completion: str, extra: str = "") -> str:
    """A reply whose usage values are written as given: JSON text, not Python values."""
    if flavor == "openai":
        return (
            '{"id": "x", "object": "chat.completion", "model": "m", "choices": [{"index": 0, '
            '"message": {"role": "assistant", "content": "#### 42"}, "finish_reason": "stop"}], '
            f'"usage": {{"prompt_tokens": {prompt}, "completion_tokens": {completion}{extra}}}}}'
        )
    return (
        '{"id": "x", "type": "message", "role": "assistant", "model": "m", '
        '"content": [{"type": "text", "text": "#### 42"}], "stop_reason": "end_turn", '
        f'"usage": {{"input_tokens": {prompt}, "output_tokens": {completion}{extra}}}}}'
    )


@pytest.fixture(params=["openai", "anthropic"])
def endpoint(request, monkeypatch):
    server = request.getfixturevalue(f"{request.param}_server")
    monkeypatch.setenv("BAMASC_TEST_KEY", KEY)
    return server


def complete(server, messages=MESSAGES, max_tokens=16, timeout=2.0):
    from tests.conftest import model_declaration

    model = model_declaration(
        name="remote",
        provider=server.flavor,
        model_id="gpt-4o-mini" if server.flavor == "openai" else "claude-3-5-haiku",
        base_url=server.base_url,
        api_key_env="BAMASC_TEST_KEY",
    )
    provider = make_provider(model)

    async def go():
        try:
            return await provider.complete(messages, max_tokens, timeout=timeout)
        finally:
            await provider.aclose()

    return asyncio.run(go())


# ---------------------------------------------------------------- usage that is no token count

NOT_COUNTS = {
    "infinity": "Infinity",
    "overflow": "1e999",
    "nan": "NaN",
    "negative": "-1",
    "string": '"15"',
    "boolean": "true",
    "fraction": "19.99",
    "exponent": "1e15",
    "null": "null",
    "object": '{"n": 3}',
    "digits": "9" * 5000,  # longer than Python converts from text
}


@pytest.mark.parametrize("field", ["prompt", "completion"])
@pytest.mark.parametrize("shape", sorted(NOT_COUNTS))
def test_usage_that_is_no_token_count_is_malformed_and_keeps_the_reservation(endpoint, shape, field):
    value = NOT_COUNTS[shape]
    prompt, completion = (value, "5") if field == "prompt" else ("9", value)
    endpoint.script(raw(usage_body(endpoint.flavor, prompt, completion)))
    with pytest.raises(ProviderError) as caught:
        complete(endpoint)
    assert caught.value.kind == "malformed" and caught.value.outcome_unknown, caught.value


@pytest.mark.parametrize("value", ['"5"', "1.5", "-3", "Infinity"])
def test_anthropic_cache_fields_that_are_no_counts_are_malformed(anthropic_server, monkeypatch, value):
    monkeypatch.setenv("BAMASC_TEST_KEY", KEY)
    anthropic_server.script(raw(usage_body("anthropic", "9", "5", f', "cache_read_input_tokens": {value}')))
    with pytest.raises(ProviderError) as caught:
        complete(anthropic_server)
    assert caught.value.kind == "malformed"


def test_anthropic_cache_fields_are_charged_as_prompt(anthropic_server, monkeypatch):
    monkeypatch.setenv("BAMASC_TEST_KEY", KEY)
    extra = ', "cache_creation_input_tokens": 4, "cache_read_input_tokens": null'
    anthropic_server.script(raw(usage_body("anthropic", "9", "5", extra)))
    assert complete(anthropic_server).prompt_tokens == 13


def test_anthropic_cache_reads_and_writes_are_reported_apart(anthropic_server, monkeypatch):
    monkeypatch.setenv("BAMASC_TEST_KEY", KEY)
    extra = ', "cache_creation_input_tokens": 4, "cache_read_input_tokens": 6'
    anthropic_server.script(raw(usage_body("anthropic", "9", "5", extra)))
    completion = complete(anthropic_server)
    assert (completion.prompt_tokens, completion.cached_tokens, completion.cache_write_tokens) == (19, 6, 4)


def test_openai_cached_tokens_are_reported(openai_server, monkeypatch):
    monkeypatch.setenv("BAMASC_TEST_KEY", KEY)
    openai_server.script(raw(usage_body("openai", "9", "5", ', "prompt_tokens_details": {"cached_tokens": 6}')))
    completion = complete(openai_server)
    assert (completion.prompt_tokens, completion.cached_tokens, completion.cache_write_tokens) == (9, 6, 0)


@pytest.mark.parametrize("value", ['"5"', "1.5", "-3", "10"])
def test_openai_cached_tokens_that_are_no_count_of_the_prompt_are_malformed(openai_server, monkeypatch, value):
    monkeypatch.setenv("BAMASC_TEST_KEY", KEY)
    openai_server.script(raw(usage_body("openai", "9", "5", f', "prompt_tokens_details": {{"cached_tokens": {value}}}')))
    with pytest.raises(ProviderError) as caught:
        complete(openai_server)
    assert caught.value.kind == "malformed" and caught.value.outcome_unknown


# ---------------------------------------------------------------- bodies

@pytest.mark.parametrize("declared", [True, False], ids=["content-length", "chunked"])
def test_a_huge_body_is_cut_at_the_cap(endpoint, declared):
    endpoint.script(huge(200 * 1024 * 1024, declared=declared))
    with pytest.raises(ProviderError) as caught:
        complete(endpoint, timeout=20)
    assert caught.value.kind == "malformed" and caught.value.outcome_unknown
    assert "longer than" in caught.value.message
    # The client stopped reading near the cap; the server could not push the rest.
    assert endpoint.bytes_sent < 4 * MAX_BODY_BYTES


def test_a_huge_error_body_is_cut_too(endpoint):
    endpoint.script(Action("huge", size=64 * 1024 * 1024, status=500))
    with pytest.raises(ProviderError) as caught:
        complete(endpoint, timeout=20)
    assert caught.value.outcome_unknown
    assert endpoint.bytes_sent < 4 * MAX_BODY_BYTES


def test_a_body_nested_too_deeply_is_malformed(endpoint):
    endpoint.script(raw("[" * 100_000 + "]" * 100_000))
    with pytest.raises(ProviderError) as caught:
        complete(endpoint)
    assert caught.value.kind == "malformed"


def test_a_slow_drip_ends_at_the_call_timeout(endpoint):
    endpoint.script(drip(usage_body(endpoint.flavor, "9", "5"), delay=0.05))
    with pytest.raises(ProviderError) as caught:
        complete(endpoint, timeout=0.5)
    assert caught.value.kind == "timeout" and caught.value.outcome_unknown


def test_a_server_that_never_answers_times_out(endpoint):
    endpoint.script(hang())
    with pytest.raises(ProviderError) as caught:
        complete(endpoint, timeout=0.3)
    assert caught.value.kind == "timeout" and caught.value.outcome_unknown


def test_a_body_cut_mid_way_keeps_the_reservation(endpoint):
    endpoint.script(truncated())
    with pytest.raises(ProviderError) as caught:
        complete(endpoint)
    assert caught.value.outcome_unknown


# ---------------------------------------------------------------- a dataset against a hostile server

STAR = """
model remote {{
  provider = {provider}
  name     = "{name}"
  base_url = "{base_url}"
  api_key  = env("BAMASC_TEST_KEY")
  price    {{ input = 0.5  output = 2.0 }}
  tier     = 1
}}
role Solver {{
  max_output = 40
  prompt     = "Solve: {{{{task}}}}"
}}
topology star {{
  slot solver : Solver [3..3]
  flow {{
    drafts = parallel solver(task)
    answer vote(drafts)
  }}
}}
system s {{
  models     = [remote]
  topologies = [star]
  budget     = {budget}
  answer     = number
}}
"""

# What each task's text asks the server to do with every call of that task.
BEHAVIOURS = ("honest", "over-cap", "over-prompt", "astronomic", "infinity", "string", "cache", "huge")


def sent_cap(body: dict) -> int:
    return body.get("max_completion_tokens") or body.get("max_tokens")


def prompt_words(body: dict) -> int:
    # Fewer than the UTF-8 bytes of the prompt, so within any reservation's prompt bound.
    return sum(len(str(m.get("content", "")).split()) for m in body.get("messages", []))


def hostile(flavor: str):
    def respond(body) -> Action:
        text = json.dumps(body)
        kind = next(b for b in BEHAVIOURS if f"<{b}>" in text)
        cap, words = sent_cap(body), prompt_words(body)
        if kind == "honest":
            return reply("#### 7", prompt_tokens=words, completion_tokens=min(cap, 9))
        if kind == "over-cap":
            return reply("#### 7", prompt_tokens=words, completion_tokens=cap + 100)
        if kind == "over-prompt":
            return reply("#### 7", prompt_tokens=10_000, completion_tokens=3)
        if kind == "astronomic":
            return raw(usage_body(flavor, str(words), str(10**15)))
        if kind == "infinity":
            return raw(usage_body(flavor, str(words), "Infinity"))
        if kind == "string":
            return raw(usage_body(flavor, f'"{words}"', "3"))
        if kind == "cache":
            if flavor == "openai":  # the OpenAI shape has no cache fields: over-billed prompt instead
                return reply("#### 7", prompt_tokens=words + 5_000, completion_tokens=3)
            return raw(usage_body(flavor, str(words), "3", ', "cache_read_input_tokens": 50000'))
        return huge(64 * 1024 * 1024)

    return respond


OVERBILLING = {"over-cap", "over-prompt", "astronomic", "cache"}


@pytest.mark.parametrize("flavor", ["openai", "anthropic"])
def test_a_dataset_against_a_hostile_server(flavor, request, tmp_path, monkeypatch, capsys):
    server = request.getfixturevalue(f"{flavor}_server")
    monkeypatch.setenv("BAMASC_TEST_KEY", KEY)
    server.responder = hostile(flavor)
    budget = 1500
    source = STAR.format(
        provider=flavor, name="gpt-4o-mini" if flavor == "openai" else "claude-3-5-haiku",
        base_url=server.base_url, budget=budget,
    )
    (tmp_path / "star.bam").write_text(source)
    tasks = [(f"t{i}-{kind}", kind) for i in range(3) for kind in BEHAVIOURS]
    with open(tmp_path / "tasks.jsonl", "w") as handle:
        for task_id, kind in tasks:
            handle.write(json.dumps({"id": task_id, "task": f"<{kind}> What is 3 plus 4?"}) + "\n")
    trace = tmp_path / "trace.jsonl"
    code = main([
        "exec", str(tmp_path / "star.bam"), "--dataset", str(tmp_path / "tasks.jsonl"), "--trace", str(trace),
        "--concurrency", "6", "--retries", "1", "--timeout", "10",
    ])
    out = capsys.readouterr()
    assert "Traceback" not in out.err
    assert trace.exists(), out.err
    assert code != 0  # overbilled tasks make the run fail
    lines = [json.loads(line) for line in trace.read_text().splitlines()]
    finals = {}
    for line in lines:
        if line["type"] == "task":
            assert line["task_id"] not in finals, "two task lines"
            finals[line["task_id"]] = line
    assert set(finals) == {task_id for task_id, _ in tasks}  # no task lost, none aborted the run
    for task_id, kind in tasks:
        final = finals[task_id]
        calls = [line for line in lines if line["type"] == "call" and line["task_id"] == task_id]
        charged = sum(call["charged"] for call in calls)
        assert final["cost"] == pytest.approx(charged, abs=1e-3)
        if kind in OVERBILLING:
            assert final["status"] == "overbilled", final
            assert "billed" in final["error"]
            billed = [c for c in calls if (c["error"] or "").startswith("overbilled")]
            assert len(billed) == 1  # the first over-billed call stopped the task
            # Nothing started after it; siblings still in flight were cancelled and kept their reservation.
            later = calls[calls.index(billed[0]) + 1:]
            assert all(c["error"].startswith("cancelled") and c["charged"] == c["reserved"] for c in later)
        else:
            assert final["cost"] <= budget + 1e-6, final  # the server honoured its limits: the promise holds
            assert not final["overran"]
        if kind in ("infinity", "string", "huge"):
            assert final["status"] in ("error", "failed", "exhausted"), final
            assert all(c["charged"] == c["reserved"] for c in calls if c["error"])  # malformed: kept whole
        if kind == "honest":
            assert final["status"] == "ok" and final["answer"] == "7"
