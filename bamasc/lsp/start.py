"""The server with every handler registered, and its run over stdio."""

from __future__ import annotations

import os

from lsprotocol import types

from bamasc.lsp import features
from bamasc.lsp.analysis import real
from bamasc.lsp.server import DEBOUNCE_SECONDS, BamServer, Document


def build_server(debounce: float = DEBOUNCE_SECONDS) -> BamServer:
    server = BamServer(debounce)
    _documents(server)
    features.register(server)
    return server


def _documents(server: BamServer) -> None:
    @server.feature(types.TEXT_DOCUMENT_DID_OPEN)
    def did_open(ls: BamServer, params: types.DidOpenTextDocumentParams):
        uri = params.text_document.uri
        ls.documents[uri] = Document(uri)
        ls.schedule(uri, 0)

    @server.feature(types.TEXT_DOCUMENT_DID_CHANGE)
    def did_change(ls: BamServer, params: types.DidChangeTextDocumentParams):
        ls.schedule(params.text_document.uri, ls.debounce)

    @server.feature(types.TEXT_DOCUMENT_DID_SAVE)
    def did_save(ls: BamServer, params: types.DidSaveTextDocumentParams):
        ls.schedule(params.text_document.uri, 0)

    @server.feature(types.TEXT_DOCUMENT_DID_CLOSE)
    def did_close(ls: BamServer, params: types.DidCloseTextDocumentParams):
        document = ls.documents.pop(params.text_document.uri, None)
        if document is not None and document.task is not None:
            document.task.cancel()
        ls.text_document_publish_diagnostics(types.PublishDiagnosticsParams(uri=params.text_document.uri, diagnostics=[]))
        # Files that imported it now read it from disk again.
        for other in list(ls.documents.values()):
            if document is not None and other.analysis is not None and real(document.path) in other.analysis.files:
                ls.schedule(other.uri, 0, dependents=False)

    @server.feature(types.SHUTDOWN)
    def shutdown(ls: BamServer, params: None):
        ls.bounds.close()
        ls.linter.shutdown(wait=False, cancel_futures=True)


def serve() -> None:
    """Run the server on standard input and output until the editor says exit."""
    build_server().start_io(*_own_stdio())


def _own_stdio():
    """The editor's pipes, kept for the protocol alone: descriptor 0 then reads /dev/null and 1 writes to
    stderr, so that a file the server reads (`import "/dev/stdin"` in an open buffer) takes none of the
    editor's messages, and a stray print corrupts none of the server's."""
    stdin, stdout = os.fdopen(os.dup(0), "rb"), os.fdopen(os.dup(1), "wb")
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    os.dup2(2, 1)
    return stdin, stdout
