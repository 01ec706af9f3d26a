"""`bamasc bench` end to end on the offline fake and on replayed cassettes, and `bamasc score`."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from bamasc.cli import main
from bamasc.evaluate.bench import bench, percentile
from bamasc.evaluate.datasets import load
from bamasc.runtime.execute import ExecOptions
from bamasc.runtime.providers.base import Completion
from bamasc.runtime.providers.fake import FakeProvider
from bamasc.runtime.providers.replay import ReplayProvider
from tests.conftest import ROOT

FIXTURES = os.path.join(ROOT, "tests", "fixtures", "datasets")
EXAMPLES = os.path.join(ROOT, "examples")
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def fixture(name: str) -> str:
    return os.path.join(FIXTURES, name)


def check_png(path) -> None:
    """A real picture: PNG signature, the figure's size, and not a single flat colour."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    with open(path, "rb") as handle:
        data = handle.read()
    assert data[:8] == PNG_MAGIC and len(data) > 10_000
    pixels = plt.imread(str(path))
    assert pixels.shape[:2] == (500, 800)
    assert pixels[..., :3].std() > 0.05


def check_run(run: dict) -> None:
    """A run's figures agree with its items."""
    items = run["items"]
    assert run["tasks"] == len(items) and run["correct"] == sum(item["correct"] for item in items)
    assert run["accuracy"] == pytest.approx(run["correct"] / run["tasks"])
    costs = [item["cost"] for item in items]
    assert run["mean_cost"] == pytest.approx(sum(costs) / len(costs), abs=1e-5)
    assert run["p95_cost"] == pytest.approx(percentile(costs, 95), abs=1e-5)
    assert run["overruns"] == 0 and all(cost <= run["budget"] for cost in costs)
    assert sum(run["templates"].values()) == run["tasks"]
    assert run["max_cost"] <= run["bound"] + 1e-6  # the tasks fit the compile-time assumption


def test_bench_on_the_fake_provider_writes_table_json_and_plot(tmp_path, capsys):
    results, plot = tmp_path / "results.json", tmp_path / "pareto.png"
    args = [
        "bench", os.path.join(EXAMPLES, "gsm8k.bam"), "--dataset", fixture("gsm8k.jsonl"), "--budgets", "500,1625",
        "--baseline", "gsm8k_linear_nano", "--baseline", "gsm8k_star_nano", "--fake", "echo",
        "--concurrency", "3", "-o", str(results), "--plot", str(plot),
    ]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "gsm8k on gsm8k.jsonl (gsm8k, 6 tasks)" in out
    assert "accuracy" in out and "p95 µ$" in out and "gsm8k_star_nano (baseline)" in out
    data = json.loads(results.read_text())
    assert data["kind"] == "gsm8k" and data["system"] == "gsm8k" and data["tasks"] == 6
    runs = data["runs"]
    assert [(r["system"], r["budget"], r["baseline"]) for r in runs] == [
        ("gsm8k", 500, False), ("gsm8k", 1625, False), ("gsm8k_linear_nano", 1625, True), ("gsm8k_star_nano", 1625, True)
    ]
    for run in runs:
        check_run(run)
    assert runs[2]["models"] == ["gpt41_nano"] and runs[2]["templates"] == {"linear": 6}
    # The fake echoes the last number of its prompt: right exactly where the question ends with its answer.
    assert all({item["id"]: item["correct"] for item in run["items"]}["5"] for run in runs)
    assert runs[0]["mean_cost"] < runs[1]["mean_cost"]
    check_png(plot)


def test_bench_kind_follows_the_answer_kind_and_infeasible_budgets_are_rows(tmp_path, capsys):
    results = tmp_path / "math.json"
    args = ["bench", os.path.join(EXAMPLES, "math.bam"), "--dataset", fixture("math500.jsonl"), "--budgets", "100,1000",
            "--fake", "echo", "-o", str(results)]
    assert main(args) == 0
    assert "infeasible" in capsys.readouterr().out
    data = json.loads(results.read_text())
    assert data["kind"] == "math"
    assert data["runs"][0]["feasible"] is False and "no template" in data["runs"][0]["error"]
    check_run(data["runs"][1])


