"""What the proxy's tests share: a config naming the honest upstream, and a proxy served in a thread or a process."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import threading
import time

import httpx

from tests.conftest import ROOT

# µ$ per token (USD per million tokens) of each declared model, as the upstream bills them.
PRICES = {"gpt-4.1-mini": (0.4, 1.6), "claude-haiku-4-5": (1.0, 5.0)}
TOKEN = "proxy-token-for-tests"


def config_text(upstream_url: str, budget: float | None = 556, suffixes=("", "-overbill", "-drop", "-busy", "-broken", "-hang")) -> str:
    """A proxy config: each model of PRICES on the upstream, once per behaviour suffix, and a system's budget."""
    blocks = []
    for index, (model, (price_in, price_out)) in enumerate(PRICES.items()):
        provider = "openai" if model.startswith("gpt") else "anthropic"
        base = f"{upstream_url}/v1" if provider == "openai" else upstream_url
        for number, suffix in enumerate(suffixes):
            blocks.append(
                f"model m{index}_{number} {{\n  provider = {provider}\n  name = \"{model}{suffix}\"\n"
                f"  base_url = \"{base}\"\n  api_key = env(\"UPSTREAM_KEY\")\n  tier = 1\n"
                f"  price {{ input = {price_in}  output = {price_out} }}\n}}\n"
            )
    system = ""
    if budget is not None:
        system = (
            "role Worker { max_output = 64  prompt = \"{{task}}\" }\n"
            "topology solo {\n  slot w : Worker [1..1]\n  flow { answer chain w(task) }\n}\n"
            f"system proxied {{ models = [m0_0]  topologies = [solo]  task_tokens = 100  budget = {budget:g} }}\n"
        )
    return "".join(blocks) + system


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class ThreadProxy:
    """`bamasc proxy`'s app on the local ledger, served by uvicorn in a thread of the test process."""

    def __init__(self, config_path: str, total: float | None = None, trace: str | None = None, token: str | None = TOKEN,
                 admin: str | None = None, keys: str | None = None, clock=None):
        import asyncio

        import uvicorn

        from bamasc.cli.proxy import _declare, _key_store, _ledger, _settings
        from bamasc.cli.report import Report
        from bamasc.proxy.app import build_app

        args = _Args(config=config_path, budget=None, system=None, total_budget=total, trace=trace, redis=None,
                     redis_prefix="bamasc", max_body=32 << 20, timeout=30.0, request_timeout=30.0, keys=keys,
                     fold_trace=[])
        report = Report()
        self.settings = settings = _settings(report, args, None if token is None else token.encode())
        assert settings is not None, report.return_code
        self.ledger, _ = _ledger(report, args)
        if clock is not None:
            settings.clock = clock
        if admin is not None or settings.declared_keys:
            settings.admin_token = None if admin is None else admin.encode()
            settings.keys = _key_store(report, args, self.ledger)
            asyncio.run(_declare(settings))
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        self.port = sock.getsockname()[1]
        self.server = uvicorn.Server(uvicorn.Config(build_app(settings, self.ledger), log_level="critical",
                                                    access_log=False))
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [sock]}, daemon=True)
        self.thread.start()
        while not self.server.started:
            time.sleep(0.01)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def scope(self, name: str) -> dict:
        return httpx.get(f"{self.url}/v1/scopes/{name}", headers={"authorization": f"Bearer {TOKEN}"}).json()

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(10)
        self.server.force_exit = True  # a request still in flight (a `-hang` upstream) is cancelled
        self.thread.join(60)
        assert not self.thread.is_alive(), "the proxy's server thread did not stop"
        if self.ledger.trace is not None:
            self.ledger.trace.close()


class _Args:
    def __init__(self, **values):
        self.__dict__.update(values)


def process_proxy(config_path: str, *extra: str, env: dict | None = None) -> tuple[subprocess.Popen, str]:
    """`bamasc proxy` as its own process; returns it and its URL once it listens."""
    port = free_port()
    command = [sys.executable, "-m", "bamasc", "proxy", "--config", config_path, "--port", str(port),
               "--token-env", "PROXY_TOKEN", *extra]
    environment = {**os.environ, "PROXY_TOKEN": TOKEN, "UPSTREAM_KEY": "upstream-key", "PYTHONPATH": ROOT,
                   **(env or {})}
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=environment, text=True)
    url = f"http://127.0.0.1:{port}"
    for _ in range(600):
        if process.poll() is not None:
            raise AssertionError(f"the proxy exited {process.returncode}: {process.stderr.read()}")
        try:
            if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                return process, url
        except httpx.HTTPError:
            time.sleep(0.05)
    process.kill()
    raise AssertionError("the proxy never listened")


def charged_per_scope(trace_paths) -> dict[str, float]:
    """Each scope's charges over every trace given, open reservations counted in full (as a resume does)."""
    from bamasc.runtime.trace import read_ledgers

    totals: dict[str, float] = {}
    for path in trace_paths:
        for scope, ledger in read_ledgers(path).items():
            totals[scope] = totals.get(scope, 0.0) + ledger.spent
    return totals


def traceback_free(text: str) -> bool:
    return "Traceback" not in text and not re.search(r"^\s+File \"", text, re.MULTILINE)
