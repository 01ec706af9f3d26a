"""`bamasc train`, `compile --task` and `exec` with select = policy(...), the reward block, and lazy imports."""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from bamasc.cli import main
from bamasc.policy.data import file_sha256, row_data
from tests.conftest import ROOT
from tests.helpers.policy import policy_bam
from tests.policy.synthetic import table_rows

GSM8K = os.path.join(ROOT, "examples", "gsm8k.bam")
ESSAY = "Write a short essay about travel and music, in three paragraphs, with a clear thesis."
CODE = "Write a python function that takes a string and returns the keys sorted, with a docstring and tests."
MATH = "A shop has 40 eggs and sells 12 coins. How many eggs are left? Show the arithmetic."


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """The synthetic table trained into policies/gsm8k.msgpack beside a copy of the GSM8K system."""
    folder = tmp_path_factory.mktemp("trained")
    bam = policy_bam(folder, reward="\n  reward { success = 1  failure = -1  efficiency = 0.25 }")
    rows = folder / "offline.jsonl"
    table = table_rows(tasks_per_cluster=20, seed=5, budgets=(500, 875, 1625))
    rows.write_text("".join(json.dumps(row_data(r)) + "\n" for r in table))
    (folder / "policies").mkdir()
    checkpoint = str(folder / "policies" / "gsm8k.msgpack")
    argv = ["train", bam, "--data", str(rows), "-o", checkpoint, "--embedding", "hashed",
            "--seed", "5", "--holdout", "0.25", "--reward-overflow", "3"]
    out = io.StringIO()
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("BAMASC_CACHE", str(folder / "cache"))
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
            code = main(argv)
    return {"code": code, "out": out.getvalue(), "bam": bam, "rows": str(rows), "checkpoint": checkpoint, "folder": folder}


def test_train_reports_heldout_metrics_and_writes_checkpoint_and_metadata(trained):
    assert trained["code"] == 0
    out = trained["out"]
    for line in ("policy", "oracle", "fixed linear", "fixed star", "fixed feedback", "fixed planner"):
        assert f"\n{line} " in out
    meta = json.loads(Path(trained["checkpoint"].replace(".msgpack", ".json")).read_text())
    assert meta["templates"] == ["linear", "star", "feedback", "planner"]
    assert meta["embedding_model"] == "hashed-words-384"
    assert meta["budget_scale"] == 2000.0  # the largest of gsm8k's budgets
    # The .bam reward block, with the command line's overflow on top.
    assert meta["reward"] == {"success": 1.0, "failure": -1.0, "overflow": 3.0, "efficiency": 0.25,
                              "infeasible": None, "task_weight": 1.0, "budget_weight": 1.0}
    assert meta["data_sha256"] == file_sha256(trained["rows"])
    heldout = meta["heldout"]
    assert set(heldout) == {"policy", "oracle", "fixed"} and set(heldout["fixed"]) == set(meta["templates"])
    for metrics in (heldout["policy"], heldout["oracle"], *heldout["fixed"].values()):
        assert {"reward", "success_rate", "mean_cost"} <= set(metrics)
    assert heldout["policy"]["reward"] >= 0.95 * heldout["oracle"]["reward"]


def test_compile_task_prints_the_probabilities_and_the_pick(trained, capsys):
    assert main(["compile", trained["bam"], "--budget", "1625", "--task", ESSAY]) == 0
    out = capsys.readouterr().out
    assert "policy for system 'gsm8k' at 1625 µ$:" in out
    table = out[out.index("policy for system"):]
    probabilities = {name: float(p) for name, p in re.findall(r"^  [* ] (\w+)\s+([0-9.]+)", table, re.MULTILINE)}
    assert set(probabilities) == {"linear", "star", "feedback", "planner"}
    assert abs(sum(probabilities.values()) - 1) < 0.01
    assert out.rstrip().endswith("picks: planner")
    # At 875 µ$ the planner has no binding: masked, never picked.
    assert main(["compile", trained["bam"], "--budget", "875", "--task", ESSAY]) == 0
    out = capsys.readouterr().out
    assert "planner   0.000  (infeasible: masked)" in out and "picks: planner" not in out


