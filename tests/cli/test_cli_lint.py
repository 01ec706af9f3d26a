"""`bamasc lint` on the command line: exit codes, the four output formats, --strict, and a light start-up."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap

import pytest

from bamasc.cli import main
from bamasc.cli.report import EXIT_ERRORS, EXIT_OK, EXIT_USAGE
from bamasc.diagnostics import CODES
from tests.conftest import EXAMPLES, ROOT, STDLIB

FIXTURES = os.path.join(ROOT, "tests", "fixtures", "lint")
CLEAN = EXAMPLES[0]
WARNINGS_ONLY = os.path.join(FIXTURES, "slot_unused.bam")  # one BAM304 warning
ERRORS = os.path.join(FIXTURES, "placeholder_malformed.bam")  # three BAM206 errors
MIXED = os.path.join(FIXTURES, "unknown_topology.bam")  # two BAM104 errors


def lint(capsys, *args: str) -> tuple[int, str, str]:
    code = main(["lint", *args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


# ---------------------------------------------------------------- exit codes


@pytest.mark.parametrize("path", EXAMPLES + STDLIB, ids=os.path.basename)
def test_clean_files_exit_0(capsys, path):
    code, out, err = lint(capsys, path)
    assert code == EXIT_OK == 0
    assert out == ""
    assert "0 errors, 0 warnings" in err


def test_warnings_alone_exit_0(capsys):
    code, out, err = lint(capsys, WARNINGS_ONLY)
    assert code == 0
    assert "warning[BAM304]" in out
    assert "1 file checked: 0 errors, 1 warning" in err


def test_errors_exit_1(capsys):
    code, out, err = lint(capsys, ERRORS)
    assert code == EXIT_ERRORS == 1
    assert out.count("error[BAM206]") == 3
    assert "3 errors" in err


def test_one_bad_file_among_clean_ones_exits_1(capsys):
    code, out, err = lint(capsys, CLEAN, ERRORS, *STDLIB)
    assert code == 1
    assert f"{2 + len(STDLIB)} files checked: 3 errors, 0 warnings" in err


def test_missing_file_is_bam006_and_exits_1(capsys, tmp_path):
    missing = str(tmp_path / "absent.bam")
    code, out, err = lint(capsys, CLEAN, missing)
    assert code == EXIT_ERRORS == 1
    assert f"{missing}:1:1: error[BAM006]: file '{missing}' not found" in out
    assert "2 files checked: 1 error, 0 warnings" in err


def test_directory_is_bam006_with_a_hint(capsys):
    code, out, _ = lint(capsys, FIXTURES)
    assert code == 1
    assert "error[BAM006]" in out and "is a directory" in out
    assert f"help: pass its .bam files, e.g. {FIXTURES}/*.bam" in out


@pytest.mark.parametrize(
    "args",
    [["--format", "xml", CLEAN], ["--bogus", CLEAN], [], ["--max-diagnostics", "many", CLEAN]],
    ids=["bad-format", "unknown-flag", "no-files", "bad-number"],
)
def test_bad_arguments_exit_2(capsys, args):
    with pytest.raises(SystemExit) as exit_:
        main(["lint", *args])
    assert exit_.value.code == 2
    assert "bamasc: error:" in capsys.readouterr().err


def test_strict_turns_warnings_into_exit_1(capsys):
    assert lint(capsys, "--strict", WARNINGS_ONLY)[0] == 1
    assert lint(capsys, "--strict", CLEAN)[0] == 0
    assert lint(capsys, "--strict", "--format", "json", WARNINGS_ONLY)[0] == 1


def test_max_diagnostics_caps_the_text_output(capsys):
    code, out, _ = lint(capsys, "--max-diagnostics", "1", ERRORS)
    assert code == 1
    assert out.count("error[BAM206]") == 1
    assert "... and 2 more" in out


# ---------------------------------------------------------------- json


def test_json_has_counts_and_positions(capsys):
    code, out, _ = lint(capsys, "--format", "json", ERRORS, WARNINGS_ONLY)
    report = json.loads(out)
    assert code == 1
    assert report["files"] == [ERRORS, WARNINGS_ONLY]
    assert (report["errors"], report["warnings"]) == (3, 1)
    assert [(d["code"], d["severity"], d["line"], d["column"]) for d in report["diagnostics"]] == [
        ("BAM206", "error", 7, 24),
        ("BAM206", "error", 8, 21),
        ("BAM206", "error", 8, 39),
        ("BAM304", "warning", 4, 8),
    ]
    for diagnostic in report["diagnostics"]:
        assert diagnostic["name"] == CODES[diagnostic["code"]][0]
        assert diagnostic["message"] and diagnostic["file"]


def test_json_of_a_clean_file(capsys):
    code, out, _ = lint(capsys, "--format", "json", CLEAN)
    report = json.loads(out)
    assert code == 0
    assert (report["errors"], report["warnings"], report["diagnostics"]) == (0, 0, [])


# ---------------------------------------------------------------- sarif


def test_sarif_has_what_github_code_scanning_reads(capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    files = [os.path.relpath(p, ROOT) for p in (ERRORS, WARNINGS_ONLY, MIXED)]
    code, out, _ = lint(capsys, "--format", "sarif", *files)
    log = json.loads(out)

    assert code == 1
    assert log["version"] == "2.1.0"
    assert log["$schema"].startswith("https://") and "sarif" in log["$schema"]
    run = log["runs"][0]
    driver = run["tool"]["driver"]
    assert driver["name"] == "bamasc"
    rule_ids = [rule["id"] for rule in driver["rules"]]
    assert all(rule_ids) and len(set(rule_ids)) == len(rule_ids)
    assert set(rule_ids) == set(CODES)

    results = run["results"]
    assert [r["ruleId"] for r in results] == ["BAM206", "BAM206", "BAM206", "BAM304", "BAM104", "BAM104"]
    for result in results:
        assert result["ruleId"] in rule_ids
        if "ruleIndex" in result:
            assert driver["rules"][result["ruleIndex"]]["id"] == result["ruleId"]
        assert result["level"] in ("error", "warning", "note")
        assert result["message"]["text"]
        location = result["locations"][0]["physicalLocation"]
        uri = location["artifactLocation"]["uri"]
        assert uri in [f.replace(os.sep, "/") for f in files], "a repository-relative URI"
        assert location["region"]["startLine"] >= 1 and location["region"]["startColumn"] >= 1
    assert [r["level"] for r in results] == ["error"] * 3 + ["warning"] + ["error"] * 2
    first = results[0]["locations"][0]["physicalLocation"]["region"]
    assert (first["startLine"], first["startColumn"]) == (7, 24)


def test_sarif_of_a_clean_file_has_no_results(capsys):
    code, out, _ = lint(capsys, "--format", "sarif", CLEAN)
    assert code == 0
    assert json.loads(out)["runs"][0]["results"] == []


# ---------------------------------------------------------------- github

_ANNOTATION = re.compile(
    r"::(?P<level>error|warning) file=(?P<file>[^,]*),line=(?P<line>\d+),col=(?P<col>\d+),"
    r"endLine=\d+,endColumn=\d+,title=(?P<title>[^:]*)::(?P<message>.*)"
)


def test_github_annotations_escape_newlines_and_percent(capsys, tmp_path):
    # A '%' in the message (from the source), a hint after a newline, and a ',' and ':' in the file name.
    path = tmp_path / "roles,v2:draft.bam"
    path.write_text('role Executor {\n  prompt = "Solve {{50% of it}}"\n}\n', encoding="utf-8")

    code, out, _ = lint(capsys, "--format", "github", str(path))

    assert code == 1
    lines = out.splitlines()
    assert len(lines) == 1, "one annotation per line, newlines escaped"
    annotation = _ANNOTATION.fullmatch(lines[0])
    assert annotation, lines[0]
    assert annotation["level"] == "error"
    assert annotation["file"] == str(path).replace("%", "%25").replace(":", "%3A").replace(",", "%2C")
    assert (annotation["line"], annotation["col"]) == ("2", "19")
    assert annotation["title"] == "BAM206 unknown-placeholder"
    message = annotation["message"]
    assert "{{50%25 of it}}" in message and "50% " not in message
    assert "%0A" in message  # the hint, on its own line once GitHub unescapes it
    assert "\r" not in out


def test_github_format_levels_and_positions(capsys):
    code, out, _ = lint(capsys, "--format", "github", WARNINGS_ONLY, ERRORS)
    found = [_ANNOTATION.fullmatch(line) for line in out.splitlines()]
    assert code == 1 and all(found)
    assert [(m["level"], m["line"], m["col"]) for m in found] == [
        ("warning", "4", "8"),
        ("error", "7", "24"),
        ("error", "8", "21"),
        ("error", "8", "39"),
    ]


def test_github_format_prints_nothing_for_clean_files(capsys):
    assert lint(capsys, "--format", "github", CLEAN) == (0, "", "")


# ---------------------------------------------------------------- start-up

HEAVY_MODULES = (
    "jax", "flax", "optax", "torch", "sentence_transformers", "highspy", "networkx", "lark",
    # The providers' SDKs and their HTTP stack belong to `bamasc exec`.
    "openai", "anthropic", "aiohttp",
    # Solvers and plotting belong to `bamasc compile`, too.
    "pulp", "matplotlib",
    # The progress bar belongs to the long runs (exec --dataset, collect, bench, reproduce) on a terminal.
    "tqdm",
    # The OpenTelemetry SDK and exporter (the otel extra) belong to `trace export` and `exec --otlp`.
    "opentelemetry",
    # The language server's protocol libraries (the lsp extra) belong to `bamasc lsp`.
    "pygls", "lsprotocol", "cattrs",
    # Ray (the ray extra) belongs to `exec --engine ray`.
    "ray",
    # Starlette and uvicorn (the serve extra) belong to `bamasc serve`.
    "starlette", "uvicorn",
    # Prometheus's client (serve and proxy extras) belongs to their /metrics.
    "prometheus_client",
    # The MCP SDK (the mcp extra) belongs to a run whose tools include an MCP server.
    "mcp", "mcp_types",
    # Plotly (the report extra) belongs to `bamasc report` and `/ui`.
    "plotly",
)


def test_lint_loads_no_heavy_module():
    """A fresh interpreter imports the CLI and lints every example, stdlib file and fixture."""
    files = EXAMPLES + STDLIB + sorted(os.path.join(FIXTURES, f) for f in os.listdir(FIXTURES) if f.endswith(".bam"))
    script = textwrap.dedent(
        f"""
        import contextlib, io, json, sys
        import bamasc.cli
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            code = bamasc.cli.main(["lint", *{files!r}])
        heavy = {HEAVY_MODULES!r}
        loaded = sorted(name for name in sys.modules if name.split(".")[0] in heavy)
        print(json.dumps({{"code": code, "loaded": loaded}}))
        """
    )
    env = {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}
    completed = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert completed.returncode == 0, completed.stderr
    outcome = json.loads(completed.stdout.strip().splitlines()[-1])
    assert outcome["code"] == 1, "the fixtures have errors, so the run must report them"
    assert outcome["loaded"] == []
