"""Helpers for the language server's hostile-input tests: framing, the lies a client can tell, and a raw
stdio client of `bamasc lsp` that writes bytes and reads back whole messages."""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
from typing import Any

from tests.conftest import ROOT

ENV = {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}
ANSWER_SECONDS = 60  # only so that a lost answer fails the test instead of hanging it; nothing is timed
OVER_THE_LIMIT = 8 * 8 * 1024 * 1024 + 1  # one byte past the largest message the server reads

# Garbage made of the pieces of headers and bodies, so that it half-builds headers and lies.
PIECES = [b"Content-Length:", b"content-length: ", b" 5", b"12", b"999999999999", b"-1", b"abc", b"\r\n", b"\r", b"\n"]
PIECES += [b'"', b"{", b"}", b"Content-Type: x", b"C", b"ontent", b"-Length", b": ", b"\x00\xff", b'{"id": 3, "method": "m"']


def framed(body: bytes, length: bytes | None = None, fields: bytes = b"") -> bytes:
    """`body` as a message, with `length` declared instead of its own if given, and `fields` after it."""
    declared = str(len(body)).encode() if length is None else length
    return b"Content-Length: " + declared + b"\r\n" + fields + b"\r\n" + body


def request_body(msg_id: int, method: str = "workspace/symbol", params: Any = None) -> bytes:
    params = {"query": ""} if params is None else params
    return json.dumps({"jsonrpc": "2.0", "id": msg_id, "method": method, "params": params}).encode()


def lies(body: bytes) -> dict[str, bytes]:
    """Each way a message can be mis-framed, around `body`."""
    return {
        "huge": framed(body, b"999999999999"),
        "over the limit": framed(body, str(OVER_THE_LIMIT).encode()),
        "400 digits": framed(body, b"9" * 400),
        "negative": framed(body, b"-5"),
        "not a number": framed(body, b"abc"),
        "empty": framed(body, b""),
        "no header": body,
        "only a content type": b"Content-Type: application/vscode-jsonrpc\r\n\r\n" + body,
        "no blank line": b"Content-Length: 5\r\n" + body,
        "shorter": framed(body, str(len(body) + 300).encode()),
        "longer": framed(body, str(len(body) - 3).encode()),
        "header glued to garbage": b"\x00\xff}{" + framed(body, b"3"),
        "garbage": b"\xff\xfe garbage \x00",
        "unfinished header": b"Content-Length: ",
    }


# The lies whose request can still be read: its id gets an error.
READABLE = sorted(set(lies(b"{}")) - {"garbage", "unfinished header"})


class Wire:
    """`bamasc lsp` in a subprocess: raw bytes in; the messages it writes, by id, out."""

    def __init__(self):
        self.process = subprocess.Popen(
            [sys.executable, "-m", "bamasc", "lsp"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, env=ENV, cwd=ROOT,
        )
        self.messages: queue.Queue[dict | None] = queue.Queue()
        self.answers: dict[Any, dict] = {}
        self.notifications: list[dict] = []
        self.unaddressed: list[dict] = []  # errors with a null id: for input whose id could not be read
        self.stderr = bytearray()
        self.next_id = 1000
        threading.Thread(target=self._read, daemon=True).start()
        # The server logs each refusal; a full stderr pipe would stop it.
        threading.Thread(target=self._drain, daemon=True).start()

    def _read(self) -> None:
        out = self.process.stdout
        while True:
            length = None
            while (line := out.readline()) not in (b"\r\n", b""):
                name, _, value = line.partition(b":")
                if name.lower() == b"content-length":
                    length = int(value)
            if not line or length is None:
                self.messages.put(None)
                return
            self.messages.put(json.loads(out.read(length)))

    def _drain(self) -> None:
        while chunk := self.process.stderr.read1(65536):
            self.stderr += chunk[-65536:]
            del self.stderr[:-65536]

    def send(self, data: bytes) -> None:
        self.process.stdin.write(data)
        self.process.stdin.flush()

    def request(self, method: str, params: Any) -> int:
        self.next_id += 1
        self.send(framed(request_body(self.next_id, method, params)))
        return self.next_id

    def notify(self, method: str, params: Any) -> None:
        self.send(framed(json.dumps({"jsonrpc": "2.0", "method": method, "params": params}).encode()))

    def answer(self, msg_id: Any) -> dict:
        """The server's response to the request `msg_id`."""
        while msg_id not in self.answers:
            self._next(f"no answer to {msg_id!r}")
        return self.answers.pop(msg_id)

    def notification(self, method: str, wanted) -> dict:
        """The first notification `method` from the server whose params are `wanted` (a predicate)."""
        seen = 0
        while True:
            for message in self.notifications[seen:]:
                if message["method"] == method and wanted(message["params"]):
                    return message
            seen = len(self.notifications)
            self._next(f"no {method} as wanted")

    def _next(self, missing: str) -> None:
        try:
            message = self.messages.get(timeout=ANSWER_SECONDS)
        except queue.Empty:
            raise AssertionError(f"{missing}; stderr:\n{self.stderr.decode(errors='replace')}") from None
        if message is None:
            raise AssertionError(f"the server closed its output; stderr:\n{self.stderr.decode(errors='replace')}")
        if "method" in message:
            self.notifications.append(message)
        elif message.get("id") is None:
            self.unaddressed.append(message)
        else:
            self.answers[message["id"]] = message

    def call(self, method: str, params: Any) -> dict:
        return self.answer(self.request(method, params))

    def initialize(self) -> dict:
        params = {"processId": None, "rootUri": "file://" + ROOT, "capabilities": {}}
        answer = self.call("initialize", params)
        self.notify("initialized", {})
        return answer

    def close(self) -> int:
        if self.process.poll() is None:
            try:
                self.call("shutdown", None)
                self.notify("exit", None)
                return self.process.wait(timeout=ANSWER_SECONDS)
            finally:
                if self.process.poll() is None:
                    self.process.kill()
        return self.process.returncode
