"""`exec` and the proxy spend through one admission chain: each ending (a release, a kept hold, a settle) is
checked here on both surfaces, against the same upstream that bills its own tokens. Break an ending of
`metering.admission.Admissions` and both halves of each test fail."""

from __future__ import annotations

import json

import httpx
import pytest

pytest.importorskip("starlette", reason="the proxy extra (starlette, uvicorn) is not installed")
pytest.importorskip("openai", reason="the openai SDK is not installed (the openai extra)")

import bamasc  # noqa: E402
from tests.proxy.helpers import TOKEN, ThreadProxy, config_text  # noqa: E402
from tests.proxy.upstream import Upstream  # noqa: E402


@pytest.fixture(scope="module")
def upstream():
    server = Upstream(output=40).start()
    yield server
    server.stop()


def _exec(upstream, tmp_path, suffix: str):
    """One task of the config's system, its model the upstream's `suffix` behaviour: its result and trace lines."""
    path = tmp_path / "exec.bam"
    path.write_text(config_text(upstream.url, budget=5000, suffixes=(suffix,)), encoding="utf-8")
    trace = tmp_path / "exec.jsonl"
    result = bamasc.load(str(path)).compile(system="proxied").run_sync("say words", trace=str(trace))
    return result, [json.loads(line) for line in trace.read_text(encoding="utf-8").splitlines()]


def _proxy(upstream, tmp_path, suffix: str):
    """One call through the proxy to the upstream's `suffix` behaviour: its status and the trace's call line."""
    path = tmp_path / "proxy.bam"
    path.write_text(config_text(upstream.url, budget=5000, suffixes=(suffix,)), encoding="utf-8")
    proxy = ThreadProxy(str(path), trace=str(tmp_path / "proxy.jsonl"))
    try:
        reply = httpx.post(f"{proxy.url}/v1/chat/completions", timeout=60,
                           json={"model": f"gpt-4.1-mini{suffix}", "max_tokens": 64,
                                 "messages": [{"role": "user", "content": "say words"}]},
                           headers={"authorization": f"Bearer {TOKEN}", "x-bamasc-task": "one"})
    finally:
        proxy.stop()
    lines = [json.loads(line) for line in open(tmp_path / "proxy.jsonl", encoding="utf-8")]
    return reply.status_code, [line for line in lines if line["type"] == "call"]


@pytest.fixture
def keyed(monkeypatch):
    monkeypatch.setenv("UPSTREAM_KEY", "upstream-key")


def _calls(surface: str, upstream, tmp_path, suffix: str) -> list[dict]:
    """The trace's call lines of one task (exec) or one request (proxy) on the upstream's `suffix` behaviour."""
    if surface == "exec":
        result, lines = _exec(upstream, tmp_path, suffix)
        calls = [line for line in lines if line["type"] == "call" and not line.get("skipped")]
        assert result.cost == pytest.approx(sum(line["charged"] for line in calls))
        return calls
    return _proxy(upstream, tmp_path, suffix)[1]


SURFACES = ["exec", "proxy"]


@pytest.mark.parametrize("surface", SURFACES)
def test_a_refusal_the_upstream_did_not_bill_is_released(surface, upstream, tmp_path, keyed, backoff_clock):
    calls = _calls(surface, upstream, tmp_path, "-busy")  # every call answered 429, never billed
    assert calls and all(line["charged"] == 0 < line["reserved"] for line in calls)


@pytest.mark.parametrize("surface", SURFACES)
def test_an_unknown_outcome_keeps_the_whole_hold(surface, upstream, tmp_path, keyed, backoff_clock):
    calls = _calls(surface, upstream, tmp_path, "-broken")  # a 500, after the upstream billed the prompt
    assert calls and all(line["charged"] == line["reserved"] > 0 for line in calls)


@pytest.mark.parametrize("surface", SURFACES)
def test_an_answer_is_settled_to_the_upstreams_usage(surface, upstream, tmp_path, keyed):
    before = len(upstream.calls)
    [call] = _calls(surface, upstream, tmp_path, "")
    [billed] = upstream.calls[before:]
    assert call["charged"] == pytest.approx(billed["prompt"] * 0.4 + billed["completion"] * 1.6)
    assert 0 < call["charged"] < call["reserved"]
