"""Reads a `.bam` file and everything it imports: sources, modules and file-level diagnostics."""

from __future__ import annotations

import functools
import os
import stat

from bamasc.diagnostics import Diagnostic, Note, error
from bamasc.source import SourceFile, Span, as_typed, decode_source
from bamasc.syntax import ast
from bamasc.syntax.parser import parse_source
from bamasc.syntax.resources import STDLIB_PATH

MAX_FILE_BYTES = 8 * 1024 * 1024


class Loaded:
    """Every file reached from the roots, in import order (imports before importers)."""

    def __init__(self) -> None:
        self.roots: list[str] = []
        self.sources: dict[str, SourceFile] = {}
        self.modules: dict[str, ast.Module] = {}
        self.diagnostics: list[Diagnostic] = []
        # Each file's text as read, a byte-order mark included: encoded again it is
        # the file's bytes (valid UTF-8 decodes and encodes back exactly), so no
        # second copy of a large file is held while it is parsed.
        self.texts: dict[str, str] = {}
        self.keys: set[str] = set()  # real paths of `sources`
        # Real path -> text read in place of the file on disk (an editor's unsaved buffers).
        self.overlay: dict[str, str] = {}


def load(path: str, loaded: Loaded | None = None, overlay: dict[str, str] | None = None) -> Loaded:
    """Load `path` and its imports; problems become diagnostics, never exceptions.
    `overlay` maps real paths to text that is read instead of those files."""
    loaded = loaded or Loaded()
    if overlay:
        loaded.overlay = overlay
    loaded.roots.append(path)
    _load_file(path, None, loaded, [])
    return loaded


def resolve_import(spec: str, importer: str) -> str:
    """`std/NAME` is the shipped stdlib; anything else is relative to the importing file."""
    if spec.startswith("std/"):
        name = spec[4:]
        path = os.path.join(STDLIB_PATH, name if name.endswith(".bam") else name + ".bam")
        # Named as a user would name it on the command line (so parsed once when both happen).
        return as_typed(path)
    base = os.path.dirname(importer)
    return os.path.normpath(os.path.join(base, spec))


@functools.lru_cache(maxsize=1024)
def _key(path: str) -> str:
    """The file's real path: two names of one file are one module (realpath stats every component)."""
    try:
        return os.path.realpath(path)
    except ValueError:  # a NUL in the name; _read reports it
        return path


def _load_file(path: str, via: ast.Import | None, loaded: Loaded, chain: list[tuple[str, ast.Import | None]]) -> None:
    key = _key(path)
    chain_keys = [_key(p) for p, _ in chain]
    if key in chain_keys:
        start = chain_keys.index(key)
        cycle = [p for p, _ in chain[start:]] + [path]
        loaded.diagnostics.append(
            error(
                "BAM007",
                "import cycle: " + " -> ".join(_short(p) for p in cycle),
                via.span if via else None,
                *[Note(f"{_short(p)} imported here", imp.span) for p, imp in chain[start + 1 :] if imp],
                hint="move the shared declarations into a file that both import",
            )
        )
        return
    if key in loaded.keys:
        return
    text = loaded.overlay.get(key)
    # Encoded, so overlay text is decoded as a file's bytes are (a lone surrogate fails as bad UTF-8).
    data = _read(path, via, loaded) if text is None else text.encode("utf-8", "surrogatepass")
    if data is None:
        return
    text, bad_offset = decode_source(path, data)
    source = SourceFile(path, text)
    loaded.sources[path] = source
    loaded.keys.add(key)
    if bad_offset is not None:
        # `bad_offset` counts bytes; lines and columns count characters.
        before = data[:bad_offset].decode("utf-8")
        line = before.count("\n") + 1
        col = len(before) - (before.rfind("\n") + 1) + 1
        loaded.diagnostics.append(
            error("BAM005", "file is not valid UTF-8", Span(path, line, col, line, col + 1), hint="save the file as UTF-8")
        )
        return
    loaded.texts[path] = "\ufeff" + text if data.startswith(b"\xef\xbb\xbf") else text
    del data
    module, diagnostics = _parse(source)
    loaded.diagnostics.extend(diagnostics)
    if module is None:
        return
    for imp in module.imports:
        _load_file(resolve_import(imp.path, path), imp, loaded, chain + [(path, via)])
    # Insert after imports so dependencies come first in `modules`.
    loaded.modules[path] = module


@functools.lru_cache(maxsize=32)
def _parse(source: SourceFile):
    # Files imported by several roots (the stdlib, shared roles) parse once per run.
    module, diagnostics = parse_source(source)
    return module, tuple(diagnostics)


def _read(path: str, via: ast.Import | None, loaded: Loaded) -> bytes | None:
    where = via.span if via else Span(path, 1, 1, 1, 1)
    what = f"imported file '{via.path}'" if via else f"file '{path}'"
    try:
        status = os.stat(path)
        if via is not None and not (stat.S_ISREG(status.st_mode) or stat.S_ISDIR(status.st_mode)):
            # Opening a pipe or a terminal may block for ever (`import "/dev/stderr"` in an editor's
            # buffer reads the editor's own pipe): an import names a file, so nothing else is opened.
            loaded.diagnostics.append(error("BAM006", f"{what} is not a regular file ({path})", where))
            return None
        size = status.st_size
        if size > MAX_FILE_BYTES:
            loaded.diagnostics.append(
                error("BAM008", f"{what} is {size} bytes; the limit is {MAX_FILE_BYTES}", where)
            )
            return None
        with open(path, "rb") as handle:
            # One byte past the limit: a pipe or device given on the command line has no size to check first.
            data = handle.read(MAX_FILE_BYTES + 1)
        if len(data) > MAX_FILE_BYTES:
            loaded.diagnostics.append(error("BAM008", f"{what} is larger than the limit of {MAX_FILE_BYTES} bytes", where))
            return None
        return data
    except FileNotFoundError:
        message = f"{what} not found" + (f" (looked for {path})" if via else "")
    except IsADirectoryError:
        message = f"{what} is a directory"
    except OSError as problem:
        message = f"cannot read {what}: {problem.strerror}"
    except ValueError:  # os functions refuse names with a NUL character
        message = f"{what} is not a valid file name"
    hint = "std/ imports name the shipped templates: linear, star, feedback, planner" if via and via.path.startswith("std/") else None
    loaded.diagnostics.append(error("BAM006", message, where, hint=hint))
    return None


def _short(path: str) -> str:
    return os.path.basename(path)
