"""catalog() at lint, compile and exec: offline, located errors, warnings, stale plans, and `bamasc prices`."""

from __future__ import annotations

import datetime
import json
import socket
import subprocess
import sys

import pytest

from bamasc import catalog
from bamasc.catalog import cache as catalog_cache
from bamasc.lint import lint_paths
from bamasc.plan.compile import compile_file
from bamasc.plan.load import StalePlanError, load_plan
from bamasc.prices import Pricing
from tests.conftest import ROOT

SYSTEM = """
model nano {{
  provider = openai
  api_key  = env("OPENAI_API_KEY")
  name     = "gpt-4.1-nano"
  price    {price}
  tier     = 1
}}
role Solver {{
  max_output = 64
  prompt = "Solve: {{{{task}}}}"
}}
topology one {{
  slot solver : Solver [1..1]
  flow {{ a = solver(task)  answer a }}
}}
system s {{
  models = [nano]
  topologies = [one]
  budget = 500 µ$
}}
"""
CATALOG = '= catalog("openai/gpt-4.1-nano")'


def codes(path):
    return [(d.code, d.span.line, d.span.col) for d in lint_paths([path]).diagnostics]


@pytest.fixture
def offline(monkeypatch):
    """Every socket connection fails: nothing may reach the network."""
    def refuse(*args, **kwargs):
        raise OSError("network is unreachable (test)")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)


def test_lint_compile_and_exec_with_the_network_unreachable(write_bam, tmp_path, offline, monkeypatch):
    path = write_bam(SYSTEM.format(price=CATALOG))
    assert codes(path) == []
    compiled = compile_file(path, None, None, "lexicographic", str(tmp_path))
    assert compiled.plan is not None
    entry = compiled.plan.prices["nano"]
    assert entry["source"] == "catalog" and entry["catalog"] == {"entry": "openai/gpt-4.1-nano", "snapshot": "2026-11-10"}
    assert (entry["input"], entry["output"], entry["cache_read"]) == (0.1, 0.4, 0.025)
    from bamasc.cli import main

    trace = tmp_path / "trace.jsonl"
    assert main(["exec", path, "--fake", "echo", "--task", "2+2", "--trace", str(trace)]) == 0
    calls = [json.loads(line) for line in trace.read_text().splitlines() if '"call"' in line]
    assert calls and calls[0]["rates"] == {"input": 0.1, "output": 0.4, "cache_read": 0.025, "cache_write": 0.1,
                                           "above": None}


@pytest.mark.usefixtures("installed_catalogue")
def test_fetched_prices_never_replace_the_bundled_snapshot():
    """genai-prices fetches only when its updater runs; prices it would set in-process are not read."""
    import threading

    from genai_prices import data_snapshot

    before = catalog.pricing("openai/gpt-4.1-nano")
    assert not any(t.name == "genai_prices:update" for t in threading.enumerate())
    data_snapshot.set_custom_snapshot(data_snapshot.DataSnapshot(providers=[], from_auto_update=True))
    try:
        assert catalog.pricing("openai/gpt-4.1-nano") == before
    finally:
        data_snapshot.set_custom_snapshot(None)


def test_an_unknown_entry_is_located_with_close_matches(write_bam):
    path = write_bam(SYSTEM.format(price='= catalog("openai/gpt-4.1-nanoo")'))
    found = lint_paths([path]).diagnostics
    assert [(d.code, d.span.line, d.span.col) for d in found] == [("BAM220", 6, 22)]
    assert "openai/gpt-4.1-nano" in found[0].hint


def test_unknown_provider_and_unpriceable_entries(write_bam):
    assert codes(write_bam(SYSTEM.format(price='= catalog("opneai/gpt-4.1-nano")')))[0][0] == "BAM220"
    assert codes(write_bam(SYSTEM.format(price='= catalog("openai/tts-1")')))[0][0] == "BAM221"
    assert codes(write_bam(SYSTEM.format(price="= catalog(3)")))[0][0] == "BAM222"


def test_a_hand_written_price_that_disagrees_warns(write_bam):
    path = write_bam(SYSTEM.format(price="{ input = 0.12  output = 0.40 }"))
    found = lint_paths([path]).diagnostics
    assert [(d.code, d.severity, d.span.line) for d in found] == [("BAM409", "warning", 6)]
    assert write_bam and codes(write_bam(SYSTEM.format(price="{ input = 0.10  output = 0.40 }"))) == []


def test_an_old_snapshot_warns(write_bam, monkeypatch):
    later = datetime.datetime(2027, 6, 1, tzinfo=datetime.timezone.utc)
    monkeypatch.setenv("SOURCE_DATE_EPOCH", str(int(later.timestamp())))
    found = lint_paths([write_bam(SYSTEM.format(price=CATALOG))]).diagnostics
    assert [(d.code, d.severity, d.span.line, d.span.col) for d in found] == [("BAM410", "warning", 6, 14)]
    assert "203 days old" in found[0].message


