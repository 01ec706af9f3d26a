"""`import bamasc` stays cheap: the API loads on first use, and its names are where `bamasc.__all__` says."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

import bamasc
from tests.conftest import ROOT


def _fresh(code: str) -> dict:
    env = {**os.environ, "PYTHONPATH": ROOT}
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_import_bamasc_loads_nothing_else():
    loaded = _fresh("import json, sys, bamasc; print(json.dumps(sorted(m for m in sys.modules if m.startswith('bamasc') or m in ('typing', 'dataclasses', 'asyncio'))))")
    assert loaded == ["bamasc"]


def test_a_name_loads_its_module_only_when_used():
    loaded = _fresh(
        "import json, sys, bamasc; before = 'bamasc.api.plan' in sys.modules; bamasc.Plan; "
        "print(json.dumps([before, 'bamasc.api.plan' in sys.modules, 'starlette' in sys.modules, 'highspy' in sys.modules]))"
    )
    assert loaded == [False, True, False, False]


def test_every_public_name_resolves():
    for name in bamasc.__all__:
        assert getattr(bamasc, name) is not None, name
    assert set(bamasc.__all__) <= set(dir(bamasc))
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        bamasc.nope  # noqa: B018
    assert issubclass(bamasc.BudgetError, bamasc.BamError) and issubclass(bamasc.BudgetError, ValueError)
    assert issubclass(bamasc.PlanError, bamasc.BamError)