def test_exec_runs_the_template_the_policy_picks_per_task(trained, capsys, tmp_path):
    dataset = tmp_path / "tasks.jsonl"
    dataset.write_text("".join(json.dumps({"id": name, "question": text}) + "\n"
                               for name, text in (("essay", ESSAY), ("code", CODE), ("math", MATH))))
    trace = tmp_path / "trace.jsonl"
    argv = ["exec", trained["bam"], "--budget", "1625", "--dataset", str(dataset), "--fake", "echo", "--trace", str(trace)]
    assert main(argv) == 0
    capsys.readouterr()
    tasks = {r["task_id"]: r for r in map(json.loads, Path(trace).read_text().splitlines()) if r["type"] == "task"}
    assert {name: r["template"] for name, r in tasks.items()} == {"essay": "planner", "code": "linear", "math": "feedback"}
    assert all(r["cost"] <= r["budget"] for r in tasks.values())
    # --template still overrides the policy.
    assert main(["exec", trained["bam"], "--budget", "1625", "--task", ESSAY, "--fake", "echo", "--template", "star"]) == 0
    assert capsys.readouterr().out.startswith("template: star ")
    # A single task reports the template the policy picked for it.
    assert main(["exec", trained["bam"], "--budget", "1625", "--task", CODE, "--fake", "echo"]) == 0
    assert capsys.readouterr().out.startswith("template: linear ")


def test_a_policy_for_other_templates_is_refused(trained, capsys, tmp_path):
    other = policy_bam(tmp_path, topologies="linear, star")
    shutil.copytree(os.path.dirname(trained["checkpoint"]), tmp_path / "policies")
    assert main(["exec", other, "--task", ESSAY, "--fake", "echo"]) == 1
    err = capsys.readouterr().err
    assert "was trained for templates linear, star, feedback, planner, but the system has linear, star" in err
    assert main(["compile", other, "--task", ESSAY]) == 1
    assert "retrain it" in capsys.readouterr().err


def test_compile_task_without_a_policy_is_a_usage_error(capsys):
    assert main(["compile", GSM8K, "--task", ESSAY]) == 2
    assert "--task needs a system that selects by policy" in capsys.readouterr().err


def test_train_rejects_rows_of_templates_the_system_lacks(trained, tmp_path, capsys):
    bam = policy_bam(tmp_path, topologies="linear, star")
    code = main(["train", bam, "--data", trained["rows"], "-o", str(tmp_path / "p.msgpack"), "--embedding", "hashed"])
    assert code == 1
    assert "that the system does not have (it has linear, star)" in capsys.readouterr().err


def test_the_reward_block_is_read_into_the_system(write_bam):
    from bamasc.plan.compile import check_file

    path = write_bam(Path(GSM8K).read_text(encoding="utf-8").replace(
        "on_exhausted = best_so_far", "on_exhausted = best_so_far\n  reward { failure = -2  overflow = 5 }"))
    program, diagnostics, _ = check_file(path)
    assert not diagnostics
    reward = program.systems["gsm8k"].reward
    assert (reward.success, reward.failure, reward.overflow, reward.efficiency) == (1.0, -2.0, 5.0, 0.5)


def test_the_train_help_states_the_config_defaults():
    """The parser does not import train.py (jax), so its help repeats the defaults: they must agree."""
    import argparse

    from bamasc.cli.train import add_parser as add_train
    from bamasc.policy.train import TrainConfig

    parser = argparse.ArgumentParser()
    add_train(parser.add_subparsers())
    train = parser._subparsers._group_actions[0].choices["train"]
    helps = {action.dest: action.help for action in train._actions}
    for name in ("epochs", "seed", "holdout", "entropy", "learning_rate", "batch_size", "hidden", "validation", "patience"):
        stated = re.search(r"\(default ([0-9.]+)\)", helps[name]).group(1)
        assert float(stated) == getattr(TrainConfig(), name), name


def test_the_cli_and_the_policy_package_import_no_ml_library():
    """Building every parser (as `bamasc --help` does) and importing bamasc.policy load no jax, flax, optax or torch."""
    script = textwrap.dedent(
        """
        import json, sys
        import bamasc.cli, bamasc.policy
        bamasc.cli.build_parser()
        heavy = ("jax", "flax", "optax", "torch", "sentence_transformers", "transformers", "tokenizers")
        print(json.dumps(sorted(name for name in sys.modules if name.split(".")[0] in heavy)))
        """
    )
    env = {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1]) == []