def test_a_changed_catalogue_makes_the_plan_stale(write_bam, tmp_path, monkeypatch):
    from bamasc.plan.schema import plan_data

    path = write_bam(SYSTEM.format(price=CATALOG))
    compiled = compile_file(path, None, None, "lexicographic", str(tmp_path))
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps(plan_data(compiled.plan)))
    load_plan(str(plan))  # fresh
    real = catalog.pricing

    def dearer(ref):
        found = real(ref)
        return Pricing(found.input * 2, found.output, found.cache_read, catalog=found.catalog, snapshot=found.snapshot)

    monkeypatch.setattr(catalog, "pricing", dearer)
    with pytest.raises(StalePlanError, match="price catalogue changed.*input price of model 'nano' went from 0.1 to 0.2"):
        load_plan(str(plan))


def test_a_tier_written_by_hand_doubles_the_bound_above_its_threshold(write_bam, tmp_path):
    tiered = "{ input = 1  output = 2  long_prompt { above = 100  input = 2  output = 4 } }"
    compiled = compile_file(write_bam(SYSTEM.format(price=tiered)), None, 5000.0, "lexicographic", str(tmp_path))
    flat = compile_file(write_bam(SYSTEM.format(price="{ input = 1  output = 2 }"), "flat.bam"), None, 5000.0,
                        "lexicographic", str(tmp_path))
    # The prompt bound (template + 500 task tokens) is above 100 tokens: every token at the tier's rates.
    assert compiled.plan.systems[0].templates[0].worst_case_cost == pytest.approx(
        2 * flat.plan.systems[0].templates[0].worst_case_cost)
    assert compiled.plan.prices["nano"]["tiers"] == [
        {"above": 100, "input": 2.0, "output": 4.0, "cache_read": None, "cache_write": None}]


@pytest.mark.parametrize("price", ["{ input = 0.10  output = 0.40 }", CATALOG])
@pytest.mark.usefixtures("installed_catalogue")
def test_lint_does_not_import_the_catalogue_package(write_bam, price):
    path = write_bam(SYSTEM.format(price=price))
    probe = ("import sys; from bamasc.cli import main; code = main(['lint', sys.argv[1]]); "
             "print('genai_prices' in sys.modules)")
    # The index is built once (importing the package), then read from the cache folder.
    subprocess.run([sys.executable, "-c", probe, path], capture_output=True, text=True, cwd=ROOT)
    done = subprocess.run([sys.executable, "-c", probe, path], capture_output=True, text=True, cwd=ROOT)
    assert done.stdout.strip().endswith("False"), done.stdout + done.stderr


def test_the_prices_command(capsys):
    from bamasc.cli import main

    assert main(["prices"]) == 0
    assert "snapshot of 2026-11-10" in capsys.readouterr().out
    assert main(["prices", "anthropic/claude-sonnet-4-5"]) == 0
    out = capsys.readouterr().out
    assert "cache write  3.75" in out and "prompts above 200000 tokens: input 6, output 22.5" in out
    assert main(["prices", "openai/gpt-4.1-nanoo"]) == 2
    assert "close matches: openai/gpt-4.1-nano" in capsys.readouterr().err
    assert main(["prices", "gpt-4.1-nan"]) == 0
    assert "openai/gpt-4.1-nano" in capsys.readouterr().out


@pytest.mark.usefixtures("installed_catalogue")
def test_the_cached_index_reads_one_provider_at_a_time_and_survives_a_damaged_file(tmp_path, monkeypatch):
    """Lint reads only the providers a file names; a provider file that is missing, truncated or
    from another index is rebuilt from the package, never read as prices."""
    monkeypatch.setenv("BAMASC_CACHE", str(tmp_path))
    monkeypatch.setattr(catalog_cache, "_LOADED", {})
    expected = catalog.pricing("openai/gpt-4.1-nano")  # builds and writes the index
    folder = tmp_path / "catalog-index"
    assert (folder / "providers.json").exists() and (folder / "openai.json").exists()
    (folder / "openai.json").write_text('{"key": "an older index", "models": {"gpt-4.1-nano": [0, 0, 0, 0, [], 0, null, null]}}')
    (folder / "openrouter.json").write_text("{ truncated")
    monkeypatch.setattr(catalog_cache, "_LOADED", {})
    again = catalog.pricing("openai/gpt-4.1-nano")
    assert (again.input, again.output) == (expected.input, expected.output) == (0.1, 0.4)
    monkeypatch.setattr(catalog_cache, "_LOADED", {})
    (folder / "openai.json").unlink()
    assert catalog.pricing("openai/gpt-4.1-nano").output == 0.4
