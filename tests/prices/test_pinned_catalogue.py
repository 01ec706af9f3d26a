"""A pinned catalogue (`bamasc prices --export`, `BAMASC_CATALOG`): the same prices as the package it came from,
the package never imported, and a damaged or edited file an error that names it and the field, never a price.

The installed release is checked here too: its snapshot loads and prices every example (the rest of the
suite compiles against the pinned fixture, tests/helpers/__init__.py)."""

from __future__ import annotations

import contextlib
import copy
import os
import json
import subprocess
import sys

import pytest

from bamasc import catalog
from bamasc.catalog import pinned
from bamasc.catalog.rows import ROW_FIELDS
from bamasc.cli import main
from bamasc.lint import lint_paths
from bamasc.plan.compile import compile_file
from tests.conftest import EXAMPLES, ROOT
from tests.helpers import PINNED_CATALOGUE

SOURCE = """
model nano {
  provider = openai
  api_key  = env("OPENAI_API_KEY")
  name     = "gpt-4.1-nano"
  price    = catalog("openai/gpt-4.1-nano")
  tier     = 1
}
role Solver {
  max_output = 64
  prompt = "Solve: {{task}}"
}
topology one {
  slot solver : Solver [1..1]
  flow { a = solver(task)  answer a }
}
system s {
  models = [nano]
  topologies = [one]
  budget = 500 µ$
}
"""


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """The installed package exported as a pinned file (nothing pinned while it is written)."""
    target = tmp_path_factory.mktemp("pinned") / "catalogue.json"
    with pytest.MonkeyPatch.context() as patch:
        patch.delenv("BAMASC_CATALOG")
        assert main(["prices", "--export", str(target)]) == 0
    return target


@pytest.mark.usefixtures("installed_catalogue")
@pytest.mark.parametrize("example", EXAMPLES, ids=lambda path: path.rpartition("/")[2])
def test_the_installed_snapshot_loads_and_prices_every_example(example, tmp_path):
    """Whatever genai-prices release is installed: every example lints clean, compiles, and each catalog()
    price is the package's own entry, dated with the installed snapshot."""
    assert [d.code for d in lint_paths([example]).diagnostics if d.severity == "error"] == []
    compiled = compile_file(example, None, None, "lexicographic", str(tmp_path))
    assert compiled.plan is not None
    date, _ = catalog.snapshot.package_date()  # (the package's own, not a cached index's)
    for name, entry in compiled.plan.prices.items():
        if entry["source"] != "catalog":
            continue
        derived = catalog.priced(*catalog.find(entry["catalog"]["entry"]))
        assert entry["catalog"]["snapshot"] == date.isoformat(), name
        assert (entry["input"], entry["output"]) == (derived.input, derived.output) and derived.output > 0, name


@pytest.mark.usefixtures("installed_catalogue")
def test_an_exported_file_prices_every_entry_as_the_package_does(exported, monkeypatch):
    expected = {}
    for ref in catalog.entry_refs():
        with catalog.from_package():
            try:
                expected[ref] = catalog.pricing(ref)
            except catalog.CatalogError as problem:
                expected[ref] = (str(problem), problem.unpriceable)
    monkeypatch.setenv("BAMASC_CATALOG", str(exported))
    assert catalog.version() == catalog.snapshot.version()
    assert sorted(catalog.entry_refs()) == sorted(expected)
    for ref, want in expected.items():
        for inside in (False, True):  # lint reads the index, compile reads from_package(): both take the file
            with catalog.from_package() if inside else contextlib.nullcontext():
                try:
                    got = catalog.pricing(ref)
                except catalog.CatalogError as problem:
                    got = (str(problem), problem.unpriceable)
            assert got == want, ref


@pytest.mark.parametrize("ref, message", [
    ("openai/gpt-4.1-nanoo", "no model 'gpt-4.1-nanoo' from provider 'openai'"),
    ("opneai/gpt-4.1-nano", "no provider 'opneai'"),
    ("openai/", "no entry 'openai/'"),
])
def test_an_entry_the_pinned_file_lacks_reads_as_the_package_says_it(ref, message, monkeypatch):
    for pinned_file in (PINNED_CATALOGUE, None):
        if pinned_file is None:
            monkeypatch.delenv("BAMASC_CATALOG")
        with pytest.raises(catalog.CatalogError, match=message) as raised:
            with catalog.from_package():
                catalog.pricing(ref)
        assert raised.value.close or ref == "openai/"


