"""A task longer than the system's `task_tokens` is said so: on its trace task line and in exec's summary.

The proven bound assumes the task is `task_tokens` long. A longer task may be
charged above that bound while the budget guard keeps it within the budget; the
trace and the report must not leave the user reading the bound as a bound.
"""

from __future__ import annotations

import json

from bamasc.cli import main
from bamasc.runtime.tokens import task_tokens

# One call; the bound assumes a 20-token task, the budget has room for much longer ones.
SOURCE = """\
model echo {
  provider = fake
  name     = "echo"
  price    { input = 1  output = 2 }
  tier     = 1
}

role Solver {
  max_output = 16
  prompt     = "Solve: {{task}}"
}

topology single {
  slot solver : Solver [1..1]
  flow { answer solver(task) }
}

system short_tasks {
  models      = [echo]
  topologies  = [single]
  budget      = 100000
  task_tokens = 20
}
"""
LONG = "Tom has 3 apples and buys 4 more apples at the market on Sunday. How many apples does he have now?"
SHORT = "What is 2 + 2?"


def _task_lines(path) -> list[dict]:
    with open(path, encoding="utf-8") as handle:
        return [line for line in map(json.loads, handle) if line["type"] == "task"]


def test_a_longer_task_is_flagged_on_its_task_line_and_in_the_task_report(write_bam, tmp_path, capsys):
    source = write_bam(SOURCE)
    trace = tmp_path / "trace.jsonl"
    # --dry-run: every call answers with its full cap, so what the task is charged is its worst case.
    assert main(["exec", source, "--dry-run", "--task", LONG, "--trace", str(trace)]) == 0
    (line,) = _task_lines(trace)
    # The offline provider counts a token a byte, as the bound counts the prompt's own text.
    assert line["task_tokens"] == len(LONG.encode("utf-8")) > 20
    assert line["assumed_task_tokens"] == 20
    assert line["longer_than_assumed"] is True
    # What the flag is for: charged above the proven bound, within the budget, status ok.
    assert line["status"] == "ok" and line["bound"] < line["cost"] <= line["budget"]
    printed = capsys.readouterr().out
    assert f"warning: the task is {len(LONG.encode())} tokens, longer than the 20 (task_tokens)" in printed


def test_a_task_within_the_assumed_length_is_not_flagged(write_bam, tmp_path):
    source = write_bam(SOURCE)
    trace = tmp_path / "trace.jsonl"
    assert main(["exec", source, "--dry-run", "--task", SHORT, "--trace", str(trace)]) == 0
    (line,) = _task_lines(trace)
    assert (line["task_tokens"], line["assumed_task_tokens"], line["longer_than_assumed"]) == (14, 20, False)
    assert line["cost"] <= line["bound"]


def test_the_dataset_summary_counts_the_longer_tasks(write_bam, tmp_path, capsys):
    source = write_bam(SOURCE)
    dataset = tmp_path / "tasks.jsonl"
    rows = [{"id": "a", "task": LONG}, {"id": "b", "task": SHORT}, {"id": "c", "task": LONG + " Twice?"}]
    dataset.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    trace = tmp_path / "trace.jsonl"
    assert main(["exec", source, "--fake", "echo", "--dataset", str(dataset), "--trace", str(trace)]) == 0
    flags = {line["task_id"]: line["longer_than_assumed"] for line in _task_lines(trace)}
    assert flags == {"a": True, "b": False, "c": True}
    printed = capsys.readouterr().out
    longest = len((LONG + " Twice?").encode())
    assert f"warning: 2 tasks longer than the 20 tokens (task_tokens) the bound assumed, the longest {longest}" in printed


class _Words:
    """A provider that counts a message as 5 framing tokens and one token a word."""

    def count_prompt_tokens(self, messages):
        return sum(5 + len(message.content.split()) for message in messages)


class _Uncounted:
    def count_prompt_tokens(self, messages):
        return None


def test_task_tokens_is_the_most_any_model_counts_without_framing():
    assert task_tokens("one two three", [_Words()]) == 3
    # A provider that counts nothing offline is bounded by the bytes, as the guard bounds it.
    assert task_tokens("one two three", [_Words(), _Uncounted()]) == len(b"one two three")
