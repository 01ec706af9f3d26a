"""Keys and teams declared in the proxy's `.bam` config (docs/language.md, "Keys and teams") hold as admin-made ones."""

from __future__ import annotations

import os
import subprocess
import sys

import httpx
import pytest

pytest.importorskip("starlette", reason="the proxy extra (starlette, uvicorn) is not installed")

from tests.conftest import ROOT  # noqa: E402
from tests.proxy.helpers import ThreadProxy, config_text  # noqa: E402
from tests.proxy.upstream import Upstream  # noqa: E402

SECRET = "bk-declared-secret-for-tests"
KEYS = """
team cx {
  budgets = [window($50, "1d")]
}

key support_bot {
  secret       = env("SUPPORT_BOT_KEY")
  team         = cx
  scope_budget = 5000 µ$
  models       = [m0_0]
}
"""


@pytest.fixture(scope="module")
def upstream():
    server = Upstream(output=200).start()
    yield server
    server.stop()


@pytest.fixture
def config(upstream, tmp_path, monkeypatch):
    monkeypatch.setenv("UPSTREAM_KEY", "upstream-key")
    path = tmp_path / "proxy.bam"
    path.write_text(config_text(upstream.url, budget=100_000) + KEYS, encoding="utf-8")
    return str(path)


def _call(proxy, key: str, model: str = "gpt-4.1-mini", budget: str | None = None) -> httpx.Response:
    headers = {"authorization": f"Bearer {key}", "x-bamasc-task": "ticket-1"}
    if budget is not None:
        headers["x-bamasc-budget"] = budget
    return httpx.post(f"{proxy.url}/v1/chat/completions", timeout=60, headers=headers,
                      json={"model": model, "max_tokens": 50, "messages": [{"role": "user", "content": "words"}]})


def test_a_declared_key_calls_its_models_under_its_scope_budget(config, monkeypatch):
    monkeypatch.setenv("SUPPORT_BOT_KEY", SECRET)
    proxy = ThreadProxy(config, token=None)
    try:
        assert _call(proxy, SECRET, budget="999999").status_code == 200
        scope = httpx.get(f"{proxy.url}/v1/scopes/ticket-1", headers={"authorization": f"Bearer {SECRET}"}).json()
        assert scope["budget"] == 5000  # the key's ceiling, not the header's higher budget
        assert _call(proxy, SECRET, model="m0_1").status_code == 403  # a model of the config, not among its own
        assert _call(proxy, "bk-not-a-declared-key").status_code == 401
    finally:
        proxy.stop()


def test_a_declared_key_whose_secret_is_not_set_stops_the_proxy(config):
    environment = {name: value for name, value in os.environ.items() if name != "SUPPORT_BOT_KEY"}
    environment.update(UPSTREAM_KEY="upstream-key", PYTHONPATH=ROOT)
    # It stops before it listens; the timeout only keeps a regression from hanging the suite.
    done = subprocess.run([sys.executable, "-m", "bamasc", "proxy", "--config", config, "--port", "0"],
                          capture_output=True, text=True, env=environment, timeout=120)
    assert done.returncode == 2
    assert "key 'support_bot' reads its secret from $SUPPORT_BOT_KEY, which is not set" in done.stderr
