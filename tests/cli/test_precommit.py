"""The pre-commit hook lints what a change can break: the staged files and every file that imports them."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys

import pytest

from tests.conftest import ROOT

POOL = """model gpt41_nano {
  provider = openai
  name     = "gpt-4.1-nano"
  price    { input = 0.10  output = 0.40 }
  tier     = 2
}
"""

MAIN = """import "std/linear" "pools/pool.bam"

role Executor {
  max_output = 256
  reads      = answer
  prompt     = "Answer briefly: {{task}} {{previous?}}"
}

system quick {
  models     = [gpt41_nano]
  topologies = [linear]
  budget     = 1000
}
"""


def hook_entry() -> list[str]:
    """The hooks' command, as .pre-commit-hooks.yaml declares it (read without a YAML library).

    Both hooks (one with its own environment, one with the installed bamasc)
    must run the same command.
    """
    with open(os.path.join(ROOT, ".pre-commit-hooks.yaml"), encoding="utf-8") as handle:
        entries = {line.split(":", 1)[1].strip() for line in handle if line.strip().startswith("entry: bamasc lint")}
    (entry,) = entries
    words = shlex.split(entry)
    assert words[:2] == ["bamasc", "lint"]
    return [sys.executable, "-m", "bamasc.cli", *words[1:]]


def test_both_hooks_are_declared():
    with open(os.path.join(ROOT, ".pre-commit-hooks.yaml"), encoding="utf-8") as handle:
        ids = [line.split(":", 1)[1].strip() for line in handle if line.startswith("- id:")]
    assert ids == ["bamasc-lint", "bamasc-lint-system", "bamasc-fmt", "bamasc-fmt-system"]


def git(repo, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, check=True).stdout


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_renaming_a_model_in_an_imported_pool_fails_the_hook(tmp_path):
    repo = tmp_path / "repo"
    (repo / "pools").mkdir(parents=True)
    (repo / "pools" / "pool.bam").write_text(POOL, encoding="utf-8")
    (repo / "main.bam").write_text(MAIN, encoding="utf-8")
    git(repo, "init", "-q")
    git(repo, "add", ".")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-q", "-m", "pool")

    def run_hook():
        # pre-commit passes the staged files that match `files: \.bam$`.
        staged = [name for name in git(repo, "diff", "--cached", "--name-only").split() if name.endswith(".bam")]
        return subprocess.run(hook_entry() + staged, cwd=repo, capture_output=True, text=True)

    clean = subprocess.run(hook_entry() + ["main.bam", "pools/pool.bam"], cwd=repo, capture_output=True, text=True)
    assert clean.returncode == 0, clean.stdout + clean.stderr

    (repo / "pools" / "pool.bam").write_text(POOL.replace("gpt41_nano", "gpt41_mini"), encoding="utf-8")
    git(repo, "add", "pools/pool.bam")
    found = run_hook()

    assert found.returncode == 1, found.stdout + found.stderr
    assert "main.bam" in found.stdout and "BAM102" in found.stdout  # the unchanged importer breaks
    assert "2 files checked" in found.stderr
