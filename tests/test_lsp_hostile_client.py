"""An editor's client (pytest-lsp) on the same pipe as hostile bytes and requests: its own requests are still
answered, and each hostile request it sends gets an error it can read."""

from __future__ import annotations

import asyncio
import os
import sys
from concurrent.futures import Future

import pytest

pytest.importorskip("pygls")
pytest_lsp = pytest.importorskip("pytest_lsp")

from lsprotocol import types  # noqa: E402
from pygls import uris  # noqa: E402
from pygls.exceptions import JsonRpcException  # noqa: E402
from pytest_lsp import ClientServerConfig, LanguageClient, client_capabilities  # noqa: E402

from tests.conftest import ROOT  # noqa: E402
from tests.lsp_wire import ANSWER_SECONDS, ENV, READABLE, lies, request_body  # noqa: E402

GSM8K = os.path.join(ROOT, "examples", "gsm8k.bam")
INVALID_REQUEST, INVALID_PARAMS = -32600, -32602

pytestmark = pytest.mark.asyncio(loop_scope="module")


@pytest_lsp.fixture(
    scope="module",
    loop_scope="module",
    config=ClientServerConfig(server_command=[sys.executable, "-m", "bamasc", "lsp", "--stdio"], server_env=ENV),
)
async def client(lsp_client: LanguageClient):
    await lsp_client.initialize_session(
        types.InitializeParams(capabilities=client_capabilities("visual-studio-code"), root_uri=uris.from_fs_path(ROOT))
    )
    yield
    await lsp_client.shutdown_session()


def expect(client: LanguageClient, msg_id: int):
    """The answer to `msg_id`, as the client receives it, to await once its request is written raw."""
    answer: Future = Future()
    client.protocol._request_futures[msg_id] = answer
    return asyncio.wait_for(asyncio.wrap_future(answer), ANSWER_SECONDS)


def framed_request(msg_id: int, method: str, params) -> bytes:
    body = request_body(msg_id, method, params)
    return b"Content-Length: %d\r\n\r\n" % len(body) + body


async def test_hostile_requests_get_errors_and_the_editors_requests_still_work(client: LanguageClient):
    uri = uris.from_fs_path(GSM8K)
    with open(GSM8K, encoding="utf-8") as handle:
        text = handle.read()
    client.text_document_did_open(types.DidOpenTextDocumentParams(types.TextDocumentItem(uri, "bam", 1, text)))
    await client.wait_for_notification(types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS)

    # A hover at line -5 was never answered; a lying header lost every later message.
    for msg_id, position in enumerate([{"line": -5, "character": 0}, {"line": 1, "character": "x"}, "here"], 9000):
        refused = expect(client, msg_id)
        client.protocol.writer.write(framed_request(msg_id, "textDocument/hover", {"textDocument": {"uri": uri}, "position": position}))
        with pytest.raises(JsonRpcException) as error:
            await refused
        assert error.value.code == INVALID_PARAMS
    for msg_id, kind in enumerate(sorted(lies(b"{}")), 9100):
        # A body shorter than its header says is known to be short when the next message comes: send one.
        lied, probe = expect(client, msg_id), expect(client, msg_id + 1000)
        client.protocol.writer.write(lies(request_body(msg_id))[kind] + framed_request(msg_id + 1000, "workspace/symbol", {"query": "no such name"}))
        assert await probe == [], kind
        if kind in READABLE:
            with pytest.raises(JsonRpcException) as error:
                await lied
            assert error.value.code == INVALID_REQUEST, kind
        else:
            lied.close()
            client.protocol._request_futures.pop(msg_id)
    client.protocol.writer.write(b"Content-Length: 12\r\n\r\n[1, 2, 3, 4]" + b"Content-Length: 5\r\n\r\n{nope")

    # The editor's own requests, typed and framed by the client, still work.
    model = text.splitlines().index(next(row for row in text.splitlines() if row.startswith("model ")))
    hover = await client.text_document_hover_async(
        types.HoverParams(types.TextDocumentIdentifier(uri), types.Position(model, 7))
    )
    assert hover.contents.value.startswith("**model**")
    symbols = await client.text_document_document_symbol_async(types.DocumentSymbolParams(types.TextDocumentIdentifier(uri)))
    assert {"model", "system"} <= {symbol.detail for symbol in symbols}
    completion = await client.text_document_completion_async(
        types.CompletionParams(types.TextDocumentIdentifier(uri), types.Position(0, 0))
    )
    assert "system" in {item.label for item in completion.items}
    assert await client.text_document_formatting_async(
        types.DocumentFormattingParams(types.TextDocumentIdentifier(uri), types.FormattingOptions(2, True))
    ) in ([], ())
    # Past the end of the file, and a file never opened: answered, nothing found.
    far = types.Position(2**31 - 1, 2**31 - 1)
    assert await client.text_document_definition_async(types.DefinitionParams(types.TextDocumentIdentifier(uri), far)) is None
    ghost = types.TextDocumentIdentifier(uris.from_fs_path(os.path.join(ROOT, "no_such_file.bam")))
    assert await client.text_document_hover_async(types.HoverParams(ghost, types.Position(0, 0))) is None
    with pytest.raises(JsonRpcException, match="not open"):
        await client.text_document_formatting_async(types.DocumentFormattingParams(ghost, types.FormattingOptions(2, True)))

    # The suggestion of a code lens shows its whole command line.
    lenses = await client.text_document_code_lens_async(types.CodeLensParams(types.TextDocumentIdentifier(uri)))
    suggested = next(lens.command for lens in lenses if lens.command.command == "bamasc.showCommand")
    shown = await client.workspace_execute_command_async(
        types.ExecuteCommandParams(suggested.command, arguments=suggested.arguments)
    )
    assert shown == suggested.arguments[0] and shown.startswith("bamasc compile ")
