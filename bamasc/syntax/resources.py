"""Locations of the grammar and the stdlib (package data)."""

from __future__ import annotations

import os
import zlib

_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _data_dir(name: str) -> str:
    # Installed wheels carry the folder inside the package; a source checkout
    # keeps it at the repository root, beside the package.
    inside = os.path.join(_PACKAGE, name)
    return inside if os.path.isdir(inside) else os.path.join(os.path.dirname(_PACKAGE), name)


GRAMMAR_DIR = _data_dir("grammars")
GRAMMAR_PATH = os.path.join(GRAMMAR_DIR, "bam.lark")
STDLIB_PATH = _data_dir("stdlib_topologies")


def grammar_checksum() -> int:
    """CRC-32 of the grammar file: enough to notice that the cached tables are stale."""
    with open(GRAMMAR_PATH, "rb") as handle:
        return zlib.crc32(handle.read())
