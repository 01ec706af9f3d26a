"""Request handlers: hover, navigation, rename, symbols, completion, code lenses and formatting."""

from __future__ import annotations

import os

from lsprotocol import types
from pygls import uris

from bamasc.fmt import FormatError, format_source
from bamasc.lsp.complete import completions
from bamasc.lsp.hover import hover_text
from bamasc.lsp.lenses import explanation, lenses
from bamasc.lsp.navigate import RenameError, definitions, document_symbols, references, rename, workspace_symbols
from bamasc.lsp.server import SHOW_BOUND, SHOW_COMMAND, BamServer, refuse

SYMBOL_KINDS = {
    "model": types.SymbolKind.Class,
    "role": types.SymbolKind.Interface,
    "topology": types.SymbolKind.Module,
    "system": types.SymbolKind.Package,
    "tool": types.SymbolKind.Function,
    "key": types.SymbolKind.Key,
    "team": types.SymbolKind.Namespace,
    "slot": types.SymbolKind.Field,
    "flow": types.SymbolKind.Variable,
}
COMPLETION_KINDS = {
    "keyword": types.CompletionItemKind.Keyword,
    "attribute": types.CompletionItemKind.Property,
    "value": types.CompletionItemKind.EnumMember,
    "placeholder": types.CompletionItemKind.Variable,
    "model": types.CompletionItemKind.Class,
    "role": types.CompletionItemKind.Interface,
    "topology": types.CompletionItemKind.Module,
    "system": types.CompletionItemKind.Module,
    "tool": types.CompletionItemKind.Function,
    "key": types.CompletionItemKind.Constant,
    "team": types.CompletionItemKind.Struct,
    "slot": types.CompletionItemKind.Field,
    "flow": types.CompletionItemKind.Variable,
}
EXPLAINED = ("system", "topology")  # what a bound's lens explains
# Where a list of choices is useful at once; other completions come when the editor asks.
TRIGGERS = ["{", "[", "(", "=", ":", ","]


def register(server: BamServer) -> None:
    _navigation(server)
    _editing(server)


def _occurrence(ls: BamServer, uri: str, position: types.Position):
    _, analysis = ls.for_names(uri)
    if analysis is None:
        return None, None
    name, line, col = ls.point(analysis, position)
    return analysis, analysis.index.at(name, line, col)


def _navigation(server: BamServer) -> None:
    @server.feature(types.TEXT_DOCUMENT_HOVER)
    def hover(ls: BamServer, params: types.HoverParams):
        analysis, found = _occurrence(ls, params.text_document.uri, params.position)
        if found is None:
            return None
        latest = ls.documents[params.text_document.uri].analysis
        text = hover_text(analysis, found, ls.bounds.state(latest))
        if text is None:
            return None
        content = types.MarkupContent(kind=types.MarkupKind.Markdown, value=text)
        return types.Hover(contents=content, range=ls.range(analysis, found.span))

    @server.feature(types.TEXT_DOCUMENT_DEFINITION)
    def definition(ls: BamServer, params: types.DefinitionParams):
        analysis, found = _occurrence(ls, params.text_document.uri, params.position)
        if found is None:
            return None
        return [ls.location(analysis, d.span) for d in definitions(analysis, found)] or None

    @server.feature(types.TEXT_DOCUMENT_REFERENCES)
    def find_references(ls: BamServer, params: types.ReferenceParams):
        analysis, found = _occurrence(ls, params.text_document.uri, params.position)
        if found is None:
            return None
        uses = references(ls.open_analyses(), analysis, found, params.context.include_declaration)
        return [ls.location(analysis, use.span) for use in uses]

    @server.feature(types.TEXT_DOCUMENT_DOCUMENT_SYMBOL)
    def symbols(ls: BamServer, params: types.DocumentSymbolParams):
        _, analysis = ls.for_names(params.text_document.uri)
        module = analysis.loaded.modules.get(analysis.path) if analysis else None
        if module is None:
            return []

        def symbol(found) -> types.DocumentSymbol:
            return types.DocumentSymbol(
                name=found.name,
                kind=SYMBOL_KINDS[found.kind],
                detail=found.kind,
                range=ls.range(analysis, found.span),
                selection_range=ls.range(analysis, found.name_span),
                children=[symbol(child) for child in found.children] or None,
            )

        return [symbol(found) for found in document_symbols(module)]

    @server.feature(types.WORKSPACE_SYMBOL)
    def workspace_symbol(ls: BamServer, params: types.WorkspaceSymbolParams):
        modules, owner = {}, {}
        for analysis in ls.open_analyses():
            for path, module in analysis.loaded.modules.items():
                modules.setdefault(path, module)
                owner.setdefault(path, analysis)
        return [
            types.WorkspaceSymbol(
                name=found.name,
                kind=SYMBOL_KINDS[found.kind],
                location=ls.location(owner[found.span.file], found.name_span),
                container_name=container or None,
            )
            for found, container in workspace_symbols(modules, params.query)
            if found.span.file in owner
        ]


