"""Policy tests keep their embedding cache in the test's temporary folder."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("BAMASC_CACHE", str(tmp_path / "cache"))
