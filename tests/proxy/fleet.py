"""What the shared-ledger tests share: a redis-server they start, an upstream that bills per scope, and proxy
processes that start in a fraction of a second and die by `kill -9`.

A `bamasc proxy` process spends about three seconds loading its tokenizer.
`Launcher` pays that once: a helper process (`python -m tests.proxy.fleet`)
imports the proxy, loads the tokenizer, and forks one child per proxy asked
for. Each child runs `bamasc proxy ...` from its argument parsing on, in its
own process, so a test kills it as it would kill any proxy.
"""

from __future__ import annotations

import contextvars
import json
import os
import shutil
import signal
import subprocess
import sys
import time

import httpx

from tests.conftest import ROOT
from tests.proxy.helpers import PRICES, TOKEN, free_port
from tests.proxy.upstream import Upstream

REDIS_MISSING = None if shutil.which("redis-server") else "no redis-server on PATH (Debian: apt install redis-server)"


class RedisServer:
    """A redis-server that keeps nothing on disk: `restart` brings it back empty, as a server without persistence."""

    def __init__(self, folder) -> None:
        self.port = free_port()
        self.folder = str(folder)
        self.process: subprocess.Popen | None = None
        self.start()

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        import redis

        self.process = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
             "--dir", self.folder], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        client = redis.Redis(port=self.port)
        for _ in range(500):
            try:
                client.ping()
                return
            except redis.exceptions.ConnectionError:
                time.sleep(0.02)
        raise AssertionError("redis-server did not start")

    def client(self):
        import redis

        return redis.Redis(port=self.port, decode_responses=True)

    def flushall(self) -> None:
        self.client().flushall()

    def restart_empty(self) -> None:
        self.kill()
        self.start()

    def kill(self) -> None:
        if self.process is not None:
            self.process.kill()
            self.process.wait()
            self.process = None


_SCOPE = contextvars.ContextVar("scope", default=None)


class ScopedUpstream(Upstream):
    """The honest upstream, also noting each call's scope (the first word of its first message, as `ask` writes it)
    and when it came (`at`, time.monotonic())."""

    async def _answer(self, request, protocol):
        body = json.loads(await request.body())
        first = (body.get("messages") or [{}])[0].get("content")
        _SCOPE.set(first.split()[0] if isinstance(first, str) and first.split() else None)
        return await super()._answer(request, protocol)

    def _record(self, **call) -> None:
        super()._record(**call, scope=_SCOPE.get(), at=time.monotonic())

    def billed_per_scope(self) -> dict[str, float]:
        """µ$ the upstream billed each scope, by its own count of tokens."""
        prices = {model + suffix: rates for model, rates in PRICES.items() for suffix in ("", "-hang", "-paced")}
        with self.lock:
            billed: dict[str, float] = {}
            for call in self.calls:
                if call["billed"]:
                    price_in, price_out = prices[call["model"]]
                    billed[call["scope"]] = billed.get(call["scope"], 0.0) + call["prompt"] * price_in + \
                        call["completion"] * price_out
            return billed


def ask(url: str, scope: str, budget: float, max_tokens: int | None = None, model: str = "gpt-4.1-mini",
        timeout: float = 30) -> int:
    """One chat call through the proxy at `url` in `scope`; the HTTP status (0: the proxy was not there)."""
    body = {"model": model, "messages": [{"role": "user", "content": f"{scope} please answer"}]}
    if max_tokens is not None:
        body["max_tokens"] = max_tokens
    headers = {"authorization": f"Bearer {TOKEN}", "x-bamasc-task": scope, "x-bamasc-budget": f"{budget:g}"}
    try:
        return httpx.post(f"{url}/v1/chat/completions", json=body, headers=headers, timeout=timeout).status_code
    except httpx.TransportError:
        return 0


def spend_out(url: str, scope: str, budget: float, limit: int = 50) -> list[int]:
    """Calls in `scope` until one is refused (or the proxy is gone); the statuses seen."""
    statuses = []
    for _ in range(limit):
        statuses.append(ask(url, scope, budget))
        if statuses[-1] != 200:
            return statuses
    raise AssertionError(f"scope {scope} was never refused in {limit} calls")