def test_lint_and_compile_never_import_the_package_when_pinned(write_bam, tmp_path):
    """Not even the first time (the cache would be built from the package)."""
    path = write_bam(SOURCE)
    probe = ("import sys; from bamasc.cli import main; lint = main(['lint', sys.argv[1]]); "
             "built = main(['compile', sys.argv[1], '-o', sys.argv[2]]); "
             "print(lint, built, 'genai_prices' in sys.modules)")
    env = {"BAMASC_CACHE": str(tmp_path / "empty-cache"), "BAMASC_CATALOG": PINNED_CATALOGUE}
    done = subprocess.run([sys.executable, "-c", probe, path, str(tmp_path / "plan.json")], capture_output=True,
                          text=True, cwd=ROOT, env={**_environment(), **env})
    assert done.stdout.strip().endswith("0 0 False"), done.stdout + done.stderr
    plan = json.loads((tmp_path / "plan.json").read_text())
    assert plan["prices"]["nano"]["catalog"] == {"entry": "openai/gpt-4.1-nano", "snapshot": "2026-11-10"}


def _corruptions():
    """(label, change of the file's content): every field of the file and of a row, given a value it may not hold."""
    yield "not an object", lambda content: ["a list"]
    for field, bad in [("format", 2), ("format", None), ("package", 3), ("snapshot", ["not a date", False]),
                       ("snapshot", ["2026-11-10"]), ("taken_on", "yesterday"), ("providers", "openai"),
                       ("providers", [["openai", "pattern"]])]:
        yield f"{field}={bad!r}", lambda content, field=field, bad=bad: {**content, field: bad}
    for number, field in enumerate(ROW_FIELDS):
        for bad in ([-1.0, "cheap", float("nan"), [[1, 2]]] if field == "tiers" else [-0.1, "cheap", 1e300, True]):
            if field in {"cache_read", "cache_write", "batch_input", "batch_output"} and bad is None:
                continue

            def change(content, number=number, bad=bad):
                changed = copy.deepcopy(content)
                openai = next(entry for entry in changed["providers"] if entry[0] == "openai")
                openai[2]["gpt-4.1-nano"][number] = bad
                return changed

            yield f"row.{field}={bad!r}", change


@pytest.mark.parametrize("label, change", list(_corruptions()), ids=[label for label, _ in _corruptions()])
def test_a_damaged_pinned_file_is_an_error_that_names_it_never_a_price(label, change, write_bam, tmp_path,
                                                                        monkeypatch, capsys):
    content = json.loads(open(PINNED_CATALOGUE, encoding="utf-8").read())
    damaged = tmp_path / "pinned.json"
    damaged.write_text(json.dumps(change(content)), encoding="utf-8")
    monkeypatch.setenv("BAMASC_CATALOG", str(damaged))
    found = lint_paths([write_bam(SOURCE)]).diagnostics
    assert [(d.code, d.span.line) for d in found] == [("BAM220", 6)], label
    assert f"BAMASC_CATALOG={damaged}" in found[0].message and "bamasc prices --export" in found[0].message
    assert main(["compile", write_bam(SOURCE), "-o", str(tmp_path / "plan.json")]) != 0
    assert not (tmp_path / "plan.json").exists()
    capsys.readouterr()
    assert main(["prices", "openai/gpt-4.1-nano"]) == 2
    assert str(damaged) in capsys.readouterr().err


def test_a_missing_or_unreadable_pinned_file_is_an_error(write_bam, tmp_path, monkeypatch):
    for content in (None, b"{ truncated", b"\xff\xfe not utf-8"):
        target = tmp_path / "pinned.json"
        if content is None:
            target.unlink(missing_ok=True)
        else:
            target.write_bytes(content)
        monkeypatch.setenv("BAMASC_CATALOG", str(target))
        found = lint_paths([write_bam(SOURCE)]).diagnostics
        assert [d.code for d in found] == ["BAM220"] and "cannot be read" in found[0].message


def test_export_refuses_a_model_a_pinned_source_and_a_folder_that_is_not_there(tmp_path, capsys, monkeypatch):
    target = tmp_path / "out.json"
    assert main(["prices", "openai/gpt-4.1-nano", "--export", str(target)]) == 2
    assert main(["prices", "--export", str(target)]) == 2  # BAMASC_CATALOG is set for every test
    assert "unset it first" in capsys.readouterr().err and not target.exists()
    monkeypatch.delenv("BAMASC_CATALOG")
    assert main(["prices", "--export", str(tmp_path / "no-such-folder" / "out.json")]) == 2
    assert "cannot write" in capsys.readouterr().err


def test_the_prices_command_says_the_catalogue_is_pinned(capsys):
    assert main(["prices"]) == 0
    out = capsys.readouterr().out
    assert f"genai-prices 0.2.3, snapshot of 2026-11-10, pinned in {PINNED_CATALOGUE}" in out
    assert pinned.path() == PINNED_CATALOGUE


def _environment() -> dict[str, str]:
    return {key: value for key, value in os.environ.items() if not key.startswith("BAMASC_")}
