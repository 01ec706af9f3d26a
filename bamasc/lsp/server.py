"""The language server: documents, debounced lint and diagnostics, and the request handlers (pygls)."""

from __future__ import annotations

import asyncio
import os
from concurrent.futures import ThreadPoolExecutor
from typing import NoReturn

from lsprotocol import types
from pygls import uris
from pygls.exceptions import JsonRpcException
from pygls.lsp.server import LanguageServer

from bamasc.version import __version__
from bamasc.diagnostics import CODES, ERROR
from bamasc.lsp.analysis import Analysis, real
from bamasc.lsp.bounds import Bounds
from bamasc.lsp.transport import BamProtocol, serve_stdio

DEBOUNCE_SECONDS = 0.2  # after the last keystroke; an open or a save lints at once
SHOW_COMMAND = "bamasc.showCommand"  # a lens's suggested command line, shown (the server runs nothing)
SHOW_BOUND = "bamasc.showBound"  # a lens's bound, shown in full
REQUEST_FAILED = -32803  # LSP's RequestFailed: a request understood but refused (a bad rename)
HELP_URI = "https://github.com/bamasc/bamasc/blob/main/docs/diagnostics.md#{}"


class Document:
    """What the server holds for one open `.bam` document."""

    def __init__(self, uri: str):
        self.uri = uri
        self.path = os.path.abspath(uris.to_fs_path(uri) or uri)
        self.analysis: Analysis | None = None  # the latest lint
        self.good: Analysis | None = None  # the latest lint in which the document parsed
        self.task: asyncio.Task | None = None


class BamServer(LanguageServer):
    def __init__(self, debounce: float = DEBOUNCE_SECONDS):
        super().__init__("bamasc", __version__, protocol_cls=BamProtocol)
        self.debounce = debounce
        self.documents: dict[str, Document] = {}
        self.linter = ThreadPoolExecutor(max_workers=1, thread_name_prefix="bamasc-lint")
        self.loop: asyncio.AbstractEventLoop | None = None
        self.bounds = Bounds(on_done=self._bounds_done)

    def start_io(self, stdin=None, stdout=None) -> None:
        """Serve over stdio with a reader that survives malformed input (see `transport.py`)."""
        serve_stdio(self, stdin, stdout)

    # ------------------------------------------------------------ positions

    def units(self):
        return self.workspace.position_codec.client_num_units

    def range(self, analysis: Analysis, span) -> types.Range:
        name = analysis.name(span.file) or span.file
        start, end = analysis.lines(name, self.units()).range(span)
        return types.Range(types.Position(*start), types.Position(*end))

    def location(self, analysis: Analysis, span) -> types.Location:
        return types.Location(uris.from_fs_path(os.path.abspath(span.file)), self.range(analysis, span))

    def point(self, analysis: Analysis, position: types.Position) -> tuple[str, int, int]:
        """(the loader's name of the document, 1-based line, code point column) of a client position."""
        lines = analysis.lines(analysis.path, self.units())
        line, col = lines.point(position.line, position.character)
        return analysis.path, line, col

    def for_names(self, uri: str) -> tuple[Document, Analysis] | tuple[None, None]:
        """The document and the analysis to look names up in: the latest one that parsed."""
        document = self.documents.get(uri)
        if document is None or (document.good or document.analysis) is None:
            return None, None
        return document, document.good or document.analysis

    def open_analyses(self) -> list[Analysis]:
        return [d.analysis for d in self.documents.values() if d.analysis is not None]

    # ------------------------------------------------------------ linting

    def overlay(self) -> dict[str, str]:
        """Real path -> text of every open document: unsaved buffers win over the disk."""
        found = {}
        for uri, document in self.documents.items():
            found[real(document.path)] = self.workspace.get_text_document(uri).source
        return found

    def schedule(self, uri: str, delay: float, dependents: bool = True) -> None:
        document = self.documents.get(uri)
        if document is None:
            return
        if document.task is not None:
            document.task.cancel()
        document.task = asyncio.ensure_future(self._lint(document, delay, dependents))

    async def _lint(self, document: Document, delay: float, dependents: bool) -> None:
        if delay:
            await asyncio.sleep(delay)
        text_document = self.workspace.get_text_document(document.uri)
        version = text_document.version
        loop = asyncio.get_running_loop()
        self.loop = loop
        analysis = await loop.run_in_executor(self.linter, Analysis, document.path, self.overlay(), version)
        if self.documents.get(document.uri) is not document or text_document.version != version:
            return  # closed or changed meanwhile: a newer lint is on its way
        document.analysis = analysis
        if analysis.parsed:
            document.good = analysis
        self.publish(document, analysis)
        if dependents:
            # Open files that import this one see its unsaved text too.
            here = real(document.path)
            for other in list(self.documents.values()):
                if other is not document and other.analysis is not None and here in other.analysis.files:
                    self.schedule(other.uri, 0, dependents=False)

    def publish(self, document: Document, analysis: Analysis) -> None:
        found = [self.diagnostic(analysis, d) for d in analysis.shown_here()]
        self.text_document_publish_diagnostics(
            types.PublishDiagnosticsParams(uri=document.uri, diagnostics=found, version=analysis.version)
        )

    def diagnostic(self, analysis: Analysis, diagnostic) -> types.Diagnostic:
        if diagnostic.span is not None:
            where = self.range(analysis, diagnostic.span)
        else:
            where = types.Range(types.Position(0, 0), types.Position(0, 0))
        related = [
            types.DiagnosticRelatedInformation(self.location(analysis, note.span), note.message)
            for note in diagnostic.notes
            if note.span is not None
        ]
        unplaced = [note.message for note in diagnostic.notes if note.span is None]
        message = "\n".join([diagnostic.message, *(f"note: {n}" for n in unplaced)])
        if diagnostic.hint:
            message += f"\nhelp: {diagnostic.hint}"
        severity = types.DiagnosticSeverity.Error if diagnostic.severity == ERROR else types.DiagnosticSeverity.Warning
        return types.Diagnostic(
            range=where,
            message=message,
            severity=severity,
            code=diagnostic.code,
            code_description=types.CodeDescription(HELP_URI.format(diagnostic.code.lower())) if diagnostic.code in CODES else None,
            source="bamasc",
            related_information=related or None,
        )

    def _bounds_done(self) -> None:
        """A bound finished (in the worker thread): ask the editor to fetch the lenses again."""
        loop = self.loop
        capabilities = self.client_capabilities.workspace
        lens = capabilities.code_lens if capabilities else None
        if loop is None or loop.is_closed() or not (lens and lens.refresh_support):
            return
        loop.call_soon_threadsafe(lambda: self.workspace_code_lens_refresh(None))


def refuse(message: str) -> NoReturn:
    """Fail the request with `message`, which the editor shows."""
    raise JsonRpcException(message, code=REQUEST_FAILED)
