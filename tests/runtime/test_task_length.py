"""A task's bound is taken at its own length: on its trace task line and in exec's reports.

The compiler binds each template for tasks `task_tokens` long; at run time the
bound of the binding that runs is recomputed at the task's real length
(plan/lengths.py), so a longer task is never charged above the bound its task
line states, and a shorter one states a tighter bound.
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


def test_a_longer_task_states_its_bound_at_its_own_length(write_bam, tmp_path, capsys):
    source = write_bam(SOURCE)
    trace = tmp_path / "trace.jsonl"
    # --dry-run: every call answers with its full cap, so what the task is charged is its worst case.
    assert main(["exec", source, "--dry-run", "--task", LONG, "--trace", str(trace)]) == 0
    (line,) = _task_lines(trace)
    # The offline provider counts a token a byte, as the bound counts the prompt's own text.
    assert line["task_tokens"] == len(LONG.encode("utf-8")) > 20
    assert (line["assumed_task_tokens"], line["length_class"]) == (20, 20)
    assert line["longer_than_assumed"] is True
    # At its full caps the task is charged exactly the bound at its length, far above the 20-token one.
    assert line["status"] == "ok" and line["cost"] == line["bound"] <= line["budget"]
    assert line["bound"] == 1 * (len("Solve: ".encode()) + 8 + len(LONG.encode())) + 2 * 16
    printed = capsys.readouterr().out
    assert f"note: the task is {len(LONG.encode())} tokens, longer than its length class (20 tokens)" in printed


def test_a_shorter_task_states_a_tighter_bound(write_bam, tmp_path):
    source = write_bam(SOURCE)
    trace = tmp_path / "trace.jsonl"
    assert main(["exec", source, "--dry-run", "--task", SHORT, "--trace", str(trace)]) == 0
    (line,) = _task_lines(trace)
    assert (line["task_tokens"], line["assumed_task_tokens"], line["longer_than_assumed"]) == (14, 20, False)
    assert line["cost"] == line["bound"] == 1 * (len("Solve: ".encode()) + 8 + 14) + 2 * 16


def test_the_dataset_task_lines_carry_each_length(write_bam, tmp_path, capsys):
    source = write_bam(SOURCE)
    dataset = tmp_path / "tasks.jsonl"
    rows = [{"id": "a", "task": LONG}, {"id": "b", "task": SHORT}, {"id": "c", "task": LONG + " Twice?"}]
    dataset.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    trace = tmp_path / "trace.jsonl"
    assert main(["exec", source, "--fake", "verbose", "--dataset", str(dataset), "--trace", str(trace)]) == 0
    lines = {line["task_id"]: line for line in _task_lines(trace)}
    assert {key: line["longer_than_assumed"] for key, line in lines.items()} == {"a": True, "b": False, "c": True}
    assert all(line["cost"] == line["bound"] for line in lines.values())
    assert lines["c"]["bound"] - lines["a"]["bound"] == len(b" Twice?")  # 1 µ$ a prompt token
    assert "status: ok 3" in capsys.readouterr().out


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
