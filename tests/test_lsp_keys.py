"""The language server on `key` and `team` declarations: the name index, hover, completion, rename and symbols."""

from __future__ import annotations

import pytest

from bamasc.lsp.analysis import Analysis
from bamasc.lsp.complete import completions
from bamasc.lsp.hover import hover_text
from bamasc.lsp.index import GLOBAL_KINDS
from bamasc.lsp.bounds import COMPUTING
from bamasc.lsp.navigate import RenameError, document_symbols, references, rename
from bamasc.syntax.lalr import load_tables

KEYWORDS = set(load_tables().keywords)
CONFIG = """\
model mini { provider = openai  name = "gpt-4.1-mini"  api_key = env("OPENAI_API_KEY")  price { input = 1  output = 1 }  tier = 1 }
team cx { budgets = [window($50, "1d")] }
key support_bot {
  secret       = env("SUPPORT_BOT_KEY")
  team         = cx
  scope_budget = $0.05
  models       = [mini]
  on_exhausted = answer
}
key triage_bot { secret = env("TRIAGE_BOT_KEY")  team = cx  models = mini }
"""


@pytest.fixture
def analysis(tmp_path):
    path = tmp_path / "proxy.bam"
    path.write_text(CONFIG)
    found = Analysis(str(path), {})
    assert not found.errors
    return found


def _at(analysis, marker: str, delta: int = 0):
    index = CONFIG.index(marker) + delta
    line = CONFIG.count("\n", 0, index) + 1
    return analysis.index.at(analysis.path, line, index - CONFIG.rfind("\n", 0, index))


def test_keys_and_teams_are_indexed_with_the_names_they_use(analysis):
    assert {"key", "team"} <= set(GLOBAL_KINDS)
    assert analysis.index.declared("key") == ["support_bot", "triage_bot"]
    assert analysis.index.declared("team") == ["cx"]
    cx = _at(analysis, "= cx", 2)
    assert (cx.kind, cx.name, cx.declares) == ("team", "cx", False)
    assert [(o.span.line, o.declares) for o in references([], analysis, cx)] == [(2, True), (5, False), (10, False)]
    mini = _at(analysis, "models = mini", 9)
    assert (mini.kind, mini.name) == ("model", "mini")
    assert len(references([], analysis, mini, declarations=False)) == 2  # `[mini]` and the bare `mini`


def test_hover_says_what_a_key_and_a_team_may_spend(analysis):
    key = hover_text(analysis, _at(analysis, "key support_bot", 4), (COMPUTING, None))
    assert "**key** `support_bot`" in key and "$SUPPORT_BOT_KEY" in key
    assert "per scope: $0.05" in key and "`mini`" in key and "answer" in key and "team: `cx`" in key
    team = hover_text(analysis, _at(analysis, "team cx", 5), (COMPUTING, None))
    assert "$50 per 1d" in team and "`support_bot`, `triage_bot`" in team


@pytest.mark.parametrize("marker, expected, absent", [
    ("on_exhausted = ", ["refuse", "answer"], ["best_so_far", "fail"]),
    ("team         = ", ["cx"], ["mini", "support_bot"]),
    ("models       = [", ["mini"], ["cx"]),
    ("secret       = ", ['env("")'], []),
    ("key support_bot {\n  ", ["secret", "team", "scope_budget", "budgets", "models", "on_exhausted"], ["provider"]),
    ("", ["key", "team", "model"], []),
])
def test_completion_in_keys(analysis, marker, expected, absent):
    labels = [item.label for item in completions(CONFIG, CONFIG.index(marker) + len(marker), analysis)]
    assert all(name in labels for name in expected), labels
    assert not any(name in labels for name in absent), labels


def test_a_team_renamed_is_renamed_where_keys_name_it(analysis):
    spans = rename([], analysis, _at(analysis, "team cx", 5), "support", KEYWORDS)
    assert [(s.line, s.col) for s in spans] == [(2, 6), (5, 18), (10, 57)]
    with pytest.raises(RenameError, match="keyword"):
        rename([], analysis, _at(analysis, "team cx", 5), "flow", KEYWORDS)


def test_document_symbols_and_their_editor_kinds(analysis):
    symbols = document_symbols(analysis.loaded.modules[analysis.path])
    assert [(s.name, s.kind) for s in symbols] == [
        ("mini", "model"), ("cx", "team"), ("support_bot", "key"), ("triage_bot", "key")
    ]
    pytest.importorskip("lsprotocol")
    from bamasc.lsp.features import COMPLETION_KINDS, SYMBOL_KINDS

    assert set(GLOBAL_KINDS) <= set(SYMBOL_KINDS) and set(GLOBAL_KINDS) <= set(COMPLETION_KINDS)
