"""Samplers: seeded samples without replacement, stratified samples by largest remainder, task-id ranges,
and the --sample/--seed/--stratify/--ids options of bench, score and collect."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from collections import Counter

import pytest

from bamasc.cli import main
from bamasc.evaluate.datasets import load
from bamasc.evaluate.samplers import (
    SampleError,
    Sampling,
    in_ranges,
    parse_ids,
    quotas,
    sample,
    select,
    stratified,
)
from tests.conftest import ROOT

FIXTURES = os.path.join(ROOT, "tests", "fixtures", "datasets")
# The level counts of MATH's 5,000-problem test set.
MATH_LEVELS = {"Level 1": 437, "Level 2": 894, "Level 3": 1131, "Level 4": 1214, "Level 5": 1324}


def write_jsonl(path, rows) -> str:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return str(path)


def gsm8k_rows(count: int) -> list[dict]:
    return [{"question": f"Ann has {n} apples and buys 1 more. How many?", "answer": f"{n} + 1\n#### {n + 1}"}
            for n in range(count)]


@pytest.fixture
def math_like(tmp_path) -> str:
    """A MATH-shaped test file of 5,000 problems with MATH's level counts, levels interleaved."""
    levels = [level for level, count in MATH_LEVELS.items() for _ in range(count)]
    random.Random(0).shuffle(levels)
    rows = [{"problem": f"What is {n} + 0?", "solution": f"It is $\\boxed{{{n}}}$.", "level": level,
             "type": "Algebra" if n % 2 else "Geometry", "unique_id": f"test/{n}.json"}
            for n, level in enumerate(levels)]
    return write_jsonl(tmp_path / "math_test.jsonl", rows)


# ---------------------------------------------------------------- seeded samples


def test_a_seeded_sample_is_the_same_every_time_and_a_subset_without_replacement():
    items = list(range(7473))  # GSM8K's training set size
    first = sample(items, 500, 42)
    assert first == sample(items, 500, 42) == sample(list(items), 500, 42)
    assert len(first) == len(set(first)) == 500 and set(first) <= set(items)
    assert first != sample(items, 500, 43)
    # Exactly what the documented recipe gives: Python's shuffle of the file order, then the first N.
    by_hand = list(items)
    random.Random(42).shuffle(by_hand)
    assert first == by_hand[:500]
    # A larger sample with the same seed starts with the smaller one.
    assert sample(items, 600, 42)[:500] == first


def test_the_sample_does_not_depend_on_the_process():
    code = ("from bamasc.evaluate.samplers import sample; "
            "print(sample([str(n) for n in range(7473)], 500, 42)[:20])")
    outputs = set()
    for hash_seed in ("0", "1", "12345"):
        env = {**os.environ, "PYTHONHASHSEED": hash_seed, "PYTHONPATH": ROOT}
        outputs.add(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                                   check=True).stdout)
    assert len(outputs) == 1


def test_a_sample_larger_than_the_items_or_empty_is_refused():
    with pytest.raises(SampleError, match="cannot draw 4 items without replacement from 3"):
        sample([1, 2, 3], 4, 42)
    with pytest.raises(SampleError, match="at least 1"):
        sample([1, 2, 3], 0, 42)
    assert sorted(sample([1, 2, 3], 3, 42)) == [1, 2, 3]


# ---------------------------------------------------------------- stratified samples


def test_quotas_are_the_references_worked_by_hand():
    # 1000 of MATH's 5000: int(87.4, 178.8, 226.2, 242.8, 264.8) = 87, 178, 226, 242, 264 make 997;
    # the 3 left over all go to the largest share, Level 5 (the reference's 87/178/226/242/267).
    assert quotas(MATH_LEVELS, 1000) == {"Level 1": 87, "Level 2": 178, "Level 3": 226, "Level 4": 242, "Level 5": 267}
    # Shares 0.5 and 1.5: 0 and 1, and the one left goes to the larger share.
    assert quotas({"a": 1, "b": 3}, 2) == {"a": 0, "b": 2}
    # Shares 2/3 and 4/3: 0 and 1; the larger share takes the rest though the smaller remainder is larger.
    assert quotas({"small": 1, "large": 2}, 2) == {"small": 0, "large": 2}
    # The shares are floored in floating point, as the reference computes them: 2 / 98 * 49 is
    # 0.999..., so 'x' gets 0 where exact arithmetic gives it 1, and 'y' the whole rest.
    assert quotas({"x": 2, "y": 96}, 49) == {"x": 0, "y": 49}
    # Equal shares (all 0): the first value in order of appearance takes what it holds, the next the rest.
    assert quotas({"b": 1, "a": 1, "c": 1}, 2) == {"b": 1, "a": 1, "c": 0}


