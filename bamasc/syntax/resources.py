"""Locations of the grammar, its cached parse tables and the stdlib (package data)."""

from __future__ import annotations

import hashlib
from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent.parent


def _data_dir(name: str) -> Path:
    # Installed wheels carry the folder inside the package; a source checkout
    # keeps it at the repository root, beside the package.
    inside = _PACKAGE / name
    return inside if inside.is_dir() else _PACKAGE.parent / name


GRAMMAR_DIR = _data_dir("grammars")
GRAMMAR_PATH = GRAMMAR_DIR / "bam.lark"
TABLES_PATH = GRAMMAR_DIR / "bam.tables.json"
STDLIB_PATH = _data_dir("stdlib_topologies")


def grammar_digest() -> str:
    return hashlib.sha256(GRAMMAR_PATH.read_bytes()).hexdigest()
