"""Hostile input never makes a traceback: mutated sources through lint and compile, and bad rows
through score, bench, collect and train (with and without --skip-bad-rows).

The mutation loops are seeded, so a failure names the mutant that caused it and
reruns the same way. They start from the shipped examples and stdlib templates
and make the edits that found crashes while the limits were written: tokens
deleted, duplicated, swapped or replaced, language pieces spliced in, names
replaced, and numbers replaced by extreme values (1e308, 1e309, -0, 1e20, 400
digits, `nan`, and the limits themselves and just past them). Run with
BAMASC_FUZZ_SCALE=10 for ten times the mutants.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import random
import re
import subprocess
import sys
from pathlib import Path

import pytest

from bamasc.cli import main
from bamasc.plan.compile import CompileError, compile_file
from bamasc.diagnostics import CODES, ERROR, render_github, render_json, render_sarif, render_text
from bamasc.lint import lint_paths
from tests.conftest import EXAMPLES, ROOT, STDLIB

SEEDS = {os.path.basename(path): Path(path).read_bytes() for path in EXAMPLES + STDLIB}
TOKEN = re.compile(rb"\s+|\w+(?:\.\w+)?|[^\w\s]")
NUMBER = re.compile(rb"\d")
WORD = re.compile(rb"\w+")
WORDS = sorted({word for seed in SEEDS.values() for word in WORD.findall(seed)})
EXTREMES = [
    b"1e308", b"1e309", b"-1e308", b"-0", b"0", b"0.0", b"1e20", b"1e12", b"1e-320", b"9" * 400, b"9" * 30,
    b"nan", b"NaN", b"inf", b"4294967297", b"$1e300", b"1e300 \xc2\xb5$", b"0.000001",
    # The limits and just past them: what the solver must take, and the first thing it need not.
    b"1000000", b"1000001", b"10000000", b"10000001", b"1000000000000", b"1000000000001", b"10000", b"10001",
    b"1000", b"1001", b"64", b"65",
]
SPLICES = [
    b"{", b"}", b"[", b"]", b"(", b")", b"=", b",", b":", b"..", b"*", b"+", b"-", b"<=", b">=", b"==",
    b"$", b"\xc2\xb5$", b"$/Mtok", b'"', b"\n", b"count", b"tier", b"chain", b"parallel", b"vote", b"refine",
    b"plan", b"max_steps", b"task", b"require", b"slot", b'env("X")', b'env("sk-0123456789abcdefABCDEF012345")',
    b"min_agents = 100000000000000000000", b"max_output = 99999999999", b"quality = 1e308",
    b'base_url = "https://u:p@h"', b"require count(executor) * 1000000 >= 999999",
]
EDITS = ["number"] * 6 + ["rename"] * 3 + ["delete", "duplicate", "swap", "replace", "splice", "splice"]
SCALE = int(os.environ.get("BAMASC_FUZZ_SCALE", "1"))
# About 8 s each on one core: a lint mutant takes about 1.3 ms, a compile mutant about 7 ms.
LINT_MUTANTS = 6000 * SCALE
COMPILE_MUTANTS = 1200 * SCALE


def mutant(rng: random.Random) -> bytes:
    """One seed file with one to four edits."""
    tokens = TOKEN.findall(SEEDS[rng.choice(sorted(SEEDS))])
    for _ in range(rng.randint(1, 4)):
        if not tokens:
            break
        i = rng.randrange(len(tokens))
        edit = rng.choice(EDITS)
        if edit == "number":
            numbers = [k for k, token in enumerate(tokens) if NUMBER.match(token)]
            if numbers:
                tokens[rng.choice(numbers)] = rng.choice(EXTREMES)
        elif edit == "rename":
            words = [k for k, token in enumerate(tokens) if WORD.fullmatch(token)]
            if words:
                tokens[rng.choice(words)] = rng.choice(WORDS)
        elif edit == "delete":
            del tokens[i]
        elif edit == "duplicate":
            tokens.insert(i, tokens[i])
        elif edit == "swap":
            j = rng.randrange(len(tokens))
            tokens[i], tokens[j] = tokens[j], tokens[i]
        elif edit == "replace":
            tokens[i] = rng.choice(tokens)
        else:
            tokens.insert(i, rng.choice(SPLICES))
    return b"".join(tokens)


def check_diagnostics(diagnostics, sources, files) -> None:
    for diagnostic in diagnostics:
        assert diagnostic.code in CODES
        assert diagnostic.span is None or (diagnostic.span.line >= 1 and diagnostic.span.col >= 1)
    render_text(diagnostics, sources, limit=50)
    json.loads(render_json(diagnostics, files))
    json.loads(render_sarif(diagnostics))
    render_github(diagnostics)


def quietly(argv: list[str]) -> int:
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        return main(argv)


# Crashes these loops found, kept as regressions (before the limits and the capped budget row):
# the static budget check (OverflowError on an infinite floor), optimize/problem.py _validate
# (infinite seat costs), optimize/highs.py solve (HiGHS dropped a row it refused and returned
# seats that break it), and highs.py _solution_or_none (HiGHS stopped with status Unknown on
# 1e30-token caps).
REGRESSIONS = {
    "output-price-1e309": (b"quickstart.bam", b"output = 0.80", b"output = 1e309"),
    "output-price-1e308": (b"quickstart.bam", b"output = 0.80", b"output = 1e308"),
    "input-price-1e20": (b"quickstart.bam", b"input = 1.00", b"input = 1e20"),
    "input-price-400-digits": (b"quickstart.bam", b"input = 1.00", b"input = " + b"9" * 400),
    "max-output-30-digits": (b"gsm8k.bam", b"max_output = 256", b"max_output = " + b"9" * 30),
    "min-agents-21-digits": (b"gsm8k.bam", b"min_agents   = 2", b"min_agents = 100000000000000000000"),
}


@pytest.mark.parametrize("name", sorted(REGRESSIONS))
def test_found_crashes_are_diagnostics(tmp_path, name):
    seed, old, new = REGRESSIONS[name]
    path = tmp_path / "main.bam"
    path.write_bytes(SEEDS[seed.decode()].replace(old, new, 1))
    assert {d.code for d in lint_paths([str(path)]).diagnostics} >= {"BAM210"}
    result = compile_file(str(path), plan_dir=str(tmp_path))
    assert result.plan is None and "BAM210" in {d.code for d in result.diagnostics}


def test_lint_mutants_never_crash(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # imports of "std/..." resolve the same from anywhere
    rng = random.Random(20240611)
    path = tmp_path / "main.bam"
    for number in range(LINT_MUTANTS):
        data = mutant(rng)
        path.write_bytes(data)
        try:
            result = lint_paths([str(path)])
            check_diagnostics(result.diagnostics, result.sources, result.files)
        except Exception as problem:  # report the mutant, so that it can be kept as a regression
            raise AssertionError(f"lint mutant {number} crashed: {problem!r}\n{data.decode('utf-8', 'replace')}") from problem


def test_compile_mutants_never_crash(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    rng = random.Random(20240612)
    path = tmp_path / "main.bam"
    compiled = 0
    for number in range(COMPILE_MUTANTS):
        data = mutant(rng)
        path.write_bytes(data)
        try:
            result = compile_file(str(path), plan_dir=str(tmp_path))
        except CompileError:  # no system, or none named: a usage error, exit code 2
            continue
        except Exception as problem:
            raise AssertionError(f"compile mutant {number} crashed: {problem!r}\n{data.decode('utf-8', 'replace')}") from problem
        check_diagnostics(result.diagnostics, result.sources, [str(path)])
        assert (result.plan is None) == any(d.severity == ERROR for d in result.diagnostics)
        compiled += result.plan is not None
    # The loop reaches the solver, not only the checks: many mutants still compile.
    assert compiled > COMPILE_MUTANTS // 10


def test_mutants_through_the_command_line(tmp_path):
    """A few in a real process: exit codes in {0, 1, 2}, and never a traceback on stderr."""
    rng = random.Random(7)
    for number in range(6):
        path = tmp_path / f"mutant{number}.bam"
        path.write_bytes(mutant(rng))
        for command in (["lint", "--format", "sarif"], ["compile"]):
            run = subprocess.run(
                [sys.executable, "-m", "bamasc", *command, str(path)],
                capture_output=True, text=True, cwd=tmp_path, env={**os.environ, "PYTHONPATH": ROOT},
            )
            assert run.returncode in (0, 1, 2), run.stderr
            assert "Traceback" not in run.stderr, run.stderr


# ---------------------------------------------------------------- hostile rows

DATASETS = os.path.join(ROOT, "tests", "fixtures", "datasets")
GSM8K_BAM = os.path.join(ROOT, "examples", "gsm8k.bam")
DEEP = b"[" * 100_000 + b"]" * 100_000
# Each bad row, and what the reader says about it.
BAD_ROWS = {
    "not-utf8": (b'{"question": "caf\xe9?", "answer": "#### 1"}', "not UTF-8 (column 18)"),
    "deep-nesting": (DEEP, "nest more than 64 levels deep"),
    "nan": (b'{"id": "nan", "question": "Half of NaN?", "answer": NaN}', "NaN is not a JSON number"),
    "not-an-object": (b'["question", "answer"]', "a row must be a JSON object"),
    "huge-number": (b'{"question": "Big?", "answer": 1e999}', "1e999 is too large for a float"),
    "lone-surrogate": (b'{"question": "\\ud800", "answer": "#### 1"}', "lone surrogate"),
}


def jsonl(path: Path, rows: list[bytes]) -> str:
    path.write_bytes(b"".join(row + b"\n" for row in rows))
    return str(path)


def good_gsm8k_rows() -> list[bytes]:
    return Path(DATASETS, "gsm8k.jsonl").read_bytes().splitlines()[:2]


def run_cli(argv: list[str], capsys) -> tuple[int, str]:
    code = main(argv)
    captured = capsys.readouterr()
    return code, captured.out + captured.err


@pytest.mark.parametrize("shape", sorted(BAD_ROWS))
def test_score_a_bad_dataset_row(tmp_path, capsys, shape):
    row, said = BAD_ROWS[shape]
    dataset = jsonl(tmp_path / "d.jsonl", good_gsm8k_rows() + [row])
    predictions = jsonl(tmp_path / "p.jsonl", [b'{"id": 1, "prediction": "#### 12"}'])
    argv = ["score", "--dataset", dataset, "--kind", "gsm8k", "--predictions", predictions]
    code, printed = run_cli(argv, capsys)
    assert code == 1 and "d.jsonl:3: " in printed and said in printed and "--skip-bad-rows" in printed, printed
    code, printed = run_cli([*argv, "--skip-bad-rows"], capsys)
    assert code == 0 and "skipped" in printed and "accuracy: 1/2" in printed


@pytest.mark.parametrize("shape", sorted(BAD_ROWS))
def test_score_a_bad_prediction_row(tmp_path, capsys, shape):
    row, said = BAD_ROWS[shape]
    row = row.replace(b'"question"', b'"prediction"')
    predictions = jsonl(tmp_path / "p.jsonl", [b'{"id": 1, "prediction": "#### 12"}', row])
    argv = ["score", "--dataset", os.path.join(DATASETS, "gsm8k.jsonl"), "--kind", "gsm8k", "--predictions", predictions]
    code, printed = run_cli(argv, capsys)
    assert code == 1 and "p.jsonl:2: " in printed and said.split(" (")[0] in printed
    code, printed = run_cli([*argv, "--skip-bad-rows"], capsys)
    assert code == 0 and "skipped" in printed and "p.jsonl:2" in printed and "accuracy: 1/6" in printed


def test_bench_bad_dataset_rows(tmp_path, capsys):
    rows = list(BAD_ROWS.values())
    for row, said in rows:
        dataset = jsonl(tmp_path / "d.jsonl", good_gsm8k_rows() + [row])
        argv = ["bench", GSM8K_BAM, "--dataset", dataset, "--budgets", "1625", "--fake", "echo"]
        code, printed = run_cli(argv, capsys)
        assert code == 1 and "d.jsonl:3: " in printed and "--skip-bad-rows" in printed, printed
    dataset = jsonl(tmp_path / "all.jsonl", good_gsm8k_rows() + [row for row, _ in rows])
    code, printed = run_cli(["bench", GSM8K_BAM, "--dataset", dataset, "--budgets", "1625", "--fake", "echo",
                             "--skip-bad-rows"], capsys)
    assert code == 0, printed
    assert printed.count("warning: skipped") == len(rows) and "(gsm8k, 2 tasks)" in printed
    for _, said in rows:
        assert said.split(" (")[0] in printed


def test_dataset_json_files_with_bad_bytes_or_deep_nesting(tmp_path):
    from bamasc.evaluate.datasets import DatasetError, load

    array = tmp_path / "mbpp.json"
    for data, said in ((b'[{"task_id": 11, "text": "caf\xe9"}]', "not UTF-8"), (b"[" + DEEP + b"]", "64 levels")):
        array.write_bytes(data)
        with pytest.raises(DatasetError, match=said):
            load(str(array), "mbpp")
        assert said in str(load(str(array), "mbpp", skip_bad=True).problems[0])
    folder = tmp_path / "math"
    folder.mkdir()
    (folder / "1.json").write_bytes(b'{"problem": "1+1?", "solution": "\\\\boxed{2}"}')
    (folder / "2.json").write_bytes(b'{"problem": "\xff", "solution": "\\\\boxed{3}"}')
    (folder / "3.json").write_bytes(b'{"problem": "x", "answer": NaN}')
    dataset = load(str(folder), "math", skip_bad=True)
    assert [item.id for item in dataset.items] == ["1.json"]
    assert [p.file.rsplit(os.sep, 1)[-1] for p in dataset.problems] == ["2.json", "3.json"]


def collect_argv(dataset: str, out: Path) -> list[str]:
    return ["collect", GSM8K_BAM, "--dataset", dataset, "--budgets", "875", "-o", str(out), "--fake", "echo",
            "--concurrency", "4"]


@pytest.mark.parametrize("shape", sorted(BAD_ROWS))
def test_collect_a_bad_dataset_row(tmp_path, capsys, shape):
    row, said = BAD_ROWS[shape]
    dataset = jsonl(tmp_path / "d.jsonl", good_gsm8k_rows() + [row])
    out = tmp_path / "offline.jsonl"
    code, printed = run_cli(collect_argv(dataset, out), capsys)
    assert code == 1 and "d.jsonl:3" in printed and "--skip-bad-rows" in printed, printed
    code, printed = run_cli([*collect_argv(dataset, out), "--skip-bad-rows"], capsys)
    assert code == 0 and "skipped" in printed and "(2 tasks, 1 budgets" in printed, printed


def offline_rows() -> list[bytes]:
    from bamasc.policy.data import row_data
    from tests.policy.synthetic import table_rows

    return [json.dumps(row_data(row)).encode() for row in table_rows(tasks_per_cluster=1)]


OFFLINE_BAD = {
    **{name: row for name, (row, _) in BAD_ROWS.items()},
    "budget-1e300": b'{"task_id": "x", "task": "t", "budget": 1e300, "template": "linear", "success": true, '
    b'"cost": 1, "feasible": true}',
    "cost-100-digit-int": b'{"task_id": "x", "task": "t", "budget": 500, "template": "linear", "success": true, '
    b'"cost": ' + b"9" * 100 + b', "feasible": true}',
}


def test_train_bad_offline_rows(tmp_path, capsys):
    good = offline_rows()
    checkpoint = str(tmp_path / "policy.msgpack")
    for name, row in OFFLINE_BAD.items():
        data = jsonl(tmp_path / f"{name}.jsonl", good + [row])
        code, printed = run_cli(["train", GSM8K_BAM, "--data", data, "-o", checkpoint, "--embedding", "hashed"], capsys)
        assert code == 1 and f"{name}.jsonl:{len(good) + 1}: " in printed and "--skip-bad-rows" in printed, printed
    data = jsonl(tmp_path / "all.jsonl", good + list(OFFLINE_BAD.values()))
    code, printed = run_cli(["train", GSM8K_BAM, "--data", data, "-o", checkpoint, "--embedding", "hashed",
                             "--epochs", "1", "--skip-bad-rows"], capsys)
    assert code == 0, printed
    assert printed.count("warning: skipped") == len(OFFLINE_BAD) and os.path.exists(checkpoint)


def test_collect_resumes_over_an_output_file_with_bad_lines(tmp_path, capsys):
    dataset = jsonl(tmp_path / "d.jsonl", good_gsm8k_rows())
    out = tmp_path / "offline.jsonl"
    out.write_bytes(b'{"task_id": "\xff"}\n' + DEEP + b"\n" + b'{"task_id": 1, "budget": 1e999}\n')
    code, printed = run_cli(collect_argv(dataset, out), capsys)
    assert code == 0 and "0 already there" in printed, printed
    code, printed = run_cli(collect_argv(dataset, out), capsys)
    assert code == 0 and "0 rows written" in printed, printed
