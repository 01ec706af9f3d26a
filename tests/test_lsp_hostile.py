"""`bamasc lsp` on hostile input, as a process on stdio: lying headers and garbage on the wire, and every
request it serves with hostile positions, URIs and params. Each request gets a result or an error, and the
server stays up and keeps working.

The request fuzz is seeded, so a failure names the case and reruns the same way.
"""

from __future__ import annotations

import json
import os
import random

import pytest

pytest.importorskip("pygls")

import attrs  # noqa: E402
from lsprotocol import types  # noqa: E402

from tests.conftest import ROOT  # noqa: E402
from tests.lsp_wire import PIECES, READABLE, Wire, framed, lies, request_body  # noqa: E402

GSM8K = os.path.join(ROOT, "examples", "gsm8k.bam")
SEED = 20261203
CASES_PER_METHOD = 30
GARBAGE_CASES = 40

INVALID_REQUEST, INVALID_PARAMS, INTERNAL_ERROR = -32600, -32602, -32603
POSITIONS = [
    {"line": -5, "character": 0}, {"line": 0, "character": -1}, {"line": 2**31, "character": 0},
    {"line": 2**31 - 1, "character": 2**31 - 1}, {"line": 10**30, "character": 10**30}, {"line": 1.5, "character": 0.5},
    {"line": "3", "character": "x"}, {"line": None, "character": None}, {}, "here", [1, 2], 7, None,
    {"line": 0, "character": 0}, {"line": 40, "character": 9}, {"line": 3, "character": 200},
]
NAMES = ["", "x", "new_name", "model", "\x00", "a" * 5000, "é😀", 42, None, ["x"]]


def uris(opened: list[str]) -> list:
    return opened + [
        "file:///does/not/exist.bam", "untitled:Untitled-1", "http://example.com/x.bam", "file:///dev/stdin",
        "file:///dev/zero", "file:///", "", "not a uri", "file://[::1", "file:///%00", "data:text/plain,hi",
        "file:///" + "a" * 5000, "file:" + GSM8K, 42, None, {"uri": "x"},
    ]


def served_requests() -> list[str]:
    """The requests the server registers (from the server itself), and executeCommand for its command."""
    from bamasc.lsp.start import build_server

    features = build_server().protocol.fm.features
    found = [
        method for method in features if method in types.METHOD_TO_TYPES
        and "id" in attrs.fields_dict(types.METHOD_TO_TYPES[method][0]) and method != types.SHUTDOWN
    ]
    return sorted(found) + [types.WORKSPACE_EXECUTE_COMMAND]


def hostile_params(rng: random.Random, opened: list[str]):
    """Params for any request: the fields they share, each from its hostile family, some missing; or not an object."""
    if rng.random() < 0.1:
        return rng.choice([None, [], "params", 0, [{"textDocument": {"uri": opened[0]}}]])
    params = {
        "textDocument": rng.choice([{"uri": rng.choice(uris(opened))}, rng.choice(uris(opened))]),
        "position": rng.choice(POSITIONS),
        "context": rng.choice([{"includeDeclaration": rng.choice([True, False, "yes"])}, None, []]),
        "newName": rng.choice(NAMES),
        "query": rng.choice(NAMES),
        "options": rng.choice([{"tabSize": 2, "insertSpaces": True}, {"tabSize": -1}, None]),
        "command": rng.choice(["bamasc.showCommand", "bamasc.showBound", "no.such.command", "", None]),
        "arguments": rng.choice([None, [], ["bamasc compile x"], [None], {"a": 1}, "x", [2**70]]),
    }
    for key in rng.sample(sorted(params), rng.randrange(3)):
        del params[key]
    return params


def assert_answered(answer: dict, case) -> None:
    assert ("result" in answer) != ("error" in answer), case
    if "error" in answer:
        assert isinstance(answer["error"]["code"], int) and isinstance(answer["error"]["message"], str), case


@pytest.fixture(scope="module")
def server():
    wire = Wire()
    assert "capabilities" in wire.initialize()["result"]
    yield wire
    wire.close()


def opened_document(server: Wire, folder, name: str, text: str) -> str:
    path = os.path.join(folder, name)
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(text)
    uri = "file://" + path
    server.notify("textDocument/didOpen", {"textDocument": {"uri": uri, "languageId": "bam", "version": 1, "text": text}})
    return uri


def test_after_each_lie_the_next_request_is_answered_and_the_lying_one_gets_an_error(server):
    for kind, _ in lies(b"{}").items():
        lied = server.next_id = server.next_id + 1
        server.send(lies(request_body(lied))[kind])
        probe = server.request("workspace/symbol", {"query": ""})
        assert server.answer(probe) == {"jsonrpc": "2.0", "id": probe, "result": []}, kind
        if kind in READABLE:
            assert server.answer(lied)["error"]["code"] == INVALID_REQUEST, kind
    assert server.process.poll() is None


