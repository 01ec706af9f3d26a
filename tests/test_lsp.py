"""`bamasc lsp` driven over stdio as an editor drives it (pytest-lsp): one server for the module."""

from __future__ import annotations

import asyncio
import collections
import os
import sys

import pytest

pytest.importorskip("pygls")
pytest_lsp = pytest.importorskip("pytest_lsp")

from lsprotocol import types  # noqa: E402
from pygls import uris  # noqa: E402
from pygls.exceptions import JsonRpcException  # noqa: E402
from pytest_lsp import ClientServerConfig, LanguageClient, client_capabilities  # noqa: E402

from tests.conftest import ROOT  # noqa: E402

GSM8K = os.path.join(ROOT, "examples", "gsm8k.bam")
LINEAR = os.path.join(ROOT, "stdlib_topologies", "linear.bam")
ENV = {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}

pytestmark = pytest.mark.asyncio(loop_scope="module")

# A prompt with an astral character (two UTF-16 units) and an accented one before the error, on its line.
BROKEN = (
    'role Executor { prompt = "Résumé 😀 {{task}}" reads = answr }\n'
    "model m { provider = openai  name = \"x\"  price { input = 1  output = 1 }  tier = 1 }\n"
    "model m { provider = openai  name = \"y\"  price { input = 1  output = 1 }  tier = 1 }\n"
    "topology t { slot executor : Executor [1..2]  flow { answer chain executor(task) } }\n"
    "system s { models = [m]  topologies = [t]  budget = 100  answer = number }\n"
)


def recording_client() -> LanguageClient:
    """pytest-lsp's client, with every publishDiagnostics queued per document: none is missed
    when two arrive together (the importer's right after the imported file's)."""
    from pytest_lsp.client import DEFAULT_CLIENT_FEATURES, default_converter, register_lsp_features

    client = LanguageClient(converter_factory=default_converter)
    client.published = collections.defaultdict(asyncio.Queue)

    def publish(client: LanguageClient, params: types.PublishDiagnosticsParams):
        client.diagnostics[params.uri] = params.diagnostics
        client.published[params.uri].put_nowait(params)

    register_lsp_features(client, {**DEFAULT_CLIENT_FEATURES, types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS: publish})
    return client


@pytest_lsp.fixture(
    scope="module",
    loop_scope="module",
    config=ClientServerConfig(
        server_command=[sys.executable, "-m", "bamasc", "lsp", "--stdio"], server_env=ENV, client_factory=recording_client
    ),
)
async def client(lsp_client: LanguageClient):
    lsp_client.lens_refreshes = asyncio.Queue()

    @lsp_client.feature(types.WORKSPACE_CODE_LENS_REFRESH)
    def refreshed(params):
        lsp_client.lens_refreshes.put_nowait(True)

    lsp_client.initialized = await lsp_client.initialize_session(
        types.InitializeParams(capabilities=client_capabilities("visual-studio-code"), root_uri=uris.from_fs_path(ROOT))
    )
    yield
    await lsp_client.shutdown_session()


def uri_of(path: str) -> str:
    return uris.from_fs_path(os.path.abspath(path))


