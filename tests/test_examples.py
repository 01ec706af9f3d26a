"""The shipped examples and stdlib templates lint clean, and the package carries its data."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from bamasc.lint import lint_paths
from tests.conftest import EXAMPLES, ROOT, STDLIB


@pytest.mark.parametrize("path", EXAMPLES + STDLIB, ids=os.path.basename)
def test_file_lints_clean(path):
    result = lint_paths([path])
    assert [(d.code, str(d.span), d.message) for d in result.diagnostics] == []


def test_paper_setups_are_present():
    names = {os.path.basename(p) for p in EXAMPLES}
    assert {"gsm8k.bam", "mbpp.bam", "math.bam"} <= names
    assert {os.path.basename(p) for p in STDLIB} == {"linear.bam", "star.bam", "feedback.bam", "planner.bam"}


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """The wheel built from the checkout, installed into a fresh environment: (wheel's names, its python, env)."""
    tmp_path = tmp_path_factory.mktemp("installed")
    # Without PYTHONPATH: pip would find the checkout there and skip the install.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    wheels = tmp_path / "wheels"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(wheels), ROOT],
        check=True,
        cwd=tmp_path,
        env=env,
    )
    (wheel,) = wheels.glob("bamasc-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    env_dir = tmp_path / "env"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(env_dir)], check=True, env=env)
    python = env_dir / "bin" / "python"
    subprocess.run([str(python), "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(wheel)], check=True, env=env)
    # The base dependency the examples' catalog() prices need comes from this environment.
    import genai_prices

    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True, env=env).stdout.strip()
    Path(site, "base-dependencies.pth").write_text(os.path.dirname(os.path.dirname(genai_prices.__file__)) + "\n")
    return names, python, env


def test_a_non_editable_install_finds_grammar_and_stdlib(installed, tmp_path):
    """Build the wheel, install it into a fresh environment, lint from another directory."""
    names, python, env = installed
    for needed in ("bamasc/grammars/bam.lark", "bamasc/syntax/_tables.py", "bamasc/stdlib_topologies/planner.bam",
                   "bamasc/py.typed"):  # py.typed: type checkers read the public API's annotations
        assert needed in names
    # Every subpackage of the checkout ships (pyproject lists them by hand).
    for folder, _, files in os.walk(os.path.join(ROOT, "bamasc")):
        if "__init__.py" in files:
            package = os.path.relpath(folder, ROOT).replace(os.sep, "/")
            assert f"{package}/__init__.py" in names, f"{package} is missing from the wheel"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "app.bam").write_text(Path(EXAMPLES[0]).read_text(encoding="utf-8"), encoding="utf-8")
    run = subprocess.run(
        [str(python), "-c", "import bamasc, sys; from bamasc.cli import main; print(bamasc.__file__); sys.exit(main(['lint', 'app.bam']))"],
        cwd=elsewhere,
        capture_output=True,
        text=True,
        env=env,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert str(python.parent.parent) in run.stdout  # the installed copy ran, not the checkout
    assert "0 errors" in run.stderr


@pytest.mark.skipif(importlib.util.find_spec("mypy") is None, reason="mypy is not installed")
def test_a_typed_script_passes_mypy_strict_against_a_normal_install(installed, tmp_path):
    """A user's typed script, checked from another folder against the installed wheel (not the checkout): the
    package and its py.typed are found. (tests/api/test_typed.py does the same for an editable install.)"""
    _, python, env = installed
    script = tmp_path / "script.py"
    script.write_text(Path(ROOT, "tests", "api", "typed_example.py").read_text(encoding="utf-8"), encoding="utf-8")
    done = subprocess.run([sys.executable, "-m", "mypy", "--strict", "--no-incremental", "--follow-imports=silent",
                           "--python-executable", str(python), "script.py"],
                          cwd=tmp_path, capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Success: no issues found" in done.stdout


def test_readme_example_lints_clean(tmp_path):
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as handle:
        readme = handle.read()
    blocks = readme.split("```bam\n")[1:]
    assert blocks, "the README shows a .bam example"
    for index, block in enumerate(blocks):
        path = tmp_path / f"readme{index}.bam"
        path.write_text(block.split("```", 1)[0], encoding="utf-8")
        assert lint_paths([str(path)]).diagnostics == []
