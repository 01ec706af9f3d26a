"""`bamasc lint` as a library call: load, parse and check files, collect every diagnostic."""

from __future__ import annotations

from bamasc.check import check
from bamasc.diagnostics import Diagnostic, Sources
from bamasc.loader import load


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
        loaded = load(path)
        diagnostics = list(loaded.diagnostics)
        if loaded.modules:
            _, found = check(loaded)
            diagnostics.extend(found)
        for source in loaded.sources.values():
            result.sources.add(source)
        for diagnostic in sorted(diagnostics, key=lambda d: d.sort_key()):
            key = (diagnostic.code, diagnostic.span, diagnostic.message)
            if key not in seen:
                seen.add(key)
                result.diagnostics.append(diagnostic)
    return result
