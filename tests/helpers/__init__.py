"""Helpers that test modules share: imported from here, never from another `test_*.py` file."""

from __future__ import annotations

import os

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# The price catalogue every test compiles against (`bamasc prices --export`, written from genai-prices 0.2.3
# with SOURCE_DATE_EPOCH at 2026-12-01), never the installed release: a data release changes prices and the
# snapshot's date in every plan, and no golden may depend on it. tests/conftest.py sets BAMASC_CATALOG to it
# for the whole session (subprocesses inherit it); tests of the package itself take `installed_catalogue`.
PINNED_CATALOGUE = os.path.join(ROOT, "tests", "fixtures", "catalog", "genai-prices-0.2.3.json")
