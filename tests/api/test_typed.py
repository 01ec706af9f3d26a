"""The public API is typed: a user's script passes `mypy --strict`, misuse is caught, and nothing public returns a private type."""

from __future__ import annotations

import importlib.util
import inspect
import os
import subprocess
import sys
import sysconfig
import textwrap
import typing

import pytest

import bamasc
from tests.conftest import ROOT

needs_mypy = pytest.mark.skipif(importlib.util.find_spec("mypy") is None, reason="mypy is not installed")


def _mypy(*paths: str) -> subprocess.CompletedProcess:
    # Silent imports: bamasc's internals are not checked, but every type they give the API is used.
    command = [sys.executable, "-m", "mypy", "--strict", "--follow-imports=silent", "--no-incremental", *paths]
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600)


@needs_mypy
def test_the_typed_example_and_the_api_pass_mypy_strict():
    done = _mypy("tests/api/typed_example.py", "bamasc/__init__.py", "bamasc/api")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Success: no issues found" in done.stdout


@needs_mypy
def test_mypy_catches_misuse_of_the_public_types(tmp_path):
    """The names are real types to mypy, not Any: each wrong line below is reported."""
    wrong = tmp_path / "wrong.py"
    wrong.write_text(textwrap.dedent("""\
        import bamasc

        plan = bamasc.load("x.bam").compile(budget="6000")
        result = plan.run_sync("task")
        total: int = result.answer
        bamasc.providers.fake(mode=3)
        plan.templates[0].bound.real
        """), encoding="utf-8")
    done = _mypy(str(wrong))
    assert done.returncode == 1
    lines = {int(line.split(":")[1]) for line in done.stdout.splitlines() if line.startswith(str(wrong))}
    assert {3, 5, 6, 7} <= lines, done.stdout


def _api_classes() -> set[type]:
    return {value for name in bamasc.__all__ if isinstance(value := getattr(bamasc, name), type)}


def _types_in(hint: object) -> list[type]:
    """Every class a type hint names, through unions and generics."""
    found = [hint] if isinstance(hint, type) else []
    for argument in typing.get_args(hint):
        found.extend(_types_in(argument))
    return found


def test_no_public_function_returns_a_private_type():
    public = _api_classes() | {bamasc.providers.Providers}
    functions = [bamasc.load, bamasc.providers.fake, bamasc.providers.cassette]
    for cls in public:
        for name, member in inspect.getmembers(cls):
            if not name.startswith("_") and (inspect.isfunction(member) or isinstance(member, property)):
                functions.append(member.fget if isinstance(member, property) else member)
    namespace = {**vars(typing), **{cls.__name__: cls for cls in public}, "AsyncIterator": typing.AsyncIterator}
    checked = 0
    for function in functions:
        hints = typing.get_type_hints(function, globalns={**function.__globals__, **namespace})
        assert "return" in hints, f"{function.__qualname__} has no return annotation"
        for returned in _types_in(hints["return"]):
            module = returned.__module__
            assert module in ("builtins", "collections.abc", "typing") or returned in public, (
                f"{function.__qualname__} returns {module}.{returned.__qualname__}, which is not public"
            )
        checked += 1
    assert checked > 20


def test_py_typed_ships_with_the_package():
    assert os.path.isfile(os.path.join(ROOT, "bamasc", "py.typed"))
    with open(os.path.join(ROOT, "pyproject.toml"), encoding="utf-8") as handle:
        assert '"bamasc" = ["py.typed"]' in handle.read()


@needs_mypy
def test_a_typed_script_passes_mypy_strict_against_an_editable_install(tmp_path):
    """docs/python.md's editable install (`--config-settings editable_mode=compat`): mypy, run from another
    folder without PYTHONPATH, finds the package and its py.typed. (Setuptools' default editable mode maps
    the package through an import hook, which mypy does not run: it then finds no `bamasc` at all.)"""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env_dir = tmp_path / "env"
    # Without a pip (and the older setuptools it brings) of its own: this environment's builds the package.
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env_dir)], check=True, env=env)
    python = str(env_dir / "bin" / "python")
    site = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True, env=env).stdout.strip()
    # This environment's packages (setuptools, mypy, the dependencies) after the new one's own.
    with open(os.path.join(site, "outer.pth"), "w", encoding="utf-8") as handle:
        handle.write(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run([sys.executable, "-m", "pip", "--python", python, "install", "-q", "--no-deps", "--no-build-isolation",
                    "--no-index", "-e", ROOT, "--config-settings", "editable_mode=compat"],
                   check=True, env=env, cwd=tmp_path, timeout=600)
    script = tmp_path / "elsewhere" / "script.py"
    script.parent.mkdir()
    script.write_text(open(os.path.join(ROOT, "tests", "api", "typed_example.py"), encoding="utf-8").read())
    done = subprocess.run([python, "-m", "mypy", "--strict", "--no-incremental", "--follow-imports=silent", "script.py"],
                          cwd=script.parent, capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Success: no issues found" in done.stdout
