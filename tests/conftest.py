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


# ---------------------------------------------------------------- retry back-off on a fake clock


class BackoffClock:
    """Stands in for the interpreter's `asyncio`: each back-off wait is added to `waited` and returns at once
    (after yielding to the loop, as a sleep does); every other name is asyncio's own."""

    def __init__(self):
        import asyncio

        self._asyncio = asyncio
        self.waited: list[float] = []

    async def sleep(self, seconds, result=None):
        self.waited.append(seconds)
        return await self._asyncio.sleep(0, result)

    def __getattr__(self, name):
        return getattr(self._asyncio, name)


@pytest.fixture
def backoff_clock(monkeypatch) -> BackoffClock:
    """Retries back off on a fake clock: the waits are drawn and recorded as always, but not slept (a test of
    what a batch charges need not wait out dozens of seconds of back-off). Only the interpreter's back-off is
    faked; providers, limiters and deadlines keep the real clock."""
    from bamasc.runtime import interpreter

    clock = BackoffClock()
    monkeypatch.setattr(interpreter, "asyncio", clock)
    return clock
