"""The server's stdio transport: the framing of `framing.py` under pygls, and an answer for every request.

pygls's own loop (`pygls.io_.run_async`) is replaced, not wrapped, because the faults are in it:

- it reads a body with one `read(Content-Length)`, so a huge declared length allocates it at once and the
  MemoryError ends the server;
- it knows a header only as a whole line `Content-Length: <digits>\\r\\n`, so after a bad header (`-5`,
  `abc`) the unread body runs into the next header line, which then never matches: every later
  message is lost;
- it decodes and types a message in one `json.loads(object_hook=...)` and on any failure only logs, so a
  request with invalid params (a hover at line -5) or that is not JSON-RPC is never answered.

Here the bytes go through a `Framer`, and `BamProtocol.receive` answers each request it cannot handle with
a JSON-RPC error, by id when the id can be read. Everything past that is pygls's (`handle_message`).
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
import threading
from concurrent.futures import Executor
from typing import Any, BinaryIO

from lsprotocol import types
from pygls.protocol import LanguageServerProtocol

from bamasc.lsp.framing import Frame, Framer, request_in

READ_BYTES = 64 * 1024  # at most this much is read at once: what the pipe holds, never what a header claims

# JSON-RPC's error codes (LSP adds its own above them).
PARSE_ERROR = -32700
INVALID_REQUEST = -32600
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603

logger = logging.getLogger(__name__)


class BamProtocol(LanguageServerProtocol):
    """pygls's protocol with a check before each message: what it would drop unanswered is answered here."""

    def receive(self, frame: Frame) -> None:
        """Handle one frame from the input; a request that cannot be handled gets an error."""
        if frame.problem is not None:
            logger.warning("refused input: %s", frame.problem)
            request = request_in(frame.body)
            if request is not None and _valid_id(request["id"]):
                self.fail(request["id"], INVALID_REQUEST, f"{frame.problem}; the request is not handled")
            else:
                self.fail(None, PARSE_ERROR, frame.problem)
            return
        try:
            payload = json.loads(frame.body)
        except ValueError as problem:  # a UnicodeDecodeError is one too
            self.fail(None, PARSE_ERROR, f"the body is not JSON: {problem}")
            return
        self.dispatch(payload)

    def dispatch(self, payload: Any) -> None:
        """Type a decoded message and hand it to pygls; answer a request refused on the way."""
        if not isinstance(payload, dict):
            self.fail(None, INVALID_REQUEST, "a message is one JSON object (LSP has no batches)")
            return
        is_request = "method" in payload and "id" in payload
        msg_id = payload.get("id")
        problem = _envelope_problem(payload)
        if problem is not None:
            if is_request:
                self.fail(msg_id if _valid_id(msg_id) else None, INVALID_REQUEST, problem)
            else:
                logger.warning("ignored a message: %s", problem)
            return
        try:
            message = self.structure_message(payload)
        except Exception as error:  # cattrs' validation, wrapped by pygls as JsonRpcInvalidParams
            cause = error.__cause__ or error
            if is_request:
                self.fail(msg_id, INVALID_PARAMS, f"invalid params for {payload['method']}: {_summary(cause)}")
            else:
                logger.warning("ignored %s: invalid params: %s", payload.get("method", "a response"), _summary(cause))
            return
        try:
            self.handle_message(message)
        except Exception:
            # pygls answers a request itself once it is dispatched; this is a failure before that.
            logger.exception("failed to handle %s", payload.get("method", "a response"))
            if is_request:
                self.fail(msg_id, INTERNAL_ERROR, f"internal error before handling {payload['method']}")

    def handle_message(self, message) -> None:
        # pygls drops a request that comes after `shutdown` without an answer; LSP says it fails.
        method = getattr(message, "method", None)
        if self._shutdown and method not in (None, types.EXIT) and hasattr(message, "id"):
            self.fail(message.id, INVALID_REQUEST, f"{method}: the server is shutting down")
            return
        super().handle_message(message)

    def fail(self, msg_id: int | str | None, code: int, message: str) -> None:
        """Send a JSON-RPC error for the request `msg_id` (null: a request whose id cannot be read)."""
        self._send_data({"jsonrpc": "2.0", "id": msg_id, "error": {"code": code, "message": message}})


def _valid_id(msg_id: Any) -> bool:
    return isinstance(msg_id, (int, str)) and not isinstance(msg_id, bool)


def _envelope_problem(payload: dict) -> str | None:
    """Why `payload` is not a JSON-RPC 2.0 message, or None."""
    if payload.get("jsonrpc") != "2.0":
        return 'not JSON-RPC: "jsonrpc" must be "2.0"'
    if "id" in payload and not _valid_id(payload["id"]):
        return "the id must be an integer or a string"
    if "method" in payload:
        if not isinstance(payload["method"], str):
            return "the method must be a string"
        if "params" in payload and not isinstance(payload["params"], (dict, list, type(None))):
            return "params must be an object or an array"
    elif "id" not in payload or not ("result" in payload or "error" in payload):
        return "neither a request, a notification nor a response"
    return None


def _summary(error: BaseException) -> str:
    """One line for a (cattrs) validation error: its innermost causes, not the whole tree."""
    leaves = []

    def walk(found: BaseException) -> None:
        inner = getattr(found, "exceptions", None)
        if inner:
            for each in inner:
                walk(each)
        else:
            leaves.append(f"{type(found).__name__}: {found}")

    walk(error)
    return "; ".join(leaves[:3]) + (f" (and {len(leaves) - 3} more)" if len(leaves) > 3 else "")


async def read_frames(stop: threading.Event, stream: BinaryIO, protocol: BamProtocol, executor: Executor) -> None:
    """Feed `stream` to a `Framer` and each frame to `protocol` until the stream ends or `stop` is set."""
    loop = asyncio.get_running_loop()
    framer = Framer()
    while not stop.is_set():
        data = await loop.run_in_executor(executor, stream.read1, READ_BYTES)
        if not data:
            break
        for frame in framer.feed(data):
            try:
                protocol.receive(frame)
            except BrokenPipeError:
                raise
            except Exception:
                logger.exception("failed to handle a message")


def serve_stdio(server, stdin: BinaryIO | None = None, stdout: BinaryIO | None = None) -> None:
    """Run `server` (a pygls LanguageServer with a BamProtocol) on stdio: pygls's `start_io`, with this reader."""
    from pygls.io_ import StdoutWriter

    server._stop_event = threading.Event()  # what pygls's `shutdown` sets to end its loop, and so this one
    server.protocol.set_writer(StdoutWriter(stdout or sys.stdout.buffer))
    try:
        asyncio.run(read_frames(server._stop_event, stdin or sys.stdin.buffer, server.protocol, server.thread_pool))
    except BrokenPipeError:
        logger.error("the editor closed the connection")
    except (KeyboardInterrupt, SystemExit):
        pass
    finally:
        server.shutdown()
