"""The catalogue's cache is a copy, never an authority: damaged, edited or forged files at lint and compile."""

from __future__ import annotations

import json

import pytest

from bamasc import catalog
from bamasc.catalog import cache as catalog_cache
from bamasc.lint import lint_paths
from bamasc.plan.compile import compile_file

SOURCE = """
model big {
  provider = openai
  api_key  = env("OPENAI_API_KEY")
  name     = "gpt-4.1"
  price    = catalog("openai/gpt-4.1")
  tier     = 1
}
role Solver {
  max_output = 100
  prompt = "Solve: {{task}}"
}
topology one {
  slot solver : Solver [1..1]
  flow { a = solver(task)  answer a }
}
system s {
  models = [big]
  topologies = [one]
  budget = 50000 µ$
  task_tokens = 1000
}
"""
# The cache is a copy of the installed package's rows: what these tests damage (tests/conftest.py pins the
# catalogue for every other test).
pytestmark = pytest.mark.usefixtures("installed_catalogue")

# gpt-4.1 in the bundled snapshot: input 2, output 8, cached reads 0.5 $/Mtok.
SNAPSHOT = (2.0, 8.0, 0.5)


def _tier_above(row):
    row[4] = [["x", 1, 2, None, None]]


def _negative(row):
    row[0] = -5


def _not_finite(row):
    row[1] = float("nan")


