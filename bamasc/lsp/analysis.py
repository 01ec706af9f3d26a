"""One lint of an open document as the language server sees it: the same passes as `bamasc lint`,
on the editor's text, with what navigation, hover and completion read."""

from __future__ import annotations

import hashlib
import os

from bamasc.diagnostics import Diagnostic, Note, has_errors
from bamasc.lint import lint_file
from bamasc.loader import resolve_import
from bamasc.lsp.index import Index
from bamasc.lsp.positions import Lines, Units, utf16_units
from bamasc.records import replace
from bamasc.syntax.resources import STDLIB_PATH


def real(path: str) -> str:
    return os.path.realpath(path)


class Analysis:
    """A document's program: its files, typed program, diagnostics and name index."""

    def __init__(self, path: str, overlay: dict[str, str], version: int | None = None):
        self.path = path
        self.version = version
        self.loaded, self.program, self.diagnostics = lint_file(path, overlay)
        self.errors = has_errors(self.diagnostics)
        self.index = Index(self.loaded.modules)
        # Paths as the loader named them (the stdlib relative to the working directory), by real path.
        self.names = {real(name): name for name in self.loaded.sources}
        self._lines: dict[str, Lines] = {}
        self._digest: str | None = None

    @property
    def parsed(self) -> bool:
        """Whether the document itself parsed (it has a module and so names)."""
        return self.path in self.loaded.modules

    @property
    def files(self) -> set[str]:
        """Real paths of every file this program was read from."""
        return set(self.names)

    def name(self, path: str) -> str | None:
        """The loader's name of a file given by any path, if this program read it."""
        return self.names.get(real(path))

    def text(self, name: str) -> str:
        source = self.loaded.sources.get(name)
        return source.text if source else ""

    def lines(self, name: str, units: Units = utf16_units) -> Lines:
        lines = self._lines.get(name)
        if lines is None or lines.units != units:
            lines = self._lines[name] = Lines(self.text(name), units)
        return lines

    @property
    def digest(self) -> str:
        """A hash of every source text, so a bound computed once is reused for the same program."""
        if self._digest is None:
            hashed = hashlib.sha256()
            for name in sorted(self.loaded.texts):
                hashed.update(real(name).encode("utf-8", "surrogatepass") + b"\0")
                hashed.update(self.loaded.texts[name].encode("utf-8", "surrogatepass") + b"\0")
            self._digest = hashed.hexdigest()
        return self._digest

    def shown_here(self) -> list[Diagnostic]:
        """The diagnostics to show in this document. One found in an imported file is shown on
        the import that reaches it, its place kept as the first note, so it is not lost."""
        shown = []
        here = real(self.path)
        reach = self._imports_reaching()
        for diagnostic in self.diagnostics:
            span = diagnostic.span
            if span is None or real(span.file) == here:
                shown.append(diagnostic)
                continue
            via = next((imp for imp, files in reach if real(span.file) in files), None)
            if via is None:
                continue  # not reachable from this document's imports: that file's own view shows it
            where = os.path.basename(span.file)
            shown.append(
                replace(
                    diagnostic,
                    message=f"in {where}:{span.line}:{span.col}: {diagnostic.message}",
                    span=via.span,
                    notes=(Note(diagnostic.message, span), *diagnostic.notes),
                )
            )
        return shown

    def _imports_reaching(self):
        """(import statement, real paths it reaches) for each import of the document."""
        module = self.loaded.modules.get(self.path)
        if module is None:
            return []
        graph = {
            real(name): [real(resolve_import(imp.path, name)) for imp in found.imports]
            for name, found in self.loaded.modules.items()
        }
        reach = []
        for imp in module.imports:
            start = real(resolve_import(imp.path, self.path))
            seen, todo = set(), [start]
            while todo:
                node = todo.pop()
                if node not in seen:
                    seen.add(node)
                    todo.extend(graph.get(node, ()))
            reach.append((imp, seen))
        return reach


def in_stdlib(path: str) -> bool:
    return real(path).startswith(real(STDLIB_PATH) + os.sep)