class Oracle(FakeProvider):
    """Answers every task with its reference (critics and planners as the fake does)."""

    def __init__(self, name: str, answers: list[tuple[str, str]]) -> None:
        super().__init__(name)
        self.answers = answers

    async def complete(self, messages, max_tokens, *, timeout, decoding=None, expect="text"):
        prompt = messages[-1].content
        if "CONCLUSION" not in prompt and "JSON list" not in prompt:
            for needle, reply in self.answers:
                if needle in prompt:
                    text = reply.encode()[:max_tokens].decode("utf-8", "ignore")
                    return Completion(text, self.count_prompt_tokens(messages), len(text.encode()), "stop")
        return await super().complete(messages, max_tokens, timeout=timeout)


def record_cassette(monkeypatch, cassette, path, dataset, system, budgets, baselines, answers) -> dict:
    """Run the benchmark once against the oracle, recording every call."""
    import bamasc.runtime.execute as execute

    def recording(program, system_name, options, models=None):
        return {
            name: ReplayProvider(name, str(cassette), inner=Oracle(name, answers), record=True)
            for name in program.systems[system_name].models
        }

    with monkeypatch.context() as patch:
        patch.setattr(execute, "make_providers", recording)
        return bench(path, dataset, system, budgets, baselines, ExecOptions(concurrency=4))


def test_bench_replays_a_cassette(tmp_path, monkeypatch, capsys):
    path = os.path.join(EXAMPLES, "gsm8k.bam")
    dataset = load(fixture("gsm8k.jsonl"), "gsm8k")
    cassette = tmp_path / "calls.jsonl"
    answers = [(item.prompt, f"Step by step.\n#### {item.answer}") for item in dataset.items]
    recorded = record_cassette(monkeypatch, cassette, path, dataset, "gsm8k", [875, 2000], ("gsm8k_linear_nano",), answers)
    assert cassette.stat().st_size > 0
    results, plot = tmp_path / "replayed.json", tmp_path / "replayed.png"
    args = ["bench", path, "--dataset", fixture("gsm8k.jsonl"), "--budgets", "875,2000", "--baseline", "gsm8k_linear_nano",
            "--cassette", str(cassette), "-o", str(results), "--plot", str(plot)]
    assert main(args) == 0
    assert "6/6 (100.0%)" in capsys.readouterr().out
    data = json.loads(results.read_text())
    for run, original in zip(data["runs"], recorded["runs"]):
        check_run(run)
        assert run["accuracy"] == 1.0
        assert run["mean_cost"] == pytest.approx(original["mean_cost"])  # replayed exactly as recorded
    check_png(plot)


def test_bench_on_mbpp_scores_code_in_the_sandbox(tmp_path, monkeypatch, capsys):
    path = os.path.join(EXAMPLES, "mbpp.bam")
    dataset = load(fixture("mbpp.jsonl"), "mbpp")
    dataset.items = dataset.items[:3]
    cassette = tmp_path / "calls.jsonl"
    answers = [(item.prompt, f"```python\n{item.answer}\n```") for item in dataset.items]
    record_cassette(monkeypatch, cassette, path, dataset, "mbpp", [1625], (), answers)
    results = tmp_path / "mbpp.json"
    args = ["bench", path, "--dataset", fixture("mbpp.jsonl"), "--limit", "3", "--budgets", "1625",
            "--cassette", str(cassette), "-o", str(results)]
    assert main(args) == 0
    (run,) = json.loads(results.read_text())["runs"]
    check_run(run)
    assert run["correct"] == 3
    # The fake's code answers nothing right.
    assert main(args[:-4] + ["--fake", "echo", "-o", str(results)]) == 0
    (run,) = json.loads(results.read_text())["runs"]
    assert run["correct"] == 0 and all(item["detail"].startswith(("failed", "error")) for item in run["items"])


