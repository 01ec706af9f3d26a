"""Golden lint fixtures: every `fixtures/lint/NAME.bam` against the diagnostics in `NAME.expected`.

An expected file has one line per diagnostic, in the order `bamasc lint` prints
them: `CODE [FILE:]LINE:COL [SEVERITY]`. FILE is given only when the
diagnostic points into another file (an imported one), relative to the
fixture's folder. Helper files that fixtures import live in `fixtures/lint/imports/`
and are not cases themselves.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from bamasc import loader
from bamasc.diagnostics import CODES, ERROR, WARNING, render_text
from bamasc.lint import lint_paths

FIXTURES = Path(__file__).parent.parent / "fixtures" / "lint"
CASES = sorted(FIXTURES.glob("*.bam"))

# Codes that no fixture in the folder shows, and why.
NOT_IN_FIXTURES = {
    # Possible, but a fixture would have to be a file over 8 MiB: test_file_too_large makes one on the fly.
    "BAM008": "file-too-large",
    # Impossible for `bamasc lint`: only `bamasc compile` emits them (bamasc/plan/compile.py), after
    # solving the binding problem; lint never imports the compiler or a solver, and its static
    # budget check reports BAM404/BAM405 instead.
    "BAM501": "template-infeasible",
    "BAM502": "system-infeasible",
    # Compile-only as well, and a last resort: the limits (BAM210) keep every number the
    # solver sees in range, so no file is known to reach it; tests/test_numeric_limits.py
    # makes the solver fail on purpose.
    "BAM504": "solver-failed",
    # Compile-only too: the latency bound needs the binding the solver chose.
    "BAM505": "template-misses-deadline",
    # Compile-only, under --cost-model paper: tests/optimize/test_paper.py reaches it.
    "BAM506": "paper-pool-over-budget",
    # Needs a catalogue snapshot older than 120 days: tests/prices/test_catalog.py moves the day.
    "BAM410": "old-price-catalog",
    # Needs a damaged file in the catalogue's cache: tests/prices/test_catalog_cache.py writes them.
    "BAM411": "catalog-cache-rebuilt",
}

_EXPECTED_LINE = re.compile(r"(?P<code>BAM\d{3}) (?:(?P<file>\S+):)?(?P<line>\d+):(?P<col>\d+)(?: (?P<severity>\w+))?")


def read_expected(case: Path) -> list[tuple[str, str, int, int, str | None]]:
    """(code, file or '', line, col, severity or None) for each line of the case's expected file."""
    rows = []
    text = case.with_suffix(".expected").read_text(encoding="utf-8")
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        match = _EXPECTED_LINE.fullmatch(line.strip())
        assert match, f"{case.stem}.expected:{number}: cannot read {line!r}"
        rows.append(
            (match["code"], match["file"] or "", int(match["line"]), int(match["col"]), match["severity"])
        )
    return rows


def _where(file: str, case: Path) -> str:
    """'' for the fixture itself, else the file relative to the fixture's folder."""
    if Path(file).resolve() == case.resolve():
        return ""
    return os.path.relpath(file, case.parent).replace(os.sep, "/")


def _caret_column(block: str) -> int | None:
    """The 1-based column of the first caret under the excerpt of a rendered diagnostic."""
    lines = block.split("\n")
    for source_line, caret_line in zip(lines, lines[1:]):
        if " | " in source_line and re.fullmatch(r" +\| [ \t]*\^+", caret_line):
            return caret_line.index("^") - (caret_line.index("|") + 2) + 1
    return None


def test_fixture_folder_has_enough_cases():
    assert len(CASES) >= 45
    for case in CASES:
        assert case.with_suffix(".expected").is_file(), f"{case.name} has no .expected file"


@pytest.mark.parametrize("case", CASES, ids=[case.stem for case in CASES])
def test_lint_fixture(case: Path):
    assert case.read_bytes().startswith(b"// title: "), "a fixture starts with a `// title:` line"
    expected = read_expected(case)
    assert expected, "a fixture shows at least one diagnostic"

    result = lint_paths([str(case)])

    actual = [(d.code, _where(d.span.file, case), d.span.line, d.span.col) for d in result.diagnostics if d.span]
    assert actual == [row[:4] for row in expected]
    for diagnostic, row in zip(result.diagnostics, expected):
        if row[4] is not None:
            assert diagnostic.severity == row[4], f"{diagnostic.code} at {diagnostic.span}"

    for diagnostic in result.diagnostics:
        assert diagnostic.code in CODES
        assert diagnostic.severity in (ERROR, WARNING)
        assert diagnostic.message
        span = diagnostic.span
        assert span is not None, f"{diagnostic.code} has no span"
        assert (span.end_line, span.end_col) >= (span.line, span.col)
        text = render_text([diagnostic], result.sources)
        assert f"{span.file}:{span.line}:{span.col}" in text
        assert _caret_column(text) == span.col, f"the caret of {diagnostic.code} is not under {span}:\n{text}"


def test_every_code_is_shown_by_a_fixture():
    shown = {row[0] for case in CASES for row in read_expected(case)}
    assert shown <= set(CODES), f"unknown codes in expected files: {sorted(shown - set(CODES))}"
    missing = set(CODES) - shown - set(NOT_IN_FIXTURES)
    assert not missing, f"no fixture shows {sorted(missing)}"
    for code, name in NOT_IN_FIXTURES.items():
        assert CODES[code][0] == name, f"{code} is no longer {name}; recheck why no fixture shows it"


def test_file_too_large(tmp_path: Path):
    big = tmp_path / "generated.bam"
    with open(big, "wb") as handle:
        handle.truncate(loader.MAX_FILE_BYTES + 1)  # sparse: nothing is written or read
    importer = tmp_path / "importer.bam"
    importer.write_text('// title: imports a generated file\nimport "generated.bam"\n', encoding="utf-8")

    direct = lint_paths([str(big)]).diagnostics
    imported = lint_paths([str(importer)])

    assert [(d.code, d.span.line, d.span.col) for d in direct] == [("BAM008", 1, 1)]
    assert [(d.code, d.span.file, d.span.line, d.span.col) for d in imported.diagnostics] == [
        ("BAM008", str(importer), 2, 8)
    ]
    assert _caret_column(render_text(imported.diagnostics, imported.sources)) == 8


def test_missing_root_file_has_a_span(tmp_path: Path):
    missing = tmp_path / "absent.bam"
    diagnostics = lint_paths([str(missing)]).diagnostics
    assert [(d.code, d.span.file, d.span.line) for d in diagnostics] == [("BAM006", str(missing), 1)]


@pytest.mark.parametrize("case", ["duplicate_attribute", "placeholder_unknown", "syntax_missing_brace_eof"])
def test_line_endings_do_not_move_diagnostics(case: str, tmp_path: Path):
    """The same fixture saved with CRLF line endings reports the same places."""
    source = FIXTURES / f"{case}.bam"
    crlf = tmp_path / source.name
    crlf.write_bytes(source.read_bytes().replace(b"\n", b"\r\n"))
    expected = [(row[0], row[2], row[3]) for row in read_expected(source)]

    result = lint_paths([str(crlf)])

    assert [(d.code, d.span.line, d.span.col) for d in result.diagnostics] == expected
    for diagnostic in result.diagnostics:
        assert "\r" not in render_text([diagnostic], result.sources)
