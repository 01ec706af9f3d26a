"""Shared test helpers: repository paths and the files that must lint clean; the pinned price catalogue; the memory guard."""

from __future__ import annotations

import glob
import os

import pytest

from bamasc.program import Model
from bamasc.source import Span
from tests.helpers import PINNED_CATALOGUE

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLES = sorted(glob.glob(os.path.join(ROOT, "examples", "*.bam")))
STDLIB = sorted(glob.glob(os.path.join(ROOT, "stdlib_topologies", "*.bam")))

os.environ["BAMASC_CATALOG"] = PINNED_CATALOGUE  # (tests/helpers/__init__.py says why)


@pytest.fixture
def installed_catalogue(monkeypatch):
    """The installed genai-prices is the catalogue (nothing pinned) for this test."""
    monkeypatch.delenv("BAMASC_CATALOG")


@pytest.fixture
def write_bam(tmp_path):
    """Write a .bam source into the test's temporary folder and return its path."""

    def write(text: str, name: str = "main.bam") -> str:
        path = tmp_path / name
        path.write_text(text, encoding="utf-8")
        return str(path)

    return write


def model_declaration(**fields) -> Model:
    """A checked `model` declaration (an OpenAI one unless `fields` say otherwise)."""
    values = {
        "name": "m1",
        "provider": "openai",
        "model_id": "gpt-4o-mini",
        "price_input": 0.1,
        "price_output": 0.4,
        "tier": 1,
        "base_url": None,
        "api_key_env": None,
        "max_output": None,
        "context": None,
        "tokenizer": None,
        "quality": {},
        "default_quality": 1.0,
        "span": Span("test.bam", 1, 1, 1, 2),
    }
    values.update(fields)
    return Model(**values)


# ---------------------------------------------------------------- the memory guard (tests/watchdog.py)

_WATCHDOG = None


def pytest_configure(config):
    global _WATCHDOG
    from tests.watchdog import LIMIT_MIB, Watchdog

    if LIMIT_MIB <= 0 or not os.path.isdir("/proc/self/task"):
        return
    capture = config.pluginmanager.getplugin("capturemanager")
    if capture is None:
        stderr_fd = os.dup(2)
    else:
        with capture.global_and_fixture_disabled():
            stderr_fd = os.dup(2)  # the terminal's stderr, not the capture's file
    _WATCHDOG = Watchdog(stderr_fd)
    _WATCHDOG.thread.start()


def pytest_runtest_logstart(nodeid, location):
    if _WATCHDOG is not None:
        _WATCHDOG.test_started(nodeid)


def pytest_runtest_logfinish(nodeid, location):
    if _WATCHDOG is not None:
        _WATCHDOG.test_finished(nodeid)


def pytest_unconfigure(config):
    if _WATCHDOG is not None:
        _WATCHDOG.stop.set()


# ---------------------------------------------------------------- the longest modules first

# Modules that take a worker longest (pytest --durations, 2 cores): scheduled first, so that no worker starts
# one of them while the other is nearly done (xdist hands out modules in collection order). The CLI goldens
# build every record (about 100 s) before their first test.
LONGEST_MODULES = (
    "tests/test_cli_golden.py", "tests/optimize/test_pareto.py", "tests/dynamic/test_dynamic_milp.py",
    "tests/test_fuzz_inputs.py", "tests/evaluate/test_reproduce.py", "tests/runtime/test_ray_faults.py",
    "tests/optimize/test_prune.py", "tests/policy/test_learn.py", "tests/proxy/test_keys_redis.py",
    "tests/proxy/test_ledger_memory.py",
)


def pytest_collection_modifyitems(session, config, items):
    first = {name: rank for rank, name in enumerate(LONGEST_MODULES)}
    items.sort(key=lambda item: first.get(item.nodeid.partition("::")[0], len(first)))  # stable: the rest keep order


# ---------------------------------------------------------------- waits on a fake clock


class BackoffClock:
    """A fake clock for the interpreter's retry back-off and the rate limiter's pauses: each wait is recorded in
    `waited` and moves `now()` on by its length, then returns at once (after yielding to the loop, as a sleep
    does). Concurrent waits add up rather than overlap, so the clock runs ahead of real time: a limiter's
    window ends sooner, as on a slow machine, which no charge depends on. Stands in for the interpreter's
    `asyncio` module too: every other name is asyncio's own."""

    def __init__(self):
        import asyncio
        import time

        self._asyncio = asyncio
        self._start = time.monotonic()
        self.waited: list[float] = []

    def now(self) -> float:
        return self._start + sum(self.waited)

    async def sleep(self, seconds, result=None):
        self.waited.append(max(0.0, seconds))
        return await self._asyncio.sleep(0, result)

    def __getattr__(self, name):
        return getattr(self._asyncio, name)


@pytest.fixture
def backoff_clock(monkeypatch) -> BackoffClock:
    """Retries back off, and a rate limiter paused by a 429 waits, on a fake clock: the waits are drawn and
    recorded as always, not slept (a test of what a batch charges need not sit out a minute of back-off).
    Providers and deadlines keep the real clock."""
    from bamasc.runtime import interpreter
    from bamasc.metering.limiter import RateLimiter

    clock = BackoffClock()
    monkeypatch.setattr(interpreter, "asyncio", clock)
    monkeypatch.setitem(RateLimiter.__init__.__kwdefaults__, "clock", clock.now)
    monkeypatch.setitem(RateLimiter.__init__.__kwdefaults__, "sleep", clock.sleep)
    return clock