def _editing(server: BamServer) -> None:
    def keywords():
        from bamasc.syntax.lalr import load_tables

        return set(load_tables().keywords)

    def edits(ls: BamServer, params, new_name: str):
        analysis, found = _occurrence(ls, params.text_document.uri, params.position)
        if found is None:
            refuse("no declared name at the cursor")
        try:
            spans = rename(ls.open_analyses(), analysis, found, new_name, keywords())
        except RenameError as problem:
            refuse(str(problem))
        return analysis, found, spans

    @server.feature(types.TEXT_DOCUMENT_PREPARE_RENAME)
    def prepare_rename(ls: BamServer, params: types.PrepareRenameParams):
        analysis, found, _ = edits(ls, params, "_")
        return ls.range(analysis, found.span)

    @server.feature(types.TEXT_DOCUMENT_RENAME)
    def rename_name(ls: BamServer, params: types.RenameParams):
        analysis, _, spans = edits(ls, params, params.new_name)
        changes: dict[str, list[types.TextEdit]] = {}
        for span in spans:
            uri = uris.from_fs_path(os.path.abspath(span.file))
            changes.setdefault(uri, []).append(types.TextEdit(ls.range(analysis, span), params.new_name))
        return types.WorkspaceEdit(changes=changes)

    @server.feature(types.TEXT_DOCUMENT_COMPLETION, types.CompletionOptions(trigger_characters=TRIGGERS))
    def complete(ls: BamServer, params: types.CompletionParams):
        uri = params.text_document.uri
        if uri not in ls.documents:
            return None
        document = ls.workspace.get_text_document(uri)
        lines = _lines(ls, document.source)
        offset = lines.offset(params.position.line, params.position.character)
        _, analysis = ls.for_names(uri)
        items = completions(document.source, offset, analysis)
        return types.CompletionList(
            is_incomplete=False,
            items=[types.CompletionItem(i.label, kind=COMPLETION_KINDS[i.kind], detail=i.detail or None) for i in items],
        )

    @server.feature(types.TEXT_DOCUMENT_CODE_LENS)
    def code_lens(ls: BamServer, params: types.CodeLensParams):
        document = ls.documents.get(params.text_document.uri)
        if document is None or document.analysis is None:
            return []
        analysis = document.analysis
        root = ls.workspace.root_path
        found = []
        for lens in lenses(analysis, ls.bounds.state(analysis), root):
            if lens.command:
                command = types.Command(lens.command, SHOW_COMMAND, arguments=[lens.command])
            else:  # a bound: the command shows it in full
                command = types.Command(lens.title, SHOW_BOUND, arguments=[params.text_document.uri, *lens.explains])
            found.append(types.CodeLens(range=ls.range(analysis, lens.span), command=command))
        return found

    @server.command(SHOW_BOUND)
    def show_bound(ls: BamServer, *arguments):
        # (document uri, "system" or "topology", name), as the lens gave them.
        if len(arguments) != 3 or not all(isinstance(a, str) for a in arguments) or arguments[1] not in EXPLAINED:
            refuse(f"{SHOW_BOUND} takes a document, 'system' or 'topology', and a name")
        uri, kind, name = arguments
        document = ls.documents.get(uri)
        if document is None or document.analysis is None:
            refuse(f"cannot show the bound: {uri} is not open")
        analysis = document.analysis
        text = explanation(analysis, ls.bounds.state(analysis), kind, name)
        ls.window_show_message(types.ShowMessageParams(types.MessageType.Info, text))
        return text

    @server.command(SHOW_COMMAND)
    def show_command(ls: BamServer, *arguments):
        # pygls passes the command's arguments one by one: the first is the command line.
        line = str(arguments[0]) if arguments else ""
        ls.window_show_message(types.ShowMessageParams(types.MessageType.Info, f"run: {line}"))
        return line

    @server.feature(types.TEXT_DOCUMENT_FORMATTING)
    def formatting(ls: BamServer, params: types.DocumentFormattingParams):
        if params.text_document.uri not in ls.documents:
            # pygls would read the path from disk: `file:///dev/stdin` or `/dev/zero` must not be read.
            refuse(f"cannot format {params.text_document.uri}: it is not open")
        document = ls.workspace.get_text_document(params.text_document.uri)
        path = os.path.abspath(uris.to_fs_path(params.text_document.uri) or params.text_document.uri)
        try:
            formatted = format_source(document.source, path)
        except FormatError as problem:
            # The same error the diagnostics show; the text is left as it is.
            refuse(f"cannot format: {problem}")
        if formatted == document.source:
            return []
        lines = _lines(ls, document.source)
        end = lines.position(len(lines.lines), len(lines.lines[-1]) + 1)
        return [types.TextEdit(types.Range(types.Position(0, 0), types.Position(*end)), formatted)]


def _lines(ls: BamServer, text: str):
    from bamasc.lsp.positions import Lines

    return Lines(text, ls.units())
