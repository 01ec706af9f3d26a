"""The editor completes `reference` combinators and the `budget_check` choices."""

from __future__ import annotations

from bamasc.lsp.complete import completions

TEXT = """role Executor {
  max_output = 64
  prompt     = "{{task}} {{part?}}"
}

topology t {
  slot executor : Executor [1..3]
  flow {
    parts = reference parallel executor(task)
    answer reference vote(parts)
  }
}

system s {
  budget_check = after
}
"""


def _labels(marker: str) -> list[str]:
    return [item.label for item in completions(TEXT, TEXT.index(marker) + len(marker))]


def test_after_reference_come_the_combinators_it_may_precede():
    labels = _labels("parts = reference ")
    assert {"chain", "parallel", "vote", "refine", "plan"} <= set(labels)
    assert "converse" not in labels and "route" not in labels and "executor" not in labels
    assert "reference" in _labels("parts = ")


def test_budget_check_offers_before_and_after():
    assert set(_labels("budget_check = ")) >= {"before", "after"}
