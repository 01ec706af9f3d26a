"""The proxy's /metrics: Prometheus's format (promtool), USD equal to the ledger's charges, bounded series whatever
names clients send, refusals by reason, no count lost to concurrency, and only the operator reads it."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

pytest.importorskip("starlette", reason="the proxy extra (starlette, uvicorn) is not installed")
pytest.importorskip("prometheus_client", reason="the proxy extra's prometheus-client is not installed")

from bamasc.http.metrics import OTHER  # noqa: E402
from tests.helpers.metrics import promtool_check, samples, series, total  # noqa: E402
from tests.proxy.helpers import TOKEN, ThreadProxy, charged_per_scope, config_text  # noqa: E402
from tests.proxy.upstream import Upstream  # noqa: E402

ADMIN = "admin-token-for-metrics"


@pytest.fixture(scope="module")
def upstream():
    server = Upstream(output=200).start()
    yield server
    server.stop()


@pytest.fixture
def proxy(upstream, tmp_path, monkeypatch):
    monkeypatch.setenv("UPSTREAM_KEY", "upstream-key")
    path = tmp_path / "proxy.bam"
    path.write_text(config_text(upstream.url, budget=100_000, suffixes=("", "-busy")), encoding="utf-8")
    server = ThreadProxy(str(path), trace=str(tmp_path / "trace.jsonl"), admin=ADMIN, keys=str(tmp_path / "keys.jsonl"))
    yield server
    server.stop()


CLIENT = httpx.Client(timeout=60)  # one pool of kept-alive connections (thread-safe): a client each costs ~0.1 s


def _call(proxy, key: str = TOKEN, scope: str = "s1", model: str = "gpt-4.1-mini", budget: str | None = None):
    headers = {"authorization": f"Bearer {key}", "x-bamasc-task": scope}
    if budget is not None:
        headers["x-bamasc-budget"] = budget
    return CLIENT.post(f"{proxy.url}/v1/chat/completions", headers=headers,
                       json={"model": model, "max_tokens": 50, "messages": [{"role": "user", "content": "a few words"}]})


def _scrape(proxy, token: str = TOKEN) -> httpx.Response:
    return httpx.get(f"{proxy.url}/metrics", headers={"authorization": f"Bearer {token}"}, timeout=30)


def test_the_scrape_passes_promtool_and_its_usd_is_the_ledger_s_charge(proxy, tmp_path):
    statuses = [_call(proxy, scope=f"s{n}").status_code for n in range(3)]
    statuses.append(httpx.post(f"{proxy.url}/v1/messages", timeout=60, json={
        "model": "claude-haiku-4-5", "max_tokens": 50, "messages": [{"role": "user", "content": "hello"}]},
        headers={"x-api-key": TOKEN, "anthropic-version": "2023-06-01", "x-bamasc-task": "a1"}).status_code)
    refused = _call(proxy, scope="poor", budget="0.001")  # no output fits: the chain refuses, nothing is sent
    busy = _call(proxy, scope="s9", model="gpt-4.1-mini-busy")  # the upstream's 429: surely not billed, released
    # Many clients at once, each call settled on its own: none of their counts is lost.
    with ThreadPoolExecutor(8) as pool:
        statuses += [reply.status_code for reply in pool.map(lambda n: _call(proxy, scope=f"c{n % 5}"), range(40))]
    # A generated family of model names: each refused before anything is reserved, and none becomes a label.
    unknown = [_call(proxy, model=f"gpt-made-up-{n}-{'x' * (n % 7)}").status_code for n in range(150)]
    assert statuses == [200] * 44 and refused.status_code == 402 and busy.status_code == 429
    assert set(unknown) == {404}

    text = _scrape(proxy).text
    promtool_check(text)
    found = samples(text)
    assert total(found, "bamasc_calls_total", outcome="settled") == 44
    assert total(found, "bamasc_calls_total", outcome="released") == 1
    assert total(found, "bamasc_calls_total", outcome="refused") == 1
    assert total(found, "bamasc_refusals_total", reason="budget") == 1
    assert total(found, "bamasc_refusals_total") == 1
    assert total(found, "bamasc_call_duration_seconds_count") == 45  # every call sent; the refused one was not
    declared = {upstream.model.name for upstream in proxy.settings.upstreams.values()}
    for name in ("bamasc_spent_usd_total", "bamasc_calls_total", "bamasc_call_duration_seconds_bucket"):
        assert series(found, name, "model") <= declared, name
    assert found[("bamasc_http_responses_total", (("code", "404"),))] == 150
    # The USD counter is the ledger's charge for these calls, to the µ$ (the trace and the ledger's memory).
    spent = total(found, "bamasc_spent_usd_total")
    charged = sum(charged_per_scope([str(tmp_path / "trace.jsonl")]).values())
    assert charged > 0 and abs(spent * 1e6 - charged) < 1.0, (spent, charged)
    assert abs(spent * 1e6 - proxy.ledger.charged) < 1.0
    assert abs(total(found, "bamasc_ledger_spent_usd") * 1e6 - proxy.ledger.charged) < 1.0
    assert total(found, "bamasc_ledger_held_usd") == 0


def test_only_the_operator_reads_it_and_keys_past_the_cap_share_one_series(proxy):
    metrics = proxy.server.config.app.state.metrics
    metrics.keys.cap = 2  # a small cap, so a few keys cross it
    keys = []
    for number in range(5):
        made = httpx.post(f"{proxy.url}/v1/admin/keys", json={"name": f"team-bot-{number}"}, timeout=30,
                          headers={"authorization": f"Bearer {ADMIN}"})
        assert made.status_code == 201, made.text
        keys.append(made.json()["key"])
    for key in keys:
        assert _call(proxy, key=key).status_code == 200
    for token in (None, "nonsense", keys[0]):  # a client key sees its own scopes, never every key's spend
        refused = httpx.get(f"{proxy.url}/metrics", timeout=30,
                            headers={} if token is None else {"authorization": f"Bearer {token}"})
        assert refused.status_code == 401, token
        assert "bamasc_" not in refused.text
    assert _scrape(proxy, ADMIN).status_code == 200
    found = samples(_scrape(proxy).text)
    assert series(found, "bamasc_key_spent_usd_total", "key") == {"team-bot-0", "team-bot-1", OTHER}
    assert abs(total(found, "bamasc_key_spent_usd_total") * 1e6 - proxy.ledger.charged) < 1.0
