"""Scripted local HTTP servers that speak the OpenAI chat-completions and Anthropic messages wire formats.

Each request takes the next scripted action (a normal reply when the script
is empty) and is recorded, authorization headers left out, so a test can
assert what the SDK sent. Use the fixtures from another test module with
`from tests.runtime.servers import openai_server, anthropic_server`.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

SECRET_HEADERS = frozenset({"authorization", "x-api-key", "api-key"})


@dataclass(frozen=True)
class Action:
    """What the server does with one request."""

    kind: str  # reply | status | slow | malformed | truncated | drop | raw | huge | drip | hang
    text: str = "Hello from the test server."
    prompt_tokens: int = 11
    completion_tokens: int = 7
    finish_reason: str | None = None
    status: int = 200
    headers: tuple[tuple[str, str], ...] = ()  # sent with a `reply` or a `status`
    body: object = None  # JSON body of a `status` action; a provider-shaped error when None
    delay: float = 0.0  # seconds a `slow` action waits before it replies; a `drip` between bytes
    raw: bytes = b""  # the body of a `raw` or `drip` action, sent as given
    size: int = 0  # bytes of a `huge` body
    declared: bool = True  # a `huge` body announces its length (else it is chunked)


def reply(
    text: str = "Hello from the test server.",
    *,
    prompt_tokens: int = 11,
    completion_tokens: int = 7,
    finish_reason: str | None = None,
) -> Action:
    return Action(
        "reply",
        text=text,
        prompt_tokens=prompt_tokens,
        completion_tokens=completion_tokens,
        finish_reason=finish_reason,
    )


def status(code: int, *, headers: dict[str, str] | None = None, body: object = None) -> Action:
    return Action("status", status=code, headers=tuple((headers or {}).items()), body=body)


def slow(delay: float) -> Action:
    return Action("slow", delay=delay)


def malformed() -> Action:
    return Action("malformed")


def truncated() -> Action:
    return Action("truncated")


def drop() -> Action:
    return Action("drop")


def raw(body: bytes | str, code: int = 200) -> Action:
    """A body sent byte for byte: literal `Infinity`, `1e999`, strings where numbers belong."""
    return Action("raw", raw=body.encode() if isinstance(body, str) else body, status=code)


def huge(size: int, *, declared: bool = True) -> Action:
    """A body of `size` bytes, streamed until the client stops reading."""
    return Action("huge", size=size, declared=declared)


def drip(body: bytes | str, delay: float) -> Action:
    """A whole, valid body sent one byte at a time, `delay` seconds apart."""
    return Action("drip", raw=body.encode() if isinstance(body, str) else body, delay=delay)


def hang() -> Action:
    """Read the request and never answer."""
    return Action("hang")


@dataclass(frozen=True)
class Request:
    """One request as the server received it."""

    method: str
    path: str
    headers: dict[str, str]  # lower-cased names, secrets removed
    had_auth: bool  # whether an authorization or x-api-key header came with it
    body: object  # the parsed JSON body, or the raw text when it was not JSON


@dataclass
class ScriptedServer:
    flavor: str  # openai | anthropic
    requests: list[Request] = field(default_factory=list)
    _script: deque = field(default_factory=deque)
    responder: object = None  # request body -> Action; answers every request when set (concurrent runs)
    bytes_sent: int = 0  # body bytes of `huge` actions that reached the socket
    _stopping: threading.Event = field(default_factory=threading.Event)
    _httpd: ThreadingHTTPServer | None = None
    _thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return self._httpd.server_address[1]

    @property
    def base_url(self) -> str:
        """What to pass the SDK as base_url (OpenAI's paths start below /v1, Anthropic's include it)."""
        root = f"http://127.0.0.1:{self.port}"
        return root + "/v1" if self.flavor == "openai" else root

    def script(self, *actions: Action) -> None:
        self._script.extend(actions)

    def next_action(self, body: object = None) -> Action:
        if self.responder is not None:
            return self.responder(body)
        try:
            return self._script.popleft()
        except IndexError:
            return reply()

    def start(self) -> ScriptedServer:
        server = self

        class Handler(_Handler):
            owner = server

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        self._stopping.set()  # wakes any slow reply still sleeping
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()

    def wait(self, seconds: float) -> None:
        self._stopping.wait(seconds)

    # --- bodies in the two wire formats

    def reply_body(self, request_body: object, action: Action) -> dict:
        model = request_body.get("model", "unknown") if isinstance(request_body, dict) else "unknown"
        if self.flavor == "openai":
            return {
                "id": "chatcmpl-test",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": model,
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": action.text},
                        "finish_reason": action.finish_reason or "stop",
                    }
                ],
                "usage": {
                    "prompt_tokens": action.prompt_tokens,
                    "completion_tokens": action.completion_tokens,
                    "total_tokens": action.prompt_tokens + action.completion_tokens,
                },
            }
        return {
            "id": "msg_test",
            "type": "message",
            "role": "assistant",
            "content": [{"type": "text", "text": action.text}],
            "model": model,
            "stop_reason": action.finish_reason or "end_turn",
            "stop_sequence": None,
            "usage": {"input_tokens": action.prompt_tokens, "output_tokens": action.completion_tokens},
        }

    def error_body(self, code: int) -> dict:
        if self.flavor == "openai":
            kinds = {429: "rate_limit_exceeded", 400: "invalid_request_error", 401: "invalid_api_key"}
            return {"error": {"message": f"test error {code}", "type": kinds.get(code, "server_error"), "code": None}}
        kinds = {
            429: "rate_limit_error",
            400: "invalid_request_error",
            401: "authentication_error",
            529: "overloaded_error",
        }
        return {"type": "error", "error": {"type": kinds.get(code, "api_error"), "message": f"test error {code}"}}


class _Handler(BaseHTTPRequestHandler):
    owner: ScriptedServer

    def log_message(self, format, *args):  # keep test output quiet
        pass

    def do_GET(self):
        self._serve()

    def do_POST(self):
        self._serve()

    def _serve(self) -> None:
        try:
            self._answer()
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up first (a timeout test): nothing left to answer

    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = raw.decode("utf-8", "replace")
        headers = {name.lower(): value for name, value in self.headers.items()}
        self.owner.requests.append(
            Request(
                method=self.command,
                path=self.path,
                headers={name: value for name, value in headers.items() if name not in SECRET_HEADERS},
                had_auth=any(name in headers for name in SECRET_HEADERS),
                body=body,
            )
        )
        action = self.owner.next_action(body)
        if action.kind == "raw":
            self._send_raw(action.status, action.raw)
            return
        if action.kind == "huge":
            self._stream_huge(action)
            return
        if action.kind == "drip":
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(action.raw)))
            self.end_headers()
            for byte in action.raw:
                if self.owner._stopping.is_set():
                    return
                self.wfile.write(bytes([byte]))
                self.wfile.flush()
                self.owner.wait(action.delay)
            return
        if action.kind == "hang":
            self.owner.wait(3600)
            return
        if action.kind == "drop":
            self._cut()
            return
        if action.kind == "slow":
            self.owner.wait(action.delay)
            self._send(200, self.owner.reply_body(body, action))
            return
        if action.kind == "malformed":
            self._send_raw(200, b'{"id": "chatcmpl-test", "choices": [ {"message": ')
            return
        if action.kind == "truncated":
            payload = json.dumps(self.owner.reply_body(body, action)).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload) + 200))
            self.end_headers()
            self.wfile.write(payload[: len(payload) // 2])
            self.wfile.flush()
            self._cut()
            return
        if action.kind == "status":
            error = action.body if action.body is not None else self.owner.error_body(action.status)
            self._send(action.status, error, dict(action.headers))
            return
        self._send(200, self.owner.reply_body(body, action), dict(action.headers))

    def _send(self, code: int, payload: object, headers: dict[str, str] | None = None) -> None:
        self._send_raw(code, json.dumps(payload).encode(), headers)

    def _send_raw(self, code: int, payload: bytes, headers: dict[str, str] | None = None) -> None:
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(payload)
        self.wfile.flush()

    def _stream_huge(self, action: Action) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        if action.declared:
            self.send_header("Content-Length", str(action.size))
        else:
            self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        chunk = b'{"pad": "' + b"x" * (64 * 1024 - 10)
        left = action.size
        while left > 0 and not self.owner._stopping.is_set():
            piece = chunk[: min(len(chunk), left)]
            self.wfile.write(piece if action.declared else b"%x\r\n%s\r\n" % (len(piece), piece))
            self.owner.bytes_sent += len(piece)
            left -= len(piece)
        self.wfile.flush()

    def _cut(self) -> None:
        """Close the connection at once, without an answer or with the rest of one missing."""
        self.close_connection = True
        try:
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


@pytest.fixture
def openai_server():
    server = ScriptedServer("openai").start()
    yield server
    server.close()


@pytest.fixture
def anthropic_server():
    server = ScriptedServer("anthropic").start()
    yield server
    server.close()
