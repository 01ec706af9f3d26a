"""The `.bam` examples in docs/: plain ones lint clean, fragments parse, error ones report their code.

A fenced block opens with one of:

    ```bam                    a complete file: no errors and no warnings
    ```bam fragment           part of a file: it must parse
    ```bam error BAM123       wrong on purpose: linting it reports BAM123
                              (compiling it, for the compile-only BAM5xx codes)
    ```bam error BAM123 latin-1   the same, written to disk as Latin-1

A block may hold several files, each starting with a `// file: NAME` line; the
first is the one checked, the others are written beside it for it to import.
"""

from __future__ import annotations

import os
import re

import pytest

from bamasc.diagnostics import CODES, ERROR, render_text
from bamasc.lint import lint_paths
from bamasc.source import SourceFile
from bamasc.syntax.parser import parse_source
from tests.helpers.docs import fenced_blocks, split_files

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOCS = ("docs/language.md", "docs/diagnostics.md")
DIAGNOSTICS_DOC = "docs/diagnostics.md"

ENCODINGS = ("latin-1",)
# Codes whose trigger cannot be written as a small block, and why.
NO_EXAMPLE = {
    "BAM008": "it needs a file larger than 8 MiB",
    "BAM504": "no file reaches it with the default method; tests/test_numeric_limits.py makes the solver fail",
    "BAM410": "it needs a snapshot older than 120 days; tests/prices/test_catalog.py moves the day",
    "BAM411": "it needs a damaged cache file; tests/prices/test_catalog_cache.py writes them",
    "BAM506": "it needs --cost-model paper; tests/optimize/test_paper.py reaches it",
}
# Codes that only `bamasc compile` reports; their examples lint clean of them.
COMPILE_CODES = tuple(code for code in CODES if code.startswith("BAM5"))


def _read(doc: str) -> str:
    with open(os.path.join(ROOT, doc), encoding="utf-8") as handle:
        return handle.read()


def first_line(body: str) -> str:
    """The block's first non-blank line, short enough for a test id."""
    line = next((line.strip() for line in body.split("\n") if line.strip()), "")
    return line if len(line) <= 40 else line[:37] + "..."


def _cases():
    cases = []
    for doc in DOCS:
        if not os.path.exists(os.path.join(ROOT, doc)):
            continue
        for number, (line, info, body) in enumerate(fenced_blocks(_read(doc))):
            name = os.path.basename(doc)
            cases.append(pytest.param(doc, line, info, body, id=f"{name}-{number}-{first_line(body)}"))
    return cases


CASES = _cases()


def _write(tmp_path, body: str, encoding: str) -> list[str]:
    paths = []
    for name, text in split_files(body):
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(text.encode(encoding))
        paths.append(str(path))
    return paths


def _compile(path: str, tmp_path):
    # The solver loads only for compile-stage examples.
    from bamasc.plan.compile import compile_file

    return compile_file(path, plan_dir=str(tmp_path / "plans"))


def _parse_info(info: str) -> tuple[str, str | None, str]:
    """(kind, expected code, encoding) from the words after ```bam."""
    words = info.split()
    encoding = "utf-8"
    if words and words[-1] in ENCODINGS:
        encoding = words.pop()
    if not words:
        return "plain", None, encoding
    if words == ["fragment"]:
        return "fragment", None, encoding
    if len(words) == 2 and words[0] == "error":
        return "error", words[1], encoding
    raise AssertionError(f"unknown ```bam block kind: {info!r}")


def test_docs_have_examples():
    for doc in DOCS:
        assert os.path.exists(os.path.join(ROOT, doc)), f"{doc} is missing"
        assert fenced_blocks(_read(doc)), f"{doc} has no ```bam examples"


@pytest.mark.parametrize("doc, line, info, body", CASES)
def test_example(doc, line, info, body, tmp_path):
    kind, code, encoding = _parse_info(info)
    where = f"{doc}:{line}"
    paths = _write(tmp_path, body, encoding)
    if kind == "fragment":
        for path, (_, text) in zip(paths, split_files(body)):
            module, diagnostics = parse_source(SourceFile(path, text))
            assert not diagnostics, f"{where}: fragment does not parse: {[d.message for d in diagnostics]}"
            assert module is not None
        return
    result = _compile(paths[0], tmp_path) if code in COMPILE_CODES else lint_paths(paths[:1])
    report = render_text(result.diagnostics, result.sources)
    if kind == "plain":
        errors = [d for d in result.diagnostics if d.severity == ERROR]
        warnings = [d for d in result.diagnostics if d.severity != ERROR]
        assert not errors and not warnings, f"{where}: example should lint clean:\n{report}"
    else:
        assert code in CODES, f"{where}: {code} is not a diagnostic code"
        found = {d.code for d in result.diagnostics}
        assert code in found, f"{where}: expected {code}, got {sorted(found) or 'nothing'}:\n{report}"


def _sections(text: str) -> dict[str, tuple[str, str]]:
    """(name in the heading, text) of each `### BAMnnn name` section, by code."""
    sections = {}
    parts = re.split(r"^### (BAM\d{3}) (\S+)\s*$", text, flags=re.MULTILINE)
    for code, name, body in zip(parts[1::3], parts[2::3], parts[3::3]):
        sections[code] = (name, body)
    return sections


def test_every_code_has_a_section():
    sections = _sections(_read(DIAGNOSTICS_DOC))
    missing = [code for code in CODES if code not in sections]
    assert not missing, f"{DIAGNOSTICS_DOC} has no section for {missing}"
    unknown = [code for code in sections if code not in CODES]
    assert not unknown, f"{DIAGNOSTICS_DOC} documents codes that do not exist: {unknown}"
    for code, (name, _) in sections.items():
        assert name == CODES[code][0], f"the heading of {code} says {name!r}, the code is named {CODES[code][0]!r}"


def test_every_code_has_its_anchor():
    # SARIF rules link to docs/diagnostics.md#bam101, so each section needs that anchor.
    text = _read(DIAGNOSTICS_DOC)
    missing = [code for code in CODES if f'<a id="{code.lower()}"></a>' not in text]
    assert not missing, f"{DIAGNOSTICS_DOC} has no anchor for {missing}"


def test_every_section_shows_its_code():
    for code, (_, body) in _sections(_read(DIAGNOSTICS_DOC)).items():
        kinds = [_parse_info(info) for _, info, _ in fenced_blocks(body)]
        if code in NO_EXAMPLE:
            continue
        assert ("error", code) in [(kind, expected) for kind, expected, _ in kinds], (
            f"the section of {code} has no ```bam error {code} example"
        )


def test_codes_are_in_order():
    codes = list(_sections(_read(DIAGNOSTICS_DOC)))
    assert codes == sorted(codes)
