"""docs/python.md's Python examples run as written, offline, in a copy of examples/."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys

from tests.conftest import EXAMPLES, ROOT

DOC = os.path.join(ROOT, "docs", "python.md")


def python_blocks(text: str) -> list[tuple[int, str]]:
    """(line of the opening fence, body) of every ```python block."""
    blocks, lines, index = [], text.split("\n"), 0
    while index < len(lines):
        if lines[index].strip() == "```python":
            start, body = index + 1, []
            index += 1
            while lines[index].strip() != "```":
                body.append(lines[index])
                index += 1
            blocks.append((start, "\n".join(body) + "\n"))
        index += 1
    return blocks


def test_every_python_example_runs(tmp_path):
    with open(DOC, encoding="utf-8") as handle:
        blocks = python_blocks(handle.read())
    assert len(blocks) >= 6
    for path in EXAMPLES:
        shutil.copy(path, tmp_path)
    env = {k: v for k, v in os.environ.items() if "API_KEY" not in k}  # offline: no key, the fake answers
    env["PYTHONPATH"] = ROOT
    for line, body in blocks:
        done = subprocess.run([sys.executable, "-c", body], cwd=str(tmp_path), env=env, capture_output=True,
                              text=True, timeout=600)
        assert done.returncode == 0, f"docs/python.md:{line}:\n{body}\n{done.stderr}"
        assert done.stdout.strip(), f"docs/python.md:{line} printed nothing"
    assert (tmp_path / "plan.json").is_file() and (tmp_path / "ledger.jsonl").is_file()


def test_the_blocks_are_found():
    found = python_blocks("text\n```python\nprint(1)\n```\n```sh\nls\n```\n")
    assert found == [(2, "print(1)\n")]
    assert not re.search(r"```python\s*```", open(DOC, encoding="utf-8").read())
