"""An OpenAI-compatible provider is one record naming its protocol and base URL: `exec` calls its server, and the
proxy forwards to it, with no other file changed and no `base_url` in the model."""

from __future__ import annotations

import httpx
import pytest

pytest.importorskip("starlette", reason="the proxy extra (starlette, uvicorn) is not installed")
pytest.importorskip("openai", reason="the openai SDK is not installed (the openai extra)")

import bamasc  # noqa: E402
from bamasc.provider_registry import ProviderRecord, register, unregister  # noqa: E402
from tests.api.helpers import SOLVER  # noqa: E402
from tests.proxy.helpers import TOKEN, ThreadProxy  # noqa: E402
from tests.proxy.upstream import Upstream  # noqa: E402

KEY = "COMPATLLM_API_KEY"


@pytest.fixture
def compatible():
    server = Upstream(output=3).start()
    record = ProviderRecord("compatllm", "bamasc.runtime.providers.openai_provider:from_model", sdk="openai",
                            key_env=KEY, paid=True, tools=True, protocol="openai", base_url=f"{server.url}/v1")
    register(record)
    yield server
    unregister(record.name)
    server.stop()


SOURCE = SOLVER.replace('provider = fake\n  name     = "steady"', 'provider = compatllm\n  name     = "open-model"')


def test_exec_calls_the_server_its_record_names(compatible, write_bam, monkeypatch):
    monkeypatch.setenv(KEY, "sk-compatible")
    result = bamasc.load(write_bam(SOURCE)).compile(system="solver").run_sync("What is 3 + 4?")
    assert result.calls and len(compatible.calls) == len(result.calls)
    assert {call["protocol"] for call in compatible.calls} == {"openai"}
    assert {call["model"] for call in compatible.calls} == {"open-model"}
    assert 0 < result.cost <= result.bound


def test_the_proxy_forwards_to_the_server_its_record_names(compatible, write_bam, monkeypatch):
    monkeypatch.setenv(KEY, "sk-compatible")
    proxy = ThreadProxy(str(write_bam(SOURCE)))
    try:
        models = httpx.get(f"{proxy.url}/v1/models", headers={"authorization": f"Bearer {TOKEN}"}).json()
        assert {"steady", "open-model"} <= {model["id"] for model in models["data"]}
        reply = httpx.post(f"{proxy.url}/v1/chat/completions", timeout=60,
                           json={"model": "steady", "messages": [{"role": "user", "content": "hi"}]},
                           headers={"authorization": f"Bearer {TOKEN}", "x-bamasc-task": "compat"})
        assert reply.status_code == 200, reply.text
        assert compatible.calls[-1]["model"] == "open-model"
        assert proxy.scope("compat")["charged"] > 0
    finally:
        proxy.stop()
