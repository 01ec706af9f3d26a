"""Every `--format` of `bamasc lint` stays valid when a file cannot be read, and unwritable outputs are usage errors."""

from __future__ import annotations

import json
import os
import re

import pytest

from bamasc.cli import main
from bamasc.cli.report import EXIT_ERRORS, EXIT_USAGE
from tests.conftest import EXAMPLES, ROOT

# A GitHub workflow command: `::level key=value,...::message`, with no raw newline in it.
_ANNOTATION = re.compile(r"::(error|warning) file=[^,:]*,line=\d+,col=\d+,endLine=\d+,endColumn=\d+,title=[^:]*::[^\n]*")


def _unreadable_cases(tmp_path):
    missing = tmp_path / "absent.bam"
    folder = tmp_path / "pools"
    folder.mkdir()
    not_utf8 = tmp_path / "latin1.bam"
    not_utf8.write_bytes("// café\n".encode("latin-1"))
    return {"missing": (missing, "BAM006"), "directory": (folder, "BAM006"), "not-utf8": (not_utf8, "BAM005")}


@pytest.mark.parametrize("case", ["missing", "directory", "not-utf8"])
@pytest.mark.parametrize("output", ["text", "json", "sarif", "github"])
def test_unreadable_input_is_a_diagnostic_in_every_format(capsys, tmp_path, case, output):
    path, code_expected = _unreadable_cases(tmp_path)[case]
    code = main(["lint", "--format", output, EXAMPLES[0], str(path)])
    out = capsys.readouterr().out

    assert code == EXIT_ERRORS
    if output == "json":
        report = json.loads(out)
        assert [d["code"] for d in report["diagnostics"]] == [code_expected]
        assert report["diagnostics"][0]["file"] == str(path)
    elif output == "sarif":
        log = json.loads(out)
        (result,) = log["runs"][0]["results"]
        assert result["ruleId"] == code_expected and result["level"] == "error"
        assert result["locations"][0]["physicalLocation"]["artifactLocation"]["uri"]
    elif output == "github":
        (line,) = out.splitlines()
        assert _ANNOTATION.fullmatch(line) and f"title={code_expected} " in line
    else:
        assert f"error[{code_expected}]" in out


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0, reason="root reads any file")
def test_unreadable_file_is_bam006(capsys, tmp_path):
    locked = tmp_path / "locked.bam"
    locked.write_text("model m {}\n", encoding="utf-8")
    locked.chmod(0)
    code = main(["lint", "--format", "json", str(locked)])
    report = json.loads(capsys.readouterr().out)
    assert code == EXIT_ERRORS
    assert [d["code"] for d in report["diagnostics"]] == ["BAM006"]


# ---------------------------------------------------------------- unwritable outputs

GSM8K = os.path.join(ROOT, "examples", "gsm8k.bam")
DATASET = os.path.join(ROOT, "tests", "fixtures", "datasets", "gsm8k.jsonl")


@pytest.fixture
def plan(tmp_path, capsys):
    path = tmp_path / "plan.json"
    assert main(["compile", GSM8K, "-o", str(path)]) == 0
    capsys.readouterr()
    return str(path)


def _usage_error(capsys, argv: list[str], path: str) -> str:
    code = main(argv)
    err = capsys.readouterr().err
    assert code == EXIT_USAGE, err
    assert f"cannot write the" in err and path in err, err
    assert "Traceback" not in err
    return err


@pytest.mark.parametrize("format_", ["mermaid", "dot", "png"])
def test_graph_to_a_missing_folder(capsys, tmp_path, plan, format_):
    target = str(tmp_path / "no such folder" / "graph.out")
    err = _usage_error(capsys, ["graph", plan, "--format", format_, "-o", target], target)
    assert "No such file or directory" in err


def test_graph_to_a_directory(capsys, tmp_path, plan):
    _usage_error(capsys, ["graph", plan, "-o", str(tmp_path)], str(tmp_path))


def test_compile_plot_checked_before_the_sweep(capsys, tmp_path):
    target = str(tmp_path / "missing" / "sweep.png")
    err = _usage_error(capsys, ["compile", GSM8K, "--sweep", "500:1000:250", "--plot", target], target)
    assert "budget" not in capsys.readouterr().out  # no sweep table: nothing ran


def test_score_output_checked_before_scoring(capsys, tmp_path):
    predictions = tmp_path / "p.jsonl"
    predictions.write_text('{"id": 1, "prediction": "#### 12"}\n', encoding="utf-8")
    target = str(tmp_path / "missing" / "verdicts.jsonl")
    _usage_error(capsys, ["score", "--dataset", DATASET, "--kind", "gsm8k", "--predictions", str(predictions),
                          "-o", target], target)


@pytest.mark.parametrize("flag", ["-o", "--plot"])
def test_bench_output_checked_before_any_task_runs(capsys, tmp_path, flag):
    target = str(tmp_path / "missing" / "out")
    err = _usage_error(capsys, ["bench", GSM8K, "--dataset", DATASET, "--budgets", "500", "--fake", "echo",
                                flag, target], target)
    assert "ran " not in err


def test_an_existing_output_keeps_its_contents_until_written(capsys, tmp_path, plan):
    target = tmp_path / "graph.mmd"
    target.write_text("old", encoding="utf-8")
    from bamasc.cli.inputs import writable
    from bamasc.cli.report import Report

    assert writable(Report(), str(target), "the graph")
    assert target.read_text(encoding="utf-8") == "old"
    missing = tmp_path / "new.mmd"
    assert writable(Report(), str(missing), "the graph") and not missing.exists()


def test_bench_keeps_the_runs_done_when_interrupted(capsys, tmp_path, monkeypatch):
    from bamasc.evaluate import bench as bench_module

    real_run = bench_module.bench_run
    calls = []

    def run_then_interrupt(*args, **kwargs):
        calls.append(args)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real_run(*args, **kwargs)

    monkeypatch.setattr(bench_module, "bench_run", run_then_interrupt)
    results = tmp_path / "results.json"
    code = main(["bench", GSM8K, "--dataset", DATASET, "--budgets", "500,1625", "--fake", "echo", "-o", str(results)])
    err = capsys.readouterr().err
    assert code == EXIT_ERRORS
    assert f"the runs finished so far are in {results}" in err
    data = json.loads(results.read_text(encoding="utf-8"))
    assert [(run["system"], run["budget"]) for run in data["runs"]] == [("gsm8k", 500)]
    assert not os.path.exists(f"{results}.tmp")