# Each malformed row, and the field the report names.
MALFORMED = {
    "too short": (lambda models: models.update({"gpt-4.1": [2.0]}), "row 'gpt-4.1' is [2.0]"),
    "not a list": (lambda models: models.update({"gpt-4.1": "abc"}), "row 'gpt-4.1' is \"abc\""),
    "a bad tier": (lambda models: _tier_above(models["gpt-4.1"]), "row 'gpt-4.1', field 'tiers[0].above' is \"x\""),
    "negative": (lambda models: _negative(models["gpt-4.1"]), "row 'gpt-4.1', field 'input' is -5"),
    "NaN": (lambda models: _not_finite(models["gpt-4.1"]), "row 'gpt-4.1', field 'output' is nan"),
}


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """A fresh cache folder holding the index, built from the package: its openai file's path."""
    monkeypatch.setenv("BAMASC_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(catalog_cache, "_LOADED", {})
    monkeypatch.setattr(catalog_cache, "_PROBLEMS", [])
    catalog.pricing("openai/gpt-4.1")
    monkeypatch.setattr(catalog_cache, "_LOADED", {})  # the next read is the cache's
    return tmp_path / "cache" / "catalog-index" / "openai.json"


def edit(path, change, checksum: bool = False) -> None:
    """Change the rows of a cache file in place; `checksum` also writes the checksum of what it then holds."""
    data = json.loads(path.read_text())
    change(data["models"])
    if checksum:
        data["sha256"] = catalog_cache._checksum(data)
    path.write_text(json.dumps(data))


def cheaper(models) -> None:
    models["gpt-4.1"][:3] = [0.0001, 0.0001, 0.0001]


def lint(write_bam):
    return lint_paths([write_bam(SOURCE)]).diagnostics


def compiled(write_bam, tmp_path):
    result = compile_file(write_bam(SOURCE), None, None, "lexicographic", str(tmp_path))
    assert result.plan is not None, [d.message for d in result.diagnostics]
    return result


def worst_case(result) -> float:
    return result.plan.systems[0].templates[0].worst_case_cost


@pytest.mark.parametrize("kind", MALFORMED)
def test_lint_reports_a_malformed_row_with_its_file_row_and_field(kind, cache, write_bam):
    change, named = MALFORMED[kind]
    edit(cache, change)
    found = lint(write_bam)
    assert [(d.code, d.severity, d.span.line) for d in found] == [("BAM411", "warning", 6)]
    assert str(cache) in found[0].message and named in found[0].message
    # The file was rebuilt: the next read finds it sound and the snapshot's prices in it.
    catalog_cache._LOADED.clear()
    assert (catalog.pricing("openai/gpt-4.1").input, lint(write_bam)) == (2.0, [])


@pytest.mark.parametrize("kind", MALFORMED)
def test_compile_binds_with_the_snapshot_prices_whatever_row_the_cache_holds(kind, cache, write_bam, tmp_path):
    edit(cache, MALFORMED[kind][0])
    result = compiled(write_bam, tmp_path)
    prices = result.plan.prices["big"]
    assert (prices["input"], prices["output"], prices["cache_read"]) == SNAPSHOT
    warned = [d for d in result.diagnostics if d.code == "BAM411"]
    assert len(warned) == 1 and MALFORMED[kind][1] in warned[0].message


def test_a_cheaper_well_formed_row_is_caught_by_the_checksum(cache, write_bam, tmp_path):
    fair = worst_case(compiled(write_bam, tmp_path))
    catalog_cache._LOADED.clear()
    edit(cache, cheaper)
    found = lint(write_bam)
    assert [d.code for d in found] == ["BAM411"]
    assert "does not match its checksum" in found[0].message
    assert "row 'gpt-4.1': input 0.0001 instead of 2.0, output 0.0001 instead of 8.0" in found[0].message
    catalog_cache._LOADED.clear()
    edit(cache, cheaper)
    result = compiled(write_bam, tmp_path)
    # 1,100 prompt tokens at 2 and 100 output tokens at 8 $/Mtok, not at 0.0001.
    assert worst_case(result) == fair > 1
    assert [d.code for d in result.diagnostics] == ["BAM411"]


def test_compile_does_not_trust_a_forged_row_even_with_a_matching_checksum(cache, write_bam, tmp_path):
    edit(cache, cheaper, checksum=True)
    result = compiled(write_bam, tmp_path)
    prices = result.plan.prices["big"]
    assert (prices["input"], prices["output"], prices["cache_read"]) == SNAPSHOT
    (warned,) = [d for d in result.diagnostics if d.code == "BAM411"]
    assert "row 'gpt-4.1' differs from the genai-prices snapshot (input 0.0001 instead of 2.0" in warned.message
    # The cache was rewritten from the snapshot.
    assert json.loads(cache.read_text())["models"]["gpt-4.1"][:3] == list(SNAPSHOT)


@pytest.mark.parametrize("change, named", [
    (lambda data: data.update(snapshot=["not a date", False]), "field 'snapshot' is [\"not a date\", false]"),
    (lambda data: data.update(providers=[["../../elsewhere", ""]]), "field 'providers', entry 0"),
    (lambda data: data.update(providers="openai"), "field 'providers' is \"openai\""),
])
def test_a_malformed_list_of_providers_is_rebuilt(change, named, cache, write_bam):
    providers = cache.parent / "providers.json"
    data = json.loads(providers.read_text())
    change(data)
    providers.write_text(json.dumps(data))
    found = lint(write_bam)
    assert [d.code for d in found] == ["BAM411"]
    assert str(providers) in found[0].message and named in found[0].message


def test_a_file_that_is_not_json_is_rebuilt(cache, write_bam):
    cache.write_bytes(b"\xff\xfe not json")
    found = lint(write_bam)
    assert [d.code for d in found] == ["BAM411"] and "cannot be read as JSON" in found[0].message


def test_the_prices_command_shows_the_snapshot_and_warns(cache, capsys):
    from bamasc.cli import main

    edit(cache, cheaper, checksum=True)
    assert main(["prices", "openai/gpt-4.1"]) == 0
    captured = capsys.readouterr()
    assert "input        2" in captured.out
    assert "differs from the genai-prices snapshot" in captured.err


def test_exec_checks_its_plan_against_the_snapshot_and_warns_of_the_cache(cache, write_bam, tmp_path, capsys):
    from bamasc.cli import main
    from bamasc.plan.schema import plan_data

    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps(plan_data(compiled(write_bam, tmp_path).plan)))
    catalog_cache._LOADED.clear()
    edit(cache, cheaper)
    # The cache's cheaper row would make the plan look stale; the snapshot's prices say it is not.
    assert main(["exec", str(plan), "--fake", "echo", "--task", "2+3"]) == 0
    err = capsys.readouterr().err
    assert "stale" not in err and f"{cache}: its content does not match its checksum" in err
