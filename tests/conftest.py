"""Shared test helpers: repository paths and the files that must lint clean."""

from __future__ import annotations

import glob
import os

import pytest

from bamasc.program import Model
from bamasc.source import Span

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


def model_declaration(**fields) -> Model:
    """A checked `model` declaration (an OpenAI one unless `fields` say otherwise)."""
    values = {
        "name": "m1",
        "provider": "openai",
        "model_id": "gpt-4o-mini",
        "price_input": 0.1,
        "price_output": 0.4,
        "tier": 1,
        "base_url": None,
        "api_key_env": None,
        "max_output": None,
        "context": None,
        "tokenizer": None,
        "quality": {},
        "default_quality": 1.0,
        "span": Span("test.bam", 1, 1, 1, 2),
    }
    values.update(fields)
    return Model(**values)