def test_quotas_always_sum_to_the_size_and_never_exceed_a_group():
    rng = random.Random(5)
    for _ in range(300):
        counts = {f"v{i}": rng.randint(1, 50) for i in range(rng.randint(1, 8))}
        size = rng.randint(1, sum(counts.values()))
        shares = quotas(counts, size)
        assert sum(shares.values()) == size
        assert all(0 <= shares[v] <= counts[v] for v in counts)
        # Never below the floored share; above it only the largest shares, which take what is left.
        total = sum(counts.values())
        assert all(shares[v] >= int(counts[v] / total * size) for v in counts)


def reference_subset(rows: list[dict], size: int, seed: int = 888) -> list[dict]:
    """The reference's MATH subset restated from its loader and sampling script: NumPy's permutation
    of the rows in file order, int(count / total * size) per level, the rest to the largest, then each
    level's first rows, the levels one after another in order of first appearance."""
    import numpy as np

    shuffled_rows = list(np.random.default_rng(seed).permutation(rows))
    counts = Counter(row["level"] for row in shuffled_rows)
    target = {level: int(count / len(shuffled_rows) * size) for level, count in counts.items()}
    largest = max(target, key=lambda level: target[level])
    target[largest] += size - sum(target.values())
    return [row for level in target for row in [r for r in shuffled_rows if r["level"] == level][: target[level]]]


def test_the_stratified_math_subset_is_the_references(math_like):
    dataset = load(math_like, "math")
    assert len(dataset) == 5000
    subset = select(dataset.items, Sampling(size=1000, stratify="level"))
    assert Counter(item.level for item in subset) == {
        "Level 1": 87, "Level 2": 178, "Level 3": 226, "Level 4": 242, "Level 5": 267}
    ids = [item.id for item in subset]
    assert len(set(ids)) == 1000 and set(ids) <= {item.id for item in dataset.items}
    # The very subset, in the very order, that the reference's recipe gives for the same file.
    rows = [json.loads(line) for line in open(math_like, encoding="utf-8")]
    assert ids == [row["unique_id"] for row in reference_subset(rows, 1000)]
    # Seed 888 by default, and the same subset every time.
    assert ids == [item.id for item in stratified(dataset.items, 1000, lambda item: item.level, 888)]
    assert ids == [item.id for item in select(load(math_like, "math").items, Sampling(size=1000, stratify="level"))]
    assert ids != [item.id for item in select(dataset.items, Sampling(size=1000, seed=887, stratify="level"))]
    # MATH's `type` is the item's subject.
    by_type = select(dataset.items, Sampling(size=10, stratify="type"))
    assert Counter(item.subject for item in by_type) == {"Algebra": 5, "Geometry": 5}


def test_stratifying_needs_a_size_and_a_field_every_item_has(math_like):
    items = load(math_like, "math").items
    with pytest.raises(SampleError, match="needs its size"):
        select(items, Sampling(stratify="level"))
    with pytest.raises(SampleError, match="cannot stratify by 'answer'"):
        select(items, Sampling(size=5, stratify="answer"))
    gsm8k = load(os.path.join(FIXTURES, "gsm8k.jsonl"), "gsm8k").items
    with pytest.raises(SampleError, match="has no 'level'"):
        select(gsm8k, Sampling(size=2, stratify="level"))


# ---------------------------------------------------------------- id ranges


def test_id_ranges_parse_and_bad_ones_are_refused():
    assert parse_ids("11-510") == ((11, 510),)
    assert parse_ids("11-510, 601-974") == ((11, 510), (601, 974))
    assert parse_ids("7") == ((7, 7),)
    for bad, message in [("510-11", "runs backwards: write 11-510"), ("a-b", "not an id range"), ("1-", "not an id range"),
                         ("-5", "not an id range"), ("", "not an id range"), ("1-2-3", "not an id range"),
                         ("1.5-3", "not an id range")]:
        with pytest.raises(SampleError, match=message):
            parse_ids(bad)


