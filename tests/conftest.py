"""Shared test helpers: repository paths and the files that must lint clean."""

from __future__ import annotations

import glob
import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLES = sorted(glob.glob(os.path.join(ROOT, "examples", "*.bam")))
STDLIB = sorted(glob.glob(os.path.join(ROOT, "stdlib_topologies", "*.bam")))


@pytest.fixture
def write_bam(tmp_path):
    """Write a .bam source into the test's temporary folder and return its path."""

    def write(text: str, name: str = "main.bam") -> str:
        path = tmp_path / name
        path.write_text(text, encoding="utf-8")
        return str(path)

    return write