def test_after_garbage_the_next_request_is_answered(server):
    rng = random.Random(SEED)
    for case in range(GARBAGE_CASES):
        pieces = [rng.choice(PIECES) if rng.random() < 0.7 else rng.randbytes(rng.randrange(1, 20)) for _ in range(rng.randrange(1, 15))]
        server.send(b"".join(pieces))
        probe = server.request("workspace/symbol", {"query": ""})
        assert server.answer(probe)["result"] == [], (case, pieces)
    assert server.process.poll() is None


def test_valid_json_that_is_no_request_gets_an_error_and_a_request_after_it_an_answer(server):
    for payload in [[1, 2], [], 7, "x", None, {}, {"id": 5}, {"jsonrpc": "1.0", "id": 9, "method": "initialize"},
                    {"jsonrpc": "2.0", "id": [1], "method": "workspace/symbol"}, {"jsonrpc": "2.0", "id": 8, "method": 3},
                    {"jsonrpc": "2.0", "id": 6, "method": "workspace/symbol", "params": "query"}]:
        server.send(framed(json.dumps(payload).encode()))
        probe = server.request("workspace/symbol", {"query": ""})
        assert server.answer(probe)["result"] == [], payload
        if isinstance(payload, dict) and isinstance(payload.get("id"), int) and "method" in payload:
            assert server.answer(payload["id"])["error"]["code"] == INVALID_REQUEST, payload
    server.send(framed(b"{not json"))
    assert server.call("workspace/symbol", {"query": ""})["result"] == []


def test_every_request_with_hostile_params_gets_a_result_or_an_error(server, tmp_path):
    with open(GSM8K, encoding="utf-8") as handle:
        text = handle.read()
    opened = [opened_document(server, str(tmp_path), "gsm8k.bam", text)]
    opened.append(opened_document(server, str(tmp_path), "broken.bam", "model m {\n  provider = \n"))
    # An open buffer may import any path: reading it must not take the editor's messages.
    opened.append(opened_document(server, str(tmp_path), "stdin.bam", 'import "/dev/stdin"\n'))
    methods = served_requests()
    assert {"textDocument/hover", "textDocument/formatting", "textDocument/completion"} <= set(methods)
    positioned = {method for method in methods if "position" in attrs.fields_dict(types.METHOD_TO_TYPES[method][2])}
    rng = random.Random(SEED)
    for method in methods:
        for case in range(CASES_PER_METHOD):
            params = hostile_params(rng, opened)
            answer = server.call(method, params)
            assert_answered(answer, (method, case, params))
            # Refused as invalid, or handled: never a handler's crash (an internal error with its traceback).
            assert answer.get("error", {}).get("code") != INTERNAL_ERROR, (method, case, params, answer)
            if isinstance(params, dict) and params.get("position") in ([1, 2], "here", 7) and method in positioned:
                assert answer["error"]["code"] == INVALID_PARAMS, (method, params)
    assert server.process.poll() is None
    # And it still works: hover on a model of the open document.
    line = text.splitlines().index(next(row for row in text.splitlines() if row.startswith("model ")))
    hover = server.call("textDocument/hover", {"textDocument": {"uri": opened[0]}, "position": {"line": line, "character": 7}})
    assert hover["result"]["contents"]["value"].startswith("**model**")


def test_every_open_file_is_checked_even_after_one_that_imports_stdin(server, tmp_path):
    opened_document(server, str(tmp_path), "stdin.bam", 'import "/dev/stdin"\n')
    broken = opened_document(server, str(tmp_path), "broken.bam", "model m {\n  provider = \n")
    found = server.notification("textDocument/publishDiagnostics", lambda params: params["uri"] == broken)
    assert found["params"]["diagnostics"][0]["code"]


def test_a_buffer_that_imports_the_servers_own_stderr_gets_its_diagnostics(tmp_path):
    """`/dev/stderr` is the editor's pipe (stdout goes there too): opening it to read waits for ever for a
    writer that is the server itself. An import names a regular file, so it is refused without a read."""
    wire = Wire()
    try:
        wire.initialize()
        uri = opened_document(wire, str(tmp_path), "stderr.bam", 'import "/dev/stderr"\n')
        found = wire.notification("textDocument/publishDiagnostics", lambda params: params["uri"] == uri)
        codes = {diagnostic["code"] for diagnostic in found["params"]["diagnostics"]}
        assert "BAM006" in codes, found
    finally:
        wire.close()


def test_a_request_after_shutdown_gets_an_error_and_exit_ends_the_server():
    wire = Wire()
    wire.initialize()
    assert wire.call("shutdown", None) == {"jsonrpc": "2.0", "id": wire.next_id, "result": None}
    assert wire.call("workspace/symbol", {"query": ""})["error"]["code"] == INVALID_REQUEST
    wire.notify("exit", None)
    assert wire.process.wait(timeout=60) == 0