class Proxy:
    """One proxy child of the launcher."""

    def __init__(self, pid: int, port: int, folder: str, name: str) -> None:
        self.pid, self.port, self.folder, self.name = pid, port, folder, name

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _file(self, suffix: str) -> str:
        return os.path.join(self.folder, f"{self.name}.{suffix}")

    @property
    def code(self) -> int | None:
        """The exit code it wrote on its way out; None while it runs or after a kill."""
        try:
            with open(self._file("code"), encoding="utf-8") as handle:
                return int(handle.read())
        except (OSError, ValueError):
            return None

    @property
    def stderr(self) -> str:
        with open(self._file("err"), encoding="utf-8", errors="replace") as handle:
            return handle.read()

    def alive(self) -> bool:
        try:
            os.kill(self.pid, 0)
            return True
        except ProcessLookupError:
            return False

    def kill9(self) -> None:
        """`kill -9`: nothing after this line of the proxy's runs."""
        try:
            os.kill(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            return
        self._gone()

    def stop(self) -> int | None:
        """SIGTERM, a graceful stop; its exit code."""
        try:
            os.kill(self.pid, signal.SIGTERM)
        except ProcessLookupError:
            return self.code
        self._gone()
        return self.code

    def _gone(self) -> None:
        for _ in range(3000):
            if not self.alive():
                return
            time.sleep(0.01)
        raise AssertionError(f"proxy {self.name} did not end")


class Launcher:
    """Forks `bamasc proxy` processes from a helper that has loaded everything they load."""

    def __init__(self, folder) -> None:
        self.folder = str(folder)
        self.count = 0
        self.children: list[Proxy] = []
        self.process = subprocess.Popen([sys.executable, "-m", "tests.proxy.fleet"], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, text=True, cwd=ROOT,
                                        env={**os.environ, "PYTHONPATH": ROOT})
        ready = self.process.stdout.readline()
        assert ready.strip() == "ready", ready

    def start(self, config: str, *extra: str, wait: bool = True) -> Proxy:
        """`bamasc proxy --config CONFIG ... EXTRA` on a free port; once it listens (or has exited), when `wait`."""
        self.count += 1
        name = f"proxy{self.count}"
        port = free_port()
        argv = ["proxy", "--config", config, "--port", str(port), "--token-env", "PROXY_TOKEN", *extra]
        paths = {suffix: os.path.join(self.folder, f"{name}.{suffix}") for suffix in ("out", "err", "code")}
        request = {"argv": argv, "env": {"PROXY_TOKEN": TOKEN, "UPSTREAM_KEY": "upstream-key"}, **paths}
        self.process.stdin.write(json.dumps(request) + "\n")
        self.process.stdin.flush()
        proxy = Proxy(int(self.process.stdout.readline()), port, self.folder, name)
        self.children.append(proxy)
        if wait:
            self.wait_ready(proxy)
        return proxy

    @staticmethod
    def wait_ready(proxy: Proxy) -> Proxy:
        """Once `proxy` answers /healthz or has exited (see its `code`)."""
        for _ in range(3000):
            if not proxy.alive():
                return proxy
            try:
                if httpx.get(f"{proxy.url}/healthz", timeout=1).status_code == 200:
                    return proxy
            except httpx.HTTPError:
                time.sleep(0.01)
        raise AssertionError(f"proxy {proxy.name} never listened")

    def close(self) -> None:
        for child in self.children:
            child.kill9()
        self.process.stdin.close()
        self.process.wait(30)


def _serve_forks() -> None:
    """The launcher's helper: load what a proxy loads, then fork a proxy for each request line on stdin."""
    from bamasc.cli import main
    import bamasc.cli.proxy  # noqa: F401
    import bamasc.metering.redis_ledger  # noqa: F401
    import bamasc.proxy.app  # noqa: F401
    import redis.asyncio  # noqa: F401
    import uvicorn.protocols.http.auto  # noqa: F401
    from bamasc.runtime.tokens import tokenizer_available

    tokenizer_available()  # the three seconds
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # the kernel reaps the children: none stays a zombie
    print("ready", flush=True)
    for line in sys.stdin:
        request = json.loads(line)
        pid = os.fork()
        if pid:
            print(pid, flush=True)
            continue
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        _die_with_parent()
        nothing = os.open(os.devnull, os.O_RDONLY)
        os.dup2(nothing, 0)
        for number, key in ((1, "out"), (2, "err")):
            os.dup2(os.open(request[key], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644), number)
        os.environ.update(request["env"])
        code = 70
        try:
            code = main(request["argv"])
        except SystemExit as stop:
            code = stop.code if isinstance(stop.code, int) else 1
        except BaseException:  # noqa: BLE001: a traceback is what the test reads in the child's stderr
            import traceback

            traceback.print_exc()
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            with open(request["code"], "w", encoding="utf-8") as handle:
                handle.write(str(code))
            os._exit(code)


def _die_with_parent() -> None:
    """On Linux, the child is killed when the helper ends (as it does when the test run that fed it ends)."""
    try:
        import ctypes

        ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


if __name__ == "__main__":
    _serve_forks()