def test_id_ranges_keep_file_order_and_every_id_must_be_there():
    items = load(os.path.join(FIXTURES, "mbpp.jsonl"), "mbpp").items  # ids 11-15 and 601
    assert [item.id for item in in_ranges(items, ((11, 13), (601, 601)), lambda item: item.id)] == ["11", "12", "13", "601"]
    with pytest.raises(SampleError, match=r"495 ids of the ranges 11-510 not in the dataset: 16, 17, 18, 19, 20 and 490 more"):
        in_ranges(items, ((11, 510),), lambda item: item.id)
    # Overlapping ranges keep an item once; a range far larger than any file is counted, never listed.
    assert [item.id for item in in_ranges(items, ((11, 12), (12, 13), (11, 11)), lambda item: item.id)] == ["11", "12", "13"]
    with pytest.raises(SampleError, match=r"999999999994 ids of the ranges 1-1000000000000 not in the dataset: 1, 2,"):
        in_ranges(items, ((1, 10**12),), lambda item: item.id)
    # Ranges first, then the sample, drawn from what they kept.
    kept = select(items, Sampling(size=2, seed=1, ids=((11, 15),)))
    assert len(kept) == 2 and {item.id for item in kept} <= {"11", "12", "13", "14", "15"}


# ---------------------------------------------------------------- the commands


def test_bench_runs_the_sample_it_notes(tmp_path, capsys):
    data = write_jsonl(tmp_path / "train.jsonl", gsm8k_rows(50))
    results = tmp_path / "results.json"
    gsm8k = os.path.join(ROOT, "examples", "gsm8k.bam")
    args = ["bench", gsm8k, "--dataset", data, "--budgets", "1625", "--sample", "5", "--seed", "42", "--fake", "echo",
            "-o", str(results)]
    assert main(args) == 0
    assert "kept 5 of 50 items (5 sampled with seed 42)" in capsys.readouterr().err
    ran = [item["id"] for item in json.loads(results.read_text())["runs"][0]["items"]]
    assert ran == [item.id for item in sample(load(data, "gsm8k").items, 5, 42)]


def test_score_scores_only_the_ids_kept(tmp_path, capsys):
    predictions = write_jsonl(tmp_path / "p.jsonl", [{"id": n, "prediction": "#### 0"} for n in range(1, 7)])
    assert main(["score", "--dataset", os.path.join(FIXTURES, "gsm8k.jsonl"), "--kind", "gsm8k",
                 "--predictions", predictions, "--ids", "2-4"]) == 0
    captured = capsys.readouterr()
    assert "scored 3 gsm8k items" in captured.out and "accuracy: 0/3" in captured.out
    assert "an id the dataset does not have" not in captured.err  # ids left out are known, only not scored


@pytest.mark.parametrize("options, message", [
    (["--stratify", "level"], "--stratify applies to a sample"),
    (["--seed", "3"], "--seed applies to a sample"),
    (["--ids", "4-2"], "runs backwards"),
    (["--ids", "1-9"], "3 ids of the ranges 1-9 not in the dataset: 7, 8, 9"),
    (["--sample", "7"], "cannot draw 7 items without replacement from 6"),
    (["--scorer", "math-strict"], "the scorer 'math-strict' does not read gsm8k datasets"),
])
def test_bad_sampling_options_are_usage_errors(tmp_path, capsys, options, message):
    predictions = write_jsonl(tmp_path / "p.jsonl", [{"id": 1, "prediction": "#### 0"}])
    assert main(["score", "--dataset", os.path.join(FIXTURES, "gsm8k.jsonl"), "--kind", "gsm8k",
                 "--predictions", predictions, *options]) == 2
    assert message in capsys.readouterr().err


def test_collect_runs_the_sampled_tasks_only(tmp_path, capsys):
    data = write_jsonl(tmp_path / "train.jsonl", gsm8k_rows(30))
    out = tmp_path / "offline.jsonl"
    gsm8k = os.path.join(ROOT, "examples", "gsm8k.bam")
    assert main(["collect", gsm8k, "--dataset", data, "--budgets", "1625", "-o", str(out), "--fake", "echo",
                 "--sample", "4"]) == 0
    assert "kept 4 of 30 tasks (4 sampled with seed 42)" in capsys.readouterr().err
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    tasks = [str(n) for n in sample([str(n) for n in range(1, 31)], 4, 42)]
    assert sorted({row["task_id"] for row in rows}) == sorted(tasks)
