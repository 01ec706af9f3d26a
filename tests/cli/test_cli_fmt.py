"""`bamasc fmt` on the command line: in-place rewrites, --check and --diff, parse errors among good files, and imports."""

from __future__ import annotations

import io
import json
import os
import stat
import subprocess
import sys
import textwrap

import pytest

from bamasc.cli import main
from bamasc.cli.report import EXIT_ERRORS, EXIT_OK
from tests.conftest import EXAMPLES, ROOT, STDLIB

UGLY = "model m{\ntier=1 // strongest\n  price {input=0.1 output=0.4}}\n"
PRETTY = "model m {\n  tier  = 1  // strongest\n  price { input = 0.1  output = 0.4 }\n}\n"
BROKEN = "model m {\n  tier = \n}\n"


def fmt(capsys, *args: str) -> tuple[int, str, str]:
    code = main(["fmt", *args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.fixture
def files(tmp_path):
    def write(**texts: str) -> dict[str, str]:
        paths = {}
        for name, text in texts.items():
            path = tmp_path / f"{name}.bam"
            path.write_text(text, encoding="utf-8")
            paths[name] = str(path)
        return paths

    return write


def read(path: str) -> str:
    with open(path, encoding="utf-8") as handle:
        return handle.read()


def test_rewrites_in_place_and_leaves_formatted_files_alone(capsys, files, tmp_path):
    paths = files(ugly=UGLY, pretty=PRETTY)
    before = os.stat(paths["pretty"]).st_mtime_ns
    os.chmod(paths["ugly"], 0o640)
    code, out, err = fmt(capsys, paths["ugly"], paths["pretty"])
    assert (code, out) == (EXIT_OK, "")
    assert read(paths["ugly"]) == PRETTY
    assert stat.S_IMODE(os.stat(paths["ugly"]).st_mode) == 0o640
    assert os.stat(paths["pretty"]).st_mtime_ns == before, "an unchanged file is not rewritten"
    assert "2 files: 1 reformatted, 1 unchanged, 0 errors" in err
    assert sorted(os.listdir(tmp_path)) == ["pretty.bam", "ugly.bam"], "no temporary file is left"


def test_check_exits_1_and_lists_the_files_that_would_change(capsys, files):
    paths = files(ugly=UGLY, pretty=PRETTY)
    code, out, err = fmt(capsys, "--check", paths["ugly"], paths["pretty"])
    assert code == EXIT_ERRORS
    assert out == f"would reformat {paths['ugly']}\n"
    assert read(paths["ugly"]) == UGLY, "--check writes nothing"
    assert "1 would be reformatted, 1 unchanged" in err


def test_check_exits_0_when_nothing_would_change(capsys, files):
    paths = files(pretty=PRETTY)
    assert fmt(capsys, "--check", paths["pretty"])[:2] == (EXIT_OK, "")


def test_diff_prints_a_unified_diff_and_writes_nothing(capsys, files):
    paths = files(ugly=UGLY)
    code, out, _ = fmt(capsys, "--diff", paths["ugly"])
    assert code == EXIT_OK
    assert out.startswith(f"--- {paths['ugly']}\n+++ {paths['ugly']} (formatted)\n@@ ")
    assert "-tier=1 // strongest\n" in out and "+  tier  = 1  // strongest\n" in out
    assert read(paths["ugly"]) == UGLY
    assert fmt(capsys, "--check", "--diff", paths["ugly"])[0] == EXIT_ERRORS


def test_a_parse_error_is_reported_like_lint_and_the_other_files_are_still_formatted(capsys, files):
    paths = files(bad=BROKEN, ugly=UGLY)
    code, out, err = fmt(capsys, paths["bad"], paths["ugly"])
    assert code == EXIT_ERRORS
    assert out == ""
    assert f"{paths['bad']}:3:1: error[BAM001]: unexpected '}}'" in err
    assert " 3 | }\n" in err, "the source line is shown, as lint shows it"
    assert read(paths["bad"]) == BROKEN, "a file that does not parse is never touched"
    assert read(paths["ugly"]) == PRETTY
    lint_code = main(["lint", paths["bad"]])
    lint_out = capsys.readouterr().out
    assert lint_code == code
    assert lint_out.split("\n")[0] in err


def test_missing_and_non_utf8_files_are_diagnostics(capsys, tmp_path, files):
    latin = tmp_path / "latin.bam"
    latin.write_bytes("// caf\u00e9\n".encode("latin-1"))
    paths = files(pretty=PRETTY)
    code, _, err = fmt(capsys, str(tmp_path / "nope.bam"), str(latin), paths["pretty"])
    assert code == EXIT_ERRORS
    assert "error[BAM006]: file" in err and "not found" in err
    assert f"{latin}:1:7: error[BAM005]: file is not valid UTF-8" in err
    assert latin.read_bytes() == "// caf\u00e9\n".encode("latin-1")


def test_a_write_failure_keeps_the_file_and_removes_the_copy(capsys, files, tmp_path, monkeypatch):
    paths = files(ugly=UGLY, other=UGLY)

    def full_disk(source, target):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", full_disk)
    code, _, err = fmt(capsys, paths["ugly"], paths["other"])
    assert code == EXIT_ERRORS
    assert f"bamasc: error: cannot write {paths['ugly']}: No space left on device" in err
    assert f"cannot write {paths['other']}" in err, "the next file is still tried"
    assert read(paths["ugly"]) == UGLY
    assert sorted(os.listdir(tmp_path)) == ["other.bam", "ugly.bam"], "the temporary copy is removed"
    assert "0 reformatted" in err


def test_a_symbolic_link_stays_a_link(capsys, files, tmp_path):
    paths = files(ugly=UGLY)
    link = tmp_path / "link.bam"
    link.symlink_to(paths["ugly"])
    assert fmt(capsys, str(link))[0] == EXIT_OK
    assert link.is_symlink() and read(paths["ugly"]) == PRETTY


def test_standard_input_to_standard_output(capsys, monkeypatch):
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(UGLY.encode())))
    code, out, _ = fmt(capsys, "-")
    assert (code, out) == (EXIT_OK, PRETTY)


