"""`bamasc reproduce`: the reference's training objective beside bamasc's, the sampling options of the
benchmarked tasks, and the paper's training tasks taken from the training data the user points at."""

from __future__ import annotations

import json
import os

import pytest

from bamasc.cli import main
from bamasc.evaluate.datasets import load
from bamasc.evaluate.samplers import PAPER_TRAINING, Sampling, paper_training, sample, select
from tests.conftest import ROOT

FIXTURES = os.path.join(ROOT, "tests", "fixtures")
TINY = os.path.join(FIXTURES, "reproduce", "tiny.bam")
TASKS = os.path.join(FIXTURES, "datasets", "gsm8k.jsonl")
QUICK = ["--embedding", "hashed", "--epochs", "2", "--fake", "echo", "--systems", "tiny_bamasc"]


@pytest.fixture(autouse=True)
def cache(monkeypatch, tmp_path):
    monkeypatch.setenv("BAMASC_CACHE", str(tmp_path / "cache"))


def reproduce(out, *extra: str, dataset: str = TASKS) -> list[str]:
    return ["reproduce", TINY, "--dataset", dataset, "-o", str(out), *QUICK, *extra]


def gsm8k_file(path, count: int) -> str:
    path.write_text("".join(json.dumps({"question": f"Ann has {n} apples and buys 1 more. How many?",
                                        "answer": f"{n} + 1\n#### {n + 1}"}) + "\n" for n in range(count)))
    return str(path)


def table_rows(out) -> list[dict]:
    return json.loads((out / "table.json").read_text(encoding="utf-8"))["rows"]


def manifest(out) -> dict:
    return json.loads((out / "manifest.json").read_text(encoding="utf-8"))


# ---------------------------------------------------------------- the reference objective


def test_both_objectives_train_their_own_policy_and_each_has_its_labelled_row(tmp_path, capsys):
    out = tmp_path / "out"
    assert main(reproduce(out, "--limit", "3", "--objective", "weighted,reference")) == 0
    err = capsys.readouterr().err
    assert "train tiny_bamasc (reference objective): " in err
    rows = table_rows(out)
    assert [(row["row"], row["budget"]) for row in rows] == [
        (label, budget) for label in ("tiny_bamasc", "tiny_bamasc (policy)", "tiny_bamasc (policy, reference objective)",
                                      "tiny_bamasc (greedy)") for budget in (500.0, 900.0)]
    assert [row["method"] for row in rows[2:6:2]] == ["policy", "policy-reference"]
    cells = [json.loads(line) for line in (out / "bench" / "cells.jsonl").read_text().splitlines()]
    assert {cell["label"]: cell["by_policy"] for cell in cells} == {
        "tiny_bamasc": False, "tiny_bamasc (policy)": True, "tiny_bamasc (policy, reference objective)": True,
        "tiny_bamasc (greedy)": False}
    # One collect, two checkpoints: bamasc's own and the reference's network, settings and seed.
    weighted = json.loads((out / "train" / "tiny_bamasc.json").read_text())
    reference = json.loads((out / "train" / "tiny_bamasc.reference.json").read_text())
    assert weighted["config"]["objective"] == "weighted" and weighted["network"]["budget"] == "steps"
    assert reference["config"]["objective"] == "reference" and reference["config"]["seed"] == 42
    assert reference["config"]["learning_rate"] == 0.003 and reference["epochs_run"] == 2  # --epochs applies
    assert reference["network"] == {"hidden": 128, "depth": 1, "budget": "linear", "input": 64, "embedding_scale": "none"}
    assert weighted["data_sha256"] == reference["data_sha256"]
    # The same command resumes: both policies count as trained.
    assert main(reproduce(out, "--limit", "3", "--objective", "weighted,reference")) == 0
    err = capsys.readouterr().err
    assert "train tiny_bamasc: done before" in err and "train tiny_bamasc (reference objective): done before" in err
    assert table_rows(out) == rows


def test_the_objectives_are_pinned_and_the_default_pins_as_before(tmp_path, capsys):
    out = tmp_path / "out"
    assert main(reproduce(out, "--limit", "2")) == 0
    assert "objectives" not in manifest(out)["pinned"]["setup"]  # a folder written before the option still resumes
    assert main(reproduce(out, "--limit", "2", "--objective", "reference")) == 2
    assert "holds a reproduction with other settings" in capsys.readouterr().err


@pytest.mark.parametrize("value", ["greedy", "weighted,weighted", ""])
def test_an_unknown_or_repeated_objective_is_a_usage_error(tmp_path, capsys, value):
    with pytest.raises(SystemExit) as stopped:
        main(reproduce(tmp_path / "out", "--objective", value))
    assert stopped.value.code == 2 and "need objectives among weighted, naive, reference" in capsys.readouterr().err


