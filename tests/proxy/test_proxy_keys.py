"""Budgets the operator sets: keys and teams made through /v1/admin/, against an upstream that bills its own tokens.

Each guarantee is tried by a client that lies: a budget header above its key's ceiling, another key's scope id,
a model outside its list, a revoked key, the admin routes without the admin token. Windows are crossed on a fake
clock.
"""

from __future__ import annotations

import json

import httpx
import pytest

pytest.importorskip("starlette", reason="the proxy extra (starlette, uvicorn) is not installed")

from tests.proxy.helpers import TOKEN, ThreadProxy, config_text  # noqa: E402
from tests.proxy.upstream import Upstream  # noqa: E402

ADMIN = "admin-token-for-tests"
PRICE_IN, PRICE_OUT = 0.4, 1.6


@pytest.fixture(scope="module")
def upstream():
    server = Upstream(output=200).start()
    yield server
    server.stop()


class Clock:
    def __init__(self, now: float = 1_800_000_000.0):  # 2027-01-15T08:00:00Z
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock():
    return Clock()


@pytest.fixture
def proxy(upstream, tmp_path, monkeypatch, clock):
    monkeypatch.setenv("UPSTREAM_KEY", "upstream-key")
    path = tmp_path / "proxy.bam"
    path.write_text(config_text(upstream.url, budget=100_000), encoding="utf-8")
    server = ThreadProxy(str(path), trace=str(tmp_path / "trace.jsonl"), admin=ADMIN, keys=str(tmp_path / "keys.jsonl"),
                         clock=clock)
    yield server
    server.stop()


def _admin(proxy, method: str, path: str, body=None, token: str = ADMIN) -> httpx.Response:
    return httpx.request(method, f"{proxy.url}/v1/admin/{path}", json=body, timeout=30,
                         headers={"authorization": f"Bearer {token}"})


def _call(proxy, key: str, scope: str = "t1", budget: str | None = None, model: str = "gpt-4.1-mini",
          cap: int = 100) -> httpx.Response:
    headers = {"authorization": f"Bearer {key}", "x-bamasc-task": scope}
    if budget is not None:
        headers["x-bamasc-budget"] = budget
    return httpx.post(f"{proxy.url}/v1/chat/completions", timeout=60, headers=headers,
                      json={"model": model, "max_tokens": cap, "messages": [{"role": "user", "content": "words"}]})


def _billed(calls) -> float:
    return sum(call["prompt"] * PRICE_IN + call["completion"] * PRICE_OUT for call in calls if call["billed"])


def _key(proxy, **fields) -> str:
    made = _admin(proxy, "POST", "keys", fields)
    assert made.status_code == 201, made.text
    return made.json()["key"]


@pytest.mark.parametrize("token", [None, TOKEN, "nonsense", "bk-forged"])
def test_the_admin_routes_take_the_admin_token_only(proxy, token):
    for method, path, body in [("POST", "keys", {"name": "x"}), ("POST", "teams", {"name": "t"}),
                               ("GET", "keys/x", None), ("DELETE", "keys/x", None), ("GET", "teams/t", None)]:
        response = httpx.request(method, f"{proxy.url}/v1/admin/{path}", json=body, timeout=30,
                                 headers={} if token is None else {"authorization": f"Bearer {token}"})
        assert response.status_code == 401, (method, path, response.text)
    made = _key(proxy, name="bot")
    assert _admin(proxy, "GET", "keys/bot", token=made).status_code == 401  # a key is no admin


@pytest.mark.parametrize("body, field", [
    ({}, "name"), ({"name": ""}, "name"), ({"name": "a b"}, "name"), ({"name": "x", "scope_budget": 0}, "scope_budget"),
    ({"name": "x", "scope_budget": "9"}, "scope_budget"), ({"name": "x", "budgets": [{"amount": 5, "per": "2d"}]},
                                                            "budgets"),
    ({"name": "x", "budgets": [{"amount": 5, "per": "1d"}, {"amount": 9, "per": "1d"}]}, "budgets"),
    ({"name": "x", "budgets": [{"amount": -5, "per": "1d"}]}, "budgets"), ({"name": "x", "models": ["nope"]}, "models"),
    ({"name": "x", "on_exhausted": "explode"}, "on_exhausted"), ({"name": "x", "team": "missing"}, "team"),
    ({"name": "x", "budget": 5}, "budget"),
])
def test_a_bad_key_is_refused_naming_its_field(proxy, body, field):
    response = _admin(proxy, "POST", "keys", body)
    assert response.status_code == 400 and response.json()["error"]["param"] == field, response.text


def test_a_key_cannot_raise_its_ceiling_and_its_scopes_are_its_own(proxy, upstream):
    first, second = _key(proxy, name="first", scope_budget=300), _key(proxy, name="second", scope_budget=300)
    before = len(upstream.calls)
    refused = None
    for _ in range(20):  # the header asks for 50,000 µ$; the key allows 300
        response = _call(proxy, first, budget="50000")
        if response.status_code != 200:
            refused = response
            break
    assert refused is not None and refused.status_code == 402
    assert _billed(upstream.calls[before:]) <= 300 + 1e-6
    # The same scope id under another key is another scope, with a budget of its own, and neither sees the other's.
    assert _call(proxy, second).status_code == 200
    mine = httpx.get(f"{proxy.url}/v1/scopes/t1", headers={"authorization": f"Bearer {second}"}).json()
    assert mine["calls"] == 1
    assert httpx.get(f"{proxy.url}/v1/scopes/t1", headers={"authorization": f"Bearer {TOKEN}"}).status_code == 404
    assert httpx.get(f"{proxy.url}/v1/budget", headers={"authorization": f"Bearer {first}"}).status_code == 401