def test_bench_usage_errors(tmp_path, capsys, write_bam):
    gsm8k = os.path.join(EXAMPLES, "gsm8k.bam")
    data = fixture("gsm8k.jsonl")
    assert main(["bench", gsm8k, "--dataset", data, "--baseline", "gsm8k", "--fake", "echo"]) == 2
    assert "must have one template and one model" in capsys.readouterr().err
    assert main(["bench", gsm8k, "--dataset", data, "--baseline", "nope", "--fake", "echo"]) == 2
    assert "no system 'nope'" in capsys.readouterr().err
    assert main(["bench", gsm8k, "--dataset", str(tmp_path / "missing.jsonl"), "--fake", "echo"]) == 2
    assert main(["bench", gsm8k, "--dataset", fixture("gsm8k_bad.jsonl"), "--fake", "echo"]) == 1
    assert "gsm8k_bad.jsonl:2: field 'answer'" in capsys.readouterr().err
    text = write_bam(
        'model m { provider = fake  name = "m"  price { input = 0  output = 0 }  tier = 1 }\n'
        'role R { max_output = 16  prompt = "{{task}}" }\n'
        "topology t { slot r : R [1..1]  flow { answer r(task) } }\n"
        "system s { models = [m]  topologies = [t]  budget = 100 }\n"
    )
    assert main(["bench", text, "--dataset", data]) == 2
    assert "give --kind" in capsys.readouterr().err
    assert main(["bench", text, "--dataset", data, "--kind", "gsm8k", "--budgets", "50"]) == 0


# ---------------------------------------------------------------- score


def write_lines(path, rows) -> str:
    path.write_text("".join((row if isinstance(row, str) else json.dumps(row)) + "\n" for row in rows))
    return str(path)


def test_score_gsm8k_predictions(tmp_path, capsys):
    predictions = write_lines(
        tmp_path / "p.jsonl",
        [
            {"id": 1, "prediction": "She has 12 left.\n#### 12"},
            {"prediction": "The total is 110 pages."},  # line 2: the second dataset row
            {"id": "3", "prediction": "#### 24"},
            {"task_id": 4, "prediction": 150},
            {"id": 99, "prediction": "#### 1"},
        ],
    )
    verdicts = tmp_path / "scored.jsonl"
    assert main(["score", "--dataset", fixture("gsm8k.jsonl"), "--kind", "gsm8k", "--predictions", predictions,
                 "-o", str(verdicts)]) == 0
    captured = capsys.readouterr()
    assert captured.out.rstrip().splitlines()[-1] == "accuracy: 3/6"
    assert "1 prediction with an id the dataset does not have" in captured.err
    assert "no prediction for 2 items" in captured.err
    rows = [json.loads(line) for line in verdicts.read_text().splitlines()]
    assert [(r["id"], r["correct"]) for r in rows] == [
        ("1", True), ("2", True), ("3", False), ("4", True), ("5", False), ("6", False)
    ]
    assert rows[2]["prediction"] == "24" and rows[2]["reference"] == "23" and rows[4]["detail"] == "no prediction"