# ---------------------------------------------------------------- sampling the benchmarked tasks


def test_the_benchmarked_tasks_are_the_sample_and_are_pinned(tmp_path, capsys):
    out = tmp_path / "out"
    assert main(reproduce(out, "--sample", "3", "--sample-seed", "7", "--learn", "none")) == 0
    assert "kept 3 of 6 tasks (3 sampled with seed 7)" in capsys.readouterr().err
    expected = [item.id for item in sample(load(TASKS, "gsm8k").items, 3, 7)]
    assert manifest(out)["pinned"]["tasks"] == expected
    cells = [json.loads(line) for line in (out / "bench" / "cells.jsonl").read_text().splitlines()]
    assert all([item["id"] for item in cell["items"]] == expected for cell in cells)


@pytest.mark.parametrize("options, message", [
    (["--stratify", "level"], "--stratify applies to a sample"),
    (["--sample-seed", "3"], "--sample-seed applies to a sample"),
    (["--sample", "7"], "cannot draw 7 items without replacement from 6"),
    (["--ids", "1-9"], "3 ids of the ranges 1-9 not in the dataset"),
])
def test_bad_sampling_options_are_usage_errors_before_anything_runs(tmp_path, capsys, options, message):
    out = tmp_path / "out"
    assert main(reproduce(out, *options)) == 2
    assert message in capsys.readouterr().err and not out.exists()


# ---------------------------------------------------------------- the paper's training tasks


def test_the_paper_training_rules_per_kind():
    assert paper_training("gsm8k") == Sampling(size=500)  # seed 42, Python's shuffle
    assert paper_training("mbpp") == Sampling(ids=((601, 974),))
    assert paper_training("math") == Sampling(size=1000, stratify="level")  # seed 888, NumPy's permutation
    assert set(PAPER_TRAINING) == {"gsm8k", "mbpp", "math"}
    assert paper_training("math").shuffle_seed() == 888 and paper_training("gsm8k").shuffle_seed() == 42


def test_gsm8k_training_tasks_are_500_sampled_from_the_training_file(tmp_path, capsys):
    train = gsm8k_file(tmp_path / "train.jsonl", 520)
    out = tmp_path / "out"
    assert main(reproduce(out, "--train-dataset", train, "--limit", "3")) == 0
    err = capsys.readouterr().err
    assert f"training on 500 of 520 tasks of {train} (the paper's: 500 sampled with seed 42)" in err
    assert "trained on the tasks they are benchmarked on" not in err
    paper = [item.id for item in sample(load(train, "gsm8k").items, 500, 42)]
    assert manifest(out)["pinned"]["train_tasks"] == paper[:3]  # --limit: the first 3 of them
    collected = {json.loads(line)["task_id"] for line in (out / "collect" / "tiny_bamasc.jsonl").read_text().splitlines()}
    assert collected == set(paper[:3])


def test_a_training_file_too_small_for_the_paper_rule_says_how_to_take_every_task(tmp_path, capsys):
    train = gsm8k_file(tmp_path / "train.jsonl", 30)
    out = tmp_path / "out"
    assert main(reproduce(out, "--train-dataset", train)) == 2
    err = capsys.readouterr().err
    assert "cannot draw 500 items without replacement from 30" in err and "--train-split all" in err
    assert main(reproduce(out, "--train-dataset", train, "--train-split", "all", "--limit", "4")) == 0
    assert manifest(out)["pinned"]["train_tasks"] == [str(n) for n in range(1, 5)]


def test_mbpp_training_tasks_are_ids_601_to_974(tmp_path):
    mbpp = load(os.path.join(FIXTURES, "datasets", "mbpp.jsonl"), "mbpp")  # ids 11-15 and 601
    with pytest.raises(ValueError, match="373 ids of the ranges 601-974 not in the dataset: 602, 603"):
        select(mbpp.items, paper_training("mbpp"))
    rows = [json.loads(line) for line in open(os.path.join(FIXTURES, "datasets", "mbpp.jsonl"), encoding="utf-8")]
    whole = tmp_path / "mbpp.jsonl"  # the published file's ids 1-974, from the fixture's rows
    whole.write_text("".join(json.dumps({**rows[n % len(rows)], "task_id": n}) + "\n" for n in range(1, 975)))
    kept = select(load(str(whole), "mbpp").items, paper_training("mbpp"))
    assert [item.id for item in kept] == [str(n) for n in range(601, 975)]
