"""`compile --budget` judges the budget given, and its diagnostics say where that budget came from."""

from __future__ import annotations

from bamasc.cli import main
from bamasc.plan.compile import compile_file
from tests.helpers.budgets import SWEPT

# The cheapest binding costs 9225 µ$: the file's 15000 fits, a --budget of 8000 does not.
FILE = SWEPT % {"budget": "15000", "budgets": "[9225, 15000]"}


def test_bam502_under_budget_points_at_the_system_and_says_the_budget_was_given(write_bam):
    path = write_bam(FILE)
    text = FILE.splitlines()
    result = compile_file(path, budget=8000)
    assert result.plan is None
    (found,) = [d for d in result.diagnostics if d.code == "BAM502"]
    # The caret is on the system's name, not on `budget = 15000`, which is not the budget at fault.
    line = text[found.span.line - 1]
    assert line.startswith("system swept") and line[found.span.col - 1 : found.span.end_col - 1] == "swept"
    assert "8000 µ$ (the budget given to compile with --budget)" in found.message
    assert any("15000 µ$, is not in force" in note.message and note.span is None for note in found.notes)
    assert all(note.span is None for note in found.notes)


def test_the_cli_shows_no_caret_under_the_files_budget(write_bam, capsys):
    path = write_bam(FILE)
    assert main(["compile", path, "--budget", "8000"]) == 1
    printed = capsys.readouterr().err
    assert "error[BAM502]" in printed and "given to compile with --budget" in printed
    assert "budget      = 15000" not in printed
