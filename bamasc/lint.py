"""`bamasc lint` as a library call: load, parse and check files, collect every diagnostic."""

from __future__ import annotations

import os

from bamasc.ir.budget import check_loaded
from bamasc.diagnostics import Diagnostic, Sources
from bamasc.loader import Loaded, load
from bamasc.program import Program
from bamasc.records import replace


class LintResult:
    """Every diagnostic of a lint run, and the sources they point into."""

    def __init__(self, files: list[str]):
        self.files = files
        self.diagnostics: list[Diagnostic] = []
        self.sources = Sources()


def lint_paths(paths: list[str]) -> LintResult:
    """Each path is checked as its own program (with its imports); shared imports report once."""
    result = LintResult(list(paths))
    seen: set[tuple] = set()
    for path in paths:
        loaded, _, diagnostics = lint_file(path)
        for source in loaded.sources.values():
            result.sources.add(source)
        for diagnostic in diagnostics:
            key = (diagnostic.code, diagnostic.span, diagnostic.message)
            if key not in seen:
                seen.add(key)
                result.diagnostics.append(diagnostic)
    return result


def lint_file(path: str, overlay: dict[str, str] | None = None) -> tuple[Loaded, Program | None, list[Diagnostic]]:
    """One program's lint: what was loaded, the typed program (None when nothing parsed;
    it may hold errors) and its diagnostics, sorted. `overlay` as for `load`."""
    loaded = load(path, overlay=overlay)
    diagnostics = [_with_directory_hint(d, path) for d in loaded.diagnostics]
    program = None
    if loaded.modules:
        program, found = check_loaded(loaded)
        diagnostics.extend(found)
    return loaded, program, sorted(diagnostics, key=lambda d: d.sort_key())


def _with_directory_hint(diagnostic: Diagnostic, path: str) -> Diagnostic:
    """A directory given on the command line: say how to pass its files instead."""
    if diagnostic.code != "BAM006" or diagnostic.hint or not os.path.isdir(path):
        return diagnostic
    if diagnostic.span is None or diagnostic.span.file != path:
        return diagnostic
    return replace(diagnostic, hint=f"pass its .bam files, e.g. {path.rstrip('/')}/*.bam")


def importers(paths: list[str], root: str = ".") -> list[str]:
    """Every .bam file under `root` that imports one of `paths`, directly or through other
    files: a change to a shared pool can break them though they did not change."""
    changed = {os.path.realpath(path) for path in paths}
    found = []
    for folder, subfolders, names in os.walk(root):
        subfolders[:] = sorted(d for d in subfolders if not d.startswith("."))  # .git, .venv, caches
        for name in sorted(names):
            path = os.path.join(folder, name)
            if not name.endswith(".bam") or os.path.realpath(path) in changed:
                continue
            # The loader follows imports transitively, so the closure is every file it read.
            closure = {os.path.realpath(source) for source in load(path).sources}
            if closure & changed:
                found.append(os.path.relpath(path, root) if root != "." else os.path.normpath(path))
    return found
