"""Lint judges every amount of a system's `budgets` list, as it judges `budget`: BAM404, a warning, at the amount."""

from __future__ import annotations

from bamasc.diagnostics import WARNING
from bamasc.lint import lint_paths
from tests.helpers.budgets import SWEPT


def _lint(write_bam, budget: str, budgets: str):
    path = write_bam(SWEPT % {"budget": budget, "budgets": budgets})
    text = open(path, encoding="utf-8").read().splitlines()
    return lint_paths([path]).diagnostics, text


def _caret(text: list[str], span) -> str:
    """What the diagnostic's caret covers."""
    assert span.line == span.end_line
    return text[span.line - 1][span.col - 1 : span.end_col - 1]


def test_a_listed_budget_no_template_fits_is_reported_at_its_amount(write_bam):
    diagnostics, text = _lint(write_bam, "15000", "[8000, 12000, 15000]")
    assert [(d.code, d.severity) for d in diagnostics] == [("BAM404", WARNING)]
    (found,) = diagnostics
    assert _caret(text, found.span) == "8000"
    assert text[found.span.line - 1].lstrip().startswith("budgets")
    assert "listed budget of 8000 µ$" in found.message and "9225.0" in found.message


def test_every_listed_budget_is_judged_in_any_unit(write_bam):
    # 500 µ$ and 9000 µ$ are below the floor; $0.012 (12000 µ$) fits.
    diagnostics, text = _lint(write_bam, "15000", "[500, $0.012, 9000 µ$]")
    assert [(d.code, d.severity) for d in diagnostics] == [("BAM404", WARNING)] * 2
    assert [_caret(text, d.span) for d in diagnostics] == ["500", "9000 µ$"]
    # A list every amount of which the floor fits, the floor itself included, lints clean.
    diagnostics, _ = _lint(write_bam, "15000", "[9225, 12000, 15000]")
    assert diagnostics == []


def test_the_declared_budget_is_judged_once(write_bam):
    # 5000 is the system's budget and in its list: one error, at `budget`; 6000 is a warning at the list.
    diagnostics, text = _lint(write_bam, "5000", "[5000, 6000, 12000]")
    assert sorted((d.code, d.severity) for d in diagnostics) == [("BAM404", "error"), ("BAM404", WARNING)]
    error = next(d for d in diagnostics if d.severity == "error")
    assert text[error.span.line - 1].lstrip().startswith("budget ")
    warned = next(d for d in diagnostics if d.severity == WARNING)
    assert _caret(text, warned.span) == "6000"