def test_a_key_may_use_only_its_models_and_a_deleted_key_is_refused_at_once(proxy, upstream):
    key = _key(proxy, name="narrow", models=["m0_0"])
    before = len(upstream.calls)
    assert _call(proxy, key, model="claude-haiku-4-5").status_code in (403, 404)
    assert _call(proxy, key, model="gpt-4.1-mini-drop").status_code == 403
    assert len(upstream.calls) == before
    listed = httpx.get(f"{proxy.url}/v1/models", headers={"authorization": f"Bearer {key}"}).json()
    assert {model["id"] for model in listed["data"]} == {"m0_0", "gpt-4.1-mini"}
    assert _call(proxy, key).status_code == 200
    assert _admin(proxy, "DELETE", "keys/narrow").status_code == 200
    assert _call(proxy, key).status_code == 401
    assert _admin(proxy, "GET", "keys/narrow").status_code == 404


def test_windows_hold_per_key_and_per_team_and_open_again_at_the_boundary(proxy, upstream, clock):
    assert _admin(proxy, "POST", "teams", {"name": "cx", "budgets": [{"amount": 900, "per": "1h"}]}).status_code == 201
    keys = [_key(proxy, name=f"agent{n}", team="cx", budgets=[{"amount": 500, "per": "1m"}]) for n in range(3)]
    per_window: dict[tuple, float] = {}
    for step in range(150):
        clock.now += 2.5  # a minute every 24 calls, an hour never
        key = keys[step % 3]
        before = len(upstream.calls)
        response = _call(proxy, key, scope=f"s{step}", cap=60)
        billed = _billed(upstream.calls[before:])
        assert response.status_code in (200, 402), response.text
        minute, hour = int(clock.now // 60), int(clock.now // 3600)
        per_window[("key", step % 3, minute)] = per_window.get(("key", step % 3, minute), 0.0) + billed
        per_window[("team", hour)] = per_window.get(("team", hour), 0.0) + billed
    for window, billed in per_window.items():
        assert billed <= (500 if window[0] == "key" else 900) + 1e-6, window
    assert max(billed for window, billed in per_window.items() if window[0] == "team") > 800  # the team bound
    shown = _admin(proxy, "GET", "teams/cx").json()
    assert shown["windows"][0]["per"] == "1h" and shown["windows"][0]["charged"] <= 900


def test_keys_and_their_spend_survive_a_restart(upstream, tmp_path, monkeypatch, clock):
    monkeypatch.setenv("UPSTREAM_KEY", "upstream-key")
    path = tmp_path / "proxy.bam"
    path.write_text(config_text(upstream.url, budget=100_000), encoding="utf-8")
    paths = {"trace": str(tmp_path / "trace.jsonl"), "keys": str(tmp_path / "keys.jsonl")}
    first = ThreadProxy(str(path), admin=ADMIN, clock=clock, **paths)
    try:
        key = _key(first, name="daily", budgets=[{"amount": 400, "per": "1d"}])
        while _call(first, key, scope="a").status_code == 200:
            pass
    finally:
        first.stop()
    again = ThreadProxy(str(path), admin=ADMIN, clock=clock, **paths)
    try:
        response = _call(again, key, scope="b")  # a new scope, the same key's day: still spent
        assert response.status_code == 402 and "daily" in response.json()["error"]["message"]
        clock.now += 86400
        assert _call(again, key, scope="c").status_code == 200  # the next day
    finally:
        again.stop()


def test_on_exhausted_answer_ends_the_call_with_an_answer_and_forwards_nothing(proxy, upstream):
    key = _key(proxy, name="polite", scope_budget=200, on_exhausted="answer")
    before = len(upstream.calls)
    while True:
        response = _call(proxy, key, scope="ticket")
        assert response.status_code == 200
        if response.headers.get("x-bamasc-exhausted") == "1":
            break
    answer = response.json()
    assert answer["choices"][0]["finish_reason"] == "stop" and answer["usage"]["completion_tokens"] == 0
    assert "budget" in answer["choices"][0]["message"]["content"]
    forwarded = len(upstream.calls)
    assert _call(proxy, key, scope="ticket").headers.get("x-bamasc-exhausted") == "1"
    assert len(upstream.calls) == forwarded
    assert _billed(upstream.calls[before:]) <= 200 + 1e-6
    lines = [json.loads(line) for line in open(proxy.ledger.trace.path, encoding="utf-8")]
    assert all(line["task_id"] == "polite ticket" for line in lines if line.get("type") == "call"
               and line["task_id"].startswith("polite"))


def test_every_refused_call_is_a_line_of_the_trace(proxy, upstream):
    """A 402 (and an answer in place of a call) leaves a `skipped` call line naming what ran out: nothing reserved,
    nothing charged, so an operator can count how often scopes hit their cap."""
    refusing, answering = _key(proxy, name="counted", scope_budget=150), _key(proxy, name="told", scope_budget=150,
                                                                             on_exhausted="answer")
    refused = answered = 0
    for _ in range(6):
        refused += _call(proxy, refusing, scope="cap").status_code == 402
        answered += _call(proxy, answering, scope="cap").headers.get("x-bamasc-exhausted") == "1"
    lines = [json.loads(line) for line in open(proxy.ledger.trace.path, encoding="utf-8")]
    skipped = [line for line in lines if line["type"] == "call" and line.get("skipped")]
    assert refused and answered
    assert sum(line["task_id"] == "counted cap" for line in skipped) == refused
    assert sum(line["task_id"] == "told cap" for line in skipped) == answered
    assert all(line["charged"] == line["reserved"] == 0 and "left of its budget" in line["error"] for line in skipped)