def test_a_byte_order_mark_counts_as_a_change(capsys, tmp_path):
    path = tmp_path / "bom.bam"
    path.write_bytes(b"\xef\xbb\xbf" + PRETTY.encode())
    assert fmt(capsys, "--check", str(path))[0] == EXIT_ERRORS
    assert fmt(capsys, str(path))[0] == EXIT_OK
    assert path.read_bytes() == PRETTY.encode()


def test_the_shipped_files_lint_the_same_after_formatting(capsys, tmp_path):
    for path in EXAMPLES + STDLIB:
        copy = tmp_path / os.path.basename(path)
        copy.write_bytes(open(path, "rb").read())
    assert fmt(capsys, *sorted(str(p) for p in tmp_path.iterdir()))[0] == EXIT_OK
    assert fmt(capsys, "--check", *sorted(str(p) for p in tmp_path.iterdir()))[0] == EXIT_OK
    assert main(["lint", *sorted(str(p) for p in tmp_path.iterdir())]) == EXIT_OK


def test_the_pre_commit_hook_runs_fmt_check():
    with open(os.path.join(ROOT, ".pre-commit-hooks.yaml"), encoding="utf-8") as handle:
        text = handle.read()
    assert "- id: bamasc-fmt\n" in text
    assert "  entry: bamasc fmt --check\n" in text


# ---------------------------------------------------------------- what each command imports

def _modules_after(command: list[str]) -> list[str]:
    script = textwrap.dedent(
        f"""
        import contextlib, io, json, sys
        import bamasc.cli
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            bamasc.cli.main({command!r})
        print(json.dumps(sorted(sys.modules)))
        """
    )
    env = {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}
    completed = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert completed.returncode == 0, completed.stderr
    return json.loads(completed.stdout.strip().splitlines()[-1])


def test_lint_does_not_import_the_formatter():
    loaded = _modules_after(["lint", EXAMPLES[0]])
    assert "bamasc.fmt" not in loaded and "bamasc.cli.fmt" not in loaded


def test_fmt_imports_only_the_syntax_stage():
    loaded = _modules_after(["fmt", "--check", *EXAMPLES])
    assert "bamasc.fmt" in loaded
    later = ("bamasc.check", "bamasc.ir", "bamasc.optimize", "bamasc.plan", "bamasc.runtime", "bamasc.program", "lark")
    assert [name for name in loaded if name.startswith(later)] == []
