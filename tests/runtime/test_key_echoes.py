"""A server that echoes an API key in its error, plain, base64 or URL-encoded: no trace line or span holds it."""

from __future__ import annotations

import base64
import json

import pytest

from bamasc.cli import main
from bamasc.secrets import redact
from tests.runtime.servers import ScriptedServer, status
from tests.helpers.runtime import program_for

KEY = "sk-proj-Zq81vXw0Lm3Nb7Tc2Yd5Ke9Rf4Hg6Ja1"  # the key the client sends
OTHER = "sk-ant-api03-Xy7Qw2Er5Ty8Ui1Op4As6Df9Gh3Jk0"  # one it never sent, which the server echoes all the same


def percent_encoded(text: str) -> str:
    return "".join(f"%{byte:02X}" for byte in text.encode())


def echoes(key: str) -> dict[str, str]:
    """The ways a server writes back a key it was sent."""
    return {
        "plain": key,
        "base64": base64.b64encode(key.encode()).decode(),
        "base64 of the header": base64.b64encode(f"Bearer {key}".encode()).decode(),
        "url-safe base64 of the header": base64.urlsafe_b64encode(f"x-api-key: {key}".encode()).decode(),
        "url-encoded": percent_encoded(key),
        "url-encoded header": f"Bearer%20{key}",
    }


ECHOED = [form for key in (KEY, OTHER) for form in echoes(key).values()]
MESSAGE = "Incorrect API key provided: " + ", ".join(ECHOED) + "."


def test_redact_masks_each_encoding_and_keeps_the_length():
    for form in ECHOED:
        masked = redact(f"key {form}.")
        assert form not in masked and len(masked) == len(form) + 5
    known = base64.b64encode(b"user:hunter2-correct-horse").decode()  # a secret that is not key-shaped
    assert "hunter2" not in redact(f"auth hunter2-correct-horse {known}", ("hunter2-correct-horse",))
    assert "aHVudGVyMi1jb3JyZWN0LWhvcnNl" not in redact(known, ("hunter2-correct-horse",))
    plain = "a reply with 1234 and aGVsbG8gd29ybGQgaGVsbG8gd29ybGQ= and 50%25 off"
    assert redact(plain) == plain  # base64 and escapes that hold no key are left alone


def export(trace) -> str:
    spans = trace.parent / "spans.json"
    assert main(["trace", "export", str(trace), "-o", str(spans)]) == 0
    return spans.read_text()


def leaked(text: str) -> list[str]:
    return [form for form in ECHOED if form in text]


@pytest.mark.parametrize("flavor", ["openai", "anthropic"])
def test_an_echoed_key_reaches_neither_the_trace_nor_the_spans(flavor, tmp_path, monkeypatch, capsys):
    pytest.importorskip("opentelemetry.sdk")
    monkeypatch.setenv("BAMASC_TEST_KEY", KEY)
    body = {"error": {"message": MESSAGE, "type": "invalid_request_error"}, "type": "error"}
    server = ScriptedServer(flavor, responder=lambda request: status(400, body=body)).start()
    try:
        program_for(tmp_path, flavor, server.base_url)
        (tmp_path / "tasks.jsonl").write_text(json.dumps({"id": "t1", "task": "What is 3 plus 4?"}) + "\n")
        trace = tmp_path / "trace.jsonl"
        main(["exec", str(tmp_path / "wire.bam"), "--dataset", str(tmp_path / "tasks.jsonl"), "--trace", str(trace)])
    finally:
        server.close()
    printed = capsys.readouterr()
    lines = [json.loads(line) for line in trace.read_text().splitlines()]
    errors = [line["error"] for line in lines if line.get("error")]
    assert errors and all("rejected the request (HTTP 400)" in error for error in errors)  # still says what failed
    assert leaked(trace.read_text()) == []
    assert leaked(printed.out + printed.err) == []
    assert leaked(export(trace)) == []


def test_a_trace_written_before_keys_were_masked_exports_none(tmp_path, monkeypatch, capsys):
    pytest.importorskip("opentelemetry.sdk")
    test_an_echoed_key_reaches_neither_the_trace_nor_the_spans("openai", tmp_path, monkeypatch, capsys)
    trace = tmp_path / "trace.jsonl"
    old = [{**json.loads(line), **({"error": MESSAGE} if '"error": "' in line else {})}
           for line in trace.read_text().splitlines()]
    trace.write_text("".join(json.dumps(line) + "\n" for line in old))
    assert leaked(trace.read_text())  # the trace holds the keys as an older writer left them ...
    spans = export(trace)
    assert "bamasc.error" in spans and leaked(spans) == []  # ... and no span attribute does
