"""`max_output = lo..hi`: the range value as the parser, the formatter and the editor's hover show it."""

from __future__ import annotations

from bamasc.fmt import format_source
from bamasc.source import SourceFile
from bamasc.syntax import ast
from bamasc.syntax.parser import parse_source
from tests.fmt.roundtrip import check_round_trip

ROLE = 'role Step {\n  max_output = 128 .. 384 tokens\n  prompt = "Go: {{task}}"\n}\n'


def test_a_range_parses_with_both_ends_and_their_places():
    module, diagnostics = parse_source(SourceFile("r.bam", ROLE))
    assert diagnostics == []
    value = module.declarations[0].attrs[0].value
    assert isinstance(value, ast.RangeValue)
    assert (value.lo.value, value.hi.value, value.hi.unit) == (128, 384, "tokens")
    assert (value.span.line, value.span.col, value.lo.span.col, value.hi.span.col) == (2, 16, 16, 23)


def test_the_formatter_writes_a_range_without_spaces_and_keeps_its_meaning():
    formatted = format_source(ROLE)
    assert "max_output = 128..384 tokens\n" in formatted
    check_round_trip(ROLE, formatted)


def test_hover_on_a_role_shows_its_range(tmp_path):
    from bamasc.lsp.analysis import Analysis
    from bamasc.lsp.bounds import COMPUTING
    from bamasc.lsp.hover import hover_text

    path = tmp_path / "r.bam"
    path.write_text(ROLE)
    analysis = Analysis(str(path), {})
    assert not analysis.errors
    role = analysis.index.at(str(path), 1, 7)
    text = hover_text(analysis, role, (COMPUTING, None))
    assert "max_output 128..384 (the compiler picks each seat's cap)" in text