def test_score_mbpp_and_math_predictions(tmp_path, capsys):
    items = load(fixture("mbpp.jsonl"), "mbpp").items
    predictions = write_lines(
        tmp_path / "code.jsonl",
        [
            {"task_id": 11, "prediction": f"```python\n{items[0].answer}\n```"},
            {"task_id": 12, "prediction": items[1].answer},
            {"task_id": 13, "prediction": "def is_palindrome(n):\n    return True"},
            {"task_id": 14, "prediction": "while True:\n    pass"},
        ],
    )
    verdicts = tmp_path / "code-scored.jsonl"
    assert main(["score", "--dataset", fixture("mbpp.jsonl"), "--kind", "mbpp", "--predictions", predictions,
                 "--code-timeout", "1", "-o", str(verdicts)]) == 0
    assert capsys.readouterr().out.rstrip().endswith("accuracy: 2/6")
    details = [json.loads(line)["detail"] for line in verdicts.read_text().splitlines()]
    assert details[0] == "passed" and details[2].startswith("failed") and details[3].startswith("timeout")
    assert main(["score", "--dataset", fixture("mbpp.jsonl"), "--kind", "mbpp", "--split", "test",
                 "--predictions", predictions, "--code-timeout", "1"]) == 0
    assert capsys.readouterr().out.rstrip().endswith("accuracy: 2/5")
    answers = write_lines(
        tmp_path / "math.jsonl",
        [
            {"id": "algebra/1.json", "prediction": "So $x = \\boxed{0.5}$."},
            {"id": "algebra/2.json", "prediction": "\\boxed{3\\sqrt{2}}"},
            {"id": "geometry/3.json", "prediction": "The hypotenuse is \\boxed{10\\text{ units}}."},
        ],
    )
    assert main(["score", "--dataset", fixture("math"), "--kind", "math", "--predictions", answers]) == 0
    assert capsys.readouterr().out.rstrip().endswith("accuracy: 2/3")


def test_score_bad_rows_and_missing_files(tmp_path, capsys):
    predictions = write_lines(tmp_path / "p.jsonl", [{"id": 1, "prediction": "#### 12"}, "{broken", {"id": 2}])
    assert main(["score", "--dataset", fixture("gsm8k.jsonl"), "--kind", "gsm8k", "--predictions", predictions]) == 1
    assert "p.jsonl:2: not JSON" in capsys.readouterr().err
    assert main(["score", "--dataset", fixture("gsm8k.jsonl"), "--kind", "gsm8k", "--predictions", predictions,
                 "--skip-bad-rows"]) == 0
    captured = capsys.readouterr()
    assert "p.jsonl:3: field 'prediction' is missing" in captured.err
    assert captured.out.rstrip().endswith("accuracy: 1/6")
    assert main(["score", "--dataset", str(tmp_path / "none.jsonl"), "--kind", "gsm8k", "--predictions", predictions]) == 2
    assert main(["score", "--dataset", fixture("gsm8k.jsonl"), "--kind", "gsm8k", "--predictions", "nope.jsonl"]) == 2


def test_the_cli_loads_no_heavy_module_for_these_commands():
    code = (
        "import sys\n"
        "from bamasc.cli import build_parser\n"
        "build_parser('bench'); build_parser('score')\n"
        "heavy = ('sympy', 'matplotlib', 'highspy', 'openai', 'subprocess', 'bamasc.evaluate.sandbox')\n"
        "print(sorted(name for name in heavy if name in sys.modules))\n"
    )
    found = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert found.stdout.strip() == "[]"


def test_bench_on_mbpp_without_a_jail_refuses_before_any_call_unless_asked(tmp_path):
    import shutil

    if shutil.which("unshare") is None or subprocess.run(["unshare", "-U", "true"], capture_output=True).returncode:
        pytest.skip("needs user namespaces, to make a machine where no jail can be built")
    results = tmp_path / "results.json"
    command = ["unshare", "-U", sys.executable, "-m", "bamasc.cli", "bench", os.path.join(EXAMPLES, "mbpp.bam"),
               "--dataset", fixture("mbpp.jsonl"), "--fake", "echo", "--limit", "2", "-o", str(results)]
    refused = subprocess.run(command, capture_output=True, text=True, cwd=ROOT)
    assert refused.returncode == 1 and "Traceback" not in refused.stderr
    assert "cannot build its namespaces jail" in refused.stderr and "--unsafe-hooks" in refused.stderr
    assert "ran mbpp" not in refused.stderr and not results.exists()  # no task ran, nothing was paid for
    done = subprocess.run(command + ["--unsafe-hooks"], capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert "warning: --unsafe-hooks" in done.stderr and results.exists()