def position_of(text: str, needle: str, delta: int = 0) -> types.Position:
    """The UTF-16 position of `needle` in `text` (plus `delta` code points), computed by encoding."""
    index = text.index(needle) + delta
    line = text.count("\n", 0, index)
    start = text.rfind("\n", 0, index) + 1
    return types.Position(line, len(text[start:index].encode("utf-16-le")) // 2)


async def published(client: LanguageClient, uri: str, version: int | None = None) -> list[types.Diagnostic]:
    """The next diagnostics published for `uri` (of `version`, when given)."""
    while True:
        params = await asyncio.wait_for(client.published[uri].get(), 60)
        if version is None or params.version == version:
            return list(params.diagnostics)


async def open_file(client: LanguageClient, path: str, text: str | None = None) -> list[types.Diagnostic]:
    text = open(path, encoding="utf-8").read() if text is None else text
    uri = uri_of(path)
    client.text_document_did_open(types.DidOpenTextDocumentParams(types.TextDocumentItem(uri, "bam", 1, text)))
    return await published(client, uri)


def change(client: LanguageClient, path: str, version: int, text: str) -> None:
    client.text_document_did_change(
        types.DidChangeTextDocumentParams(
            types.VersionedTextDocumentIdentifier(version=version, uri=uri_of(path)),
            [types.TextDocumentContentChangeWholeDocument(text=text)],
        )
    )


def hover_at(client, path, position):
    return client.text_document_hover_async(types.HoverParams(types.TextDocumentIdentifier(uri_of(path)), position))


async def test_example_opens_clean_and_hover_shows_the_compilers_bound(client: LanguageClient):
    from bamasc.plan.compile import compile_file

    text = open(GSM8K, encoding="utf-8").read()
    assert await open_file(client, GSM8K) == []
    where = position_of(text, "system gsm8k {", len("system g"))
    first = await hover_at(client, GSM8K, where)
    assert "**system** `gsm8k`" in first.contents.value
    assert "computing…" in first.contents.value
    await asyncio.wait_for(client.lens_refreshes.get(), 120)
    done = (await hover_at(client, GSM8K, where)).contents.value
    assert "computing" not in done
    # The same bound `bamasc compile` proves, read from the file on disk by the compiler itself.
    compiled = compile_file(GSM8K, system="gsm8k")
    for binding in compiled.bindings["gsm8k"]:
        assert f"| `{binding.template}` | {binding.worst_case_cost:.1f} µ$ | yes |" in done
    assert f"Selected template: `{compiled.plan.system('gsm8k').selection['selected']}`" in done
    model = (await hover_at(client, GSM8K, position_of(text, "deepseek_v3 {"))).contents.value
    assert "openai `deepseek-chat`" in model and "$0.27 input, $1.1 output" in model and "tier: 1" in model
    role = (await hover_at(client, GSM8K, position_of(text, "role Critic", 6))).contents.value
    assert "max_output 384, reads `verdict`" in role and "Proposed solution: {{solution?}}{{previous?}}" in role
    topology = (await hover_at(client, GSM8K, position_of(text, "[linear,", 1))).contents.value
    assert "slot `executor` : `Executor` [1..5]" in topology and "| `linear` |" in topology and "| `star` |" not in topology
    lenses = await client.text_document_code_lens_async(types.CodeLensParams(types.TextDocumentIdentifier(uri_of(GSM8K))))
    titles = [lens.command.title for lens in lenses]
    assert "bamasc compile examples/gsm8k.bam --system gsm8k" in titles
    assert any(t.startswith("worst case ") and "within 1625 µ$" in t for t in titles)


async def test_broken_file_diagnostics_ranges_and_update(client: LanguageClient, tmp_path):
    path = str(tmp_path / "broken.bam")
    with open(path, "w", encoding="utf-8") as handle:
        handle.write("// on disk: not what the editor shows\n")
    found = await open_file(client, path, BROKEN)
    by_code = {d.code: d for d in found}
    assert set(by_code) == {"BAM110", "BAM101"}, [d.message for d in found]
    bad = by_code["BAM110"]
    start = position_of(BROKEN, "answr")
    assert bad.range.start == start and bad.range.end == types.Position(start.line, start.character + 5)
    assert bad.severity == types.DiagnosticSeverity.Error and bad.source == "bamasc"
    twice = by_code["BAM101"]
    assert twice.range.start == types.Position(2, 6)
    assert twice.related_information[0].location.range.start == types.Position(1, 6)
    assert twice.related_information[0].message == "first declared here"
    system = (await hover_at(client, path, position_of(BROKEN, "system s", 7))).contents.value
    assert "fix the errors first" in system
    # Two quick changes: the debounce lints only the last one, and its diagnostics say so.
    fixed = BROKEN.replace("answr", "answer")
    change(client, path, 2, fixed.replace("budget = 100", "budget = 0"))
    change(client, path, 3, fixed)
    updated = await published(client, uri_of(path))
    assert [d.code for d in updated] == ["BAM101"]


async def test_definition_and_references_reach_into_the_stdlib(client: LanguageClient):
    text = open(GSM8K, encoding="utf-8").read()
    gsm8k = types.TextDocumentIdentifier(uri_of(GSM8K))
    found = await client.text_document_definition_async(
        types.DefinitionParams(text_document=gsm8k, position=position_of(text, "[linear,", 3))
    )
    assert [(f.uri, f.range.start, f.range.end) for f in found] == [
        (uri_of(LINEAR), types.Position(4, 9), types.Position(4, 15))
    ]
    uses = await client.text_document_references_async(
        types.ReferenceParams(text_document=gsm8k, position=position_of(text, "role Executor", 5), context=types.ReferenceContext(True))
    )
    files = sorted(os.path.basename(uris.to_fs_path(u.uri)) for u in uses)
    assert files == ["feedback.bam", "gsm8k.bam", "linear.bam", "planner.bam", "star.bam"]
    nano = await client.text_document_references_async(
        types.ReferenceParams(
            text_document=gsm8k, position=position_of(text, "gpt41_nano {"), context=types.ReferenceContext(False)
        )
    )
    assert len(nano) == 3 and all(u.uri == gsm8k.uri for u in nano)


async def test_completion_in_three_contexts(client: LanguageClient):
    text = open(GSM8K, encoding="utf-8").read()
    gsm8k = types.TextDocumentIdentifier(uri_of(GSM8K))

    async def labels(position):
        found = await client.text_document_completion_async(types.CompletionParams(text_document=gsm8k, position=position))
        return [item.label for item in found.items]

    assert await labels(position_of(text, "[deepseek_v3, gpt41_nano]", 1)) == ["deepseek_v3", "gpt41_nano"]
    attributes = await labels(position_of(text, "  tier     = 1"))
    assert "provider" in attributes and "price" in attributes and "budget" not in attributes
    placeholders = await labels(position_of(text, "step by step: {{", len("step by step: {{")))
    assert placeholders[:6] == ["task", "previous", "solution", "feedback", "plan", "step"]
    topologies = await labels(position_of(text, "[linear,", 1))
    assert topologies == ["linear", "star", "feedback", "planner"]


async def test_symbols(client: LanguageClient):
    symbols = await client.text_document_document_symbol_async(
        types.DocumentSymbolParams(types.TextDocumentIdentifier(uri_of(GSM8K)))
    )
    assert [(s.name, s.detail) for s in symbols] == [
        ("deepseek_v3", "model"), ("gpt41_nano", "model"), ("Executor", "role"), ("Critic", "role"),
        ("Planner", "role"), ("Formatter", "role"), ("gsm8k", "system"), ("gsm8k_linear_nano", "system"),
        ("gsm8k_star_nano", "system"),
    ]
    start = position_of(open(GSM8K, encoding="utf-8").read(), "deepseek_v3 {")
    assert symbols[0].selection_range == types.Range(start, types.Position(start.line, start.character + 11))
    found = await client.workspace_symbol_async(types.WorkspaceSymbolParams(query="plan"))
    named = {(s.name, s.container_name) for s in found}
    assert ("planner", None) in named and ("Planner", None) in named and ("planner", "planner") in named


async def test_rename_across_files_and_refusals(client: LanguageClient, tmp_path):
    shared = tmp_path / "shared.bam"
    shared.write_text('model nano { provider = openai  name = "n"  price { input = 1  output = 1 }  tier = 1 }\n')
    main = tmp_path / "main.bam"
    main_text = (
        'import "shared.bam" "std/linear"\n'
        'role Executor { prompt = "{{task}}"  max_output = 10  reads = answer }\n'
        "model big { provider = openai  name = \"b\"  price { input = 2  output = 2 }  tier = 1 }\n"
        "system s { models = [nano, big]  topologies = [linear]  budget = 10000  answer = number }\n"
    )
    main.write_text(main_text)
    assert await open_file(client, str(main)) == []
    document = types.TextDocumentIdentifier(uri_of(str(main)))
    at_nano = position_of(main_text, "[nano", 2)
    edit = await client.text_document_rename_async(types.RenameParams(text_document=document, position=at_nano, new_name="tiny"))
    edits = {uris.to_fs_path(uri): sorted((e.range.start.line, e.range.start.character) for e in found)
             for uri, found in edit.changes.items()}
    assert edits == {str(main): [(3, 21)], str(shared): [(0, 6)]}
    assert all(e.new_text == "tiny" for found in edit.changes.values() for e in found)
    for new_name, message in [("flow", "keyword"), ("big", "model 'big' is already declared"), ("2x", "is not a name")]:
        with pytest.raises(JsonRpcException, match=message):
            await client.text_document_rename_async(types.RenameParams(text_document=document, position=at_nano, new_name=new_name))
    with pytest.raises(JsonRpcException, match="standard library"):
        await client.text_document_rename_async(
            types.RenameParams(text_document=document, position=position_of(main_text, "role Executor", 5), new_name="Solver")
        )
    # An unsaved edit of the imported file is what the importer is checked against.
    client.text_document_did_open(
        types.DidOpenTextDocumentParams(
            types.TextDocumentItem(uri_of(str(shared)), "bam", 1, shared.read_text().replace("tier = 1", "tier = 0"))
        )
    )
    shown = await published(client, document.uri)
    assert [d.code for d in shown] == ["BAM204"]
    assert shown[0].range.start == types.Position(0, 7)  # on the import of shared.bam
    assert shown[0].message.startswith("in shared.bam:1:")
    assert uris.to_fs_path(shown[0].related_information[0].location.uri) == str(shared)


async def test_utf8_client_positions_and_clean_shutdown(tmp_path):
    """A server of its own for a client that prefers UTF-8 (Neovim), and the exit code of a clean shutdown."""
    own = recording_client()
    await own.start_io(sys.executable, "-m", "bamasc", "lsp", env=ENV)
    result = await own.initialize_session(types.InitializeParams(capabilities=client_capabilities("neovim")))
    assert result.server_info.name == "bamasc"
    assert result.capabilities.position_encoding == types.PositionEncodingKind.Utf8
    assert result.capabilities.rename_provider and result.capabilities.hover_provider
    path = str(tmp_path / "broken.bam")
    (bad,) = [d for d in await open_file(own, path, BROKEN) if d.code == "BAM110"]
    line = BROKEN.split("\n")[0]
    assert bad.range.start == types.Position(0, len(line[: line.index("answr")].encode("utf-8")))
    await own.shutdown_session()
    assert own._server.returncode == 0


async def test_formatting_edits(client: LanguageClient, tmp_path):
    from bamasc.fmt import format_source

    path = str(tmp_path / "messy.bam")
    messy = 'model   m {provider=openai\n name = "é😀" price { input = 1 output = 1 } tier = 1 }\n'
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(messy)
    await open_file(client, path)
    document = types.TextDocumentIdentifier(uri_of(path))
    options = types.FormattingOptions(tab_size=2, insert_spaces=True)
    (edit,) = await client.text_document_formatting_async(types.DocumentFormattingParams(document, options))
    assert edit.range == types.Range(types.Position(0, 0), types.Position(2, 0))  # the whole document
    assert edit.new_text == format_source(messy, path) and edit.new_text != messy
    change(client, path, 2, edit.new_text)
    assert not await client.text_document_formatting_async(types.DocumentFormattingParams(document, options))
    change(client, path, 3, "model m {")
    with pytest.raises(JsonRpcException, match="cannot format"):
        await client.text_document_formatting_async(types.DocumentFormattingParams(document, options))


# A system with two length classes: at 400 tokens the prompt costs more, so each class has its own bound.
CLASSES = """\
model strong { provider = fake  name = "s"  price { input = 4  output = 8 }  tier = 1 }
model weak { provider = fake  name = "w"  price { input = 1  output = 2 }  tier = 2 }
role Solver {
  max_output = 64
  prompt = "Solve: {{task}} {{previous?}}"
}
topology pair {
  slot solver : Solver [1..2]
  flow { answer chain solver(task) }
}
system s {
  models      = [strong, weak]
  topologies  = [pair]
  budget      = 3000
  task_tokens = [100, 400]
  answer      = number
}
"""


async def bound_shown(client: LanguageClient, path: str, where: types.Position) -> str:
    """The hover at `where` once the bound is computed."""
    while True:
        text = (await hover_at(client, path, where)).contents.value
        if "computing" not in text:
            return text
        await asyncio.wait_for(client.lens_refreshes.get(), 120)


async def test_hover_shows_every_length_class(client: LanguageClient, tmp_path):
    from bamasc.plan.compile import compile_file

    path = str(tmp_path / "classes.bam")
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(CLASSES)
    assert await open_file(client, path) == []
    text = await bound_shown(client, path, position_of(CLASSES, "system s", 7))
    system = compile_file(path).plan.system("s")
    classes = [(system.task_tokens, system.templates)] + [(c.task_tokens, c.templates) for c in system.length_classes]
    assert [tokens for tokens, _ in classes] == [100, 400]
    for tokens, templates in classes:
        (pair,) = templates
        assert f"Tasks up to {tokens} tokens:" in text
        assert f"| `pair` | {pair.worst_case_cost:.1f} µ$ | yes |" in text
    assert classes[0][1][0].worst_case_cost != classes[1][1][0].worst_case_cost  # two tables, not one twice
    assert text.count("Selected template: `pair`.") == 2
    topology = await bound_shown(client, path, position_of(CLASSES, "topology pair", 9))
    assert "Tasks up to 400 tokens:" in topology


async def test_every_code_lens_runs_a_command_the_server_implements(client: LanguageClient, tmp_path):
    path = str(tmp_path / "lenses.bam")
    unused = CLASSES + "topology spare {\n  slot solver : Solver [1..1]\n  flow { answer chain solver(task) }\n}\n"
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(unused)
    await open_file(client, path)
    await bound_shown(client, path, position_of(unused, "system s", 7))
    document = types.TextDocumentIdentifier(uri_of(path))
    lenses = await client.text_document_code_lens_async(types.CodeLensParams(document))
    implemented = set(client.initialized.capabilities.execute_command_provider.commands)
    assert {"bamasc.showCommand", "bamasc.showBound"} <= implemented
    assert len(lenses) == 5  # the system's two, the used topology's two, the unused one's one
    shown = {}
    for lens in lenses:
        assert lens.command is not None and lens.command.command in implemented, lens
        assert lens.command.title
        result = await client.workspace_execute_command_async(
            types.ExecuteCommandParams(lens.command.command, lens.command.arguments))
        assert isinstance(result, str) and result
        shown[lens.command.title] = result
    system_lens = next(title for title in shown if title.startswith("worst case ≤100 tok: "))
    assert "≤400 tok: " in system_lens
    explained = shown[system_lens]
    assert "tasks up to 100 tokens:" in explained and "tasks up to 400 tokens:" in explained
    assert explained.count("  selected: pair") == 2
    assert "no system uses this topology" in shown["no system uses this topology"]
    # The bound is shown to the user as a message too, as the suggestion's command line is.
    messages = [message.message for message in client.messages]
    assert explained in messages
    with pytest.raises(JsonRpcException, match="takes a document"):
        await client.workspace_execute_command_async(types.ExecuteCommandParams("bamasc.showBound", [1, 2]))
