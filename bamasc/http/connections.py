"""What a connection may do before the app holds its request: a cap on open connections, and a time and size for a request's head.

uvicorn caps requests in progress (`limit_concurrency`: 503 once a request's
head is read) and closes a kept-alive connection idle between requests
(`timeout_keep_alive`), but it keeps a connection that never completes a
request's head for ever, and its httptools parser buffers a head of any
size. So a connection past the cap is answered 503 as it opens and closed;
a request's head (line and headers) still incomplete past `max_head` bytes
gets 431 (one read, at most 256 KiB, may complete a longer one); a head
not complete `request_s` seconds after the connection opened (or its
previous response ended) gets 408, and a connection that sent nothing is
closed without a word. The body is the app's: `requests.read_body` answers
408 when it is slower than the same `request_s`, and a body still trickling
in after its response is cut off `request_s` later. The limits ride on
uvicorn's own HTTP protocol class, subclassed; nothing here parses HTTP.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from typing import Any

from bamasc.http.requests import Problem

REASONS = {408: "Request Timeout", 431: "Request Header Fields Too Large", 503: "Service Unavailable"}
FILES_SPARE = 64  # open files kept for the trace, the listening socket, logs and imports, beyond the connections
# Open files per connection held. asyncio accepts a backlog of sockets on each turn of its loop, builds their
# transports on the next, calls `connection_made` (which refuses one past the cap) on the one after, and closes
# the socket on the next again: beside those held, up to three backlogs (as many again, each) are being refused.
FILES_PER_CONNECTION = 4


@dataclass(frozen=True)
class ConnectionLimits:
    max_connections: int  # connections open at once; one more is answered 503 and closed as it opens
    max_head: int  # bytes of a request's line and headers
    request_s: float  # seconds for a request's head to arrive (and, in the app, for its body)


def refusal(status: int, message: str) -> bytes:
    """A whole HTTP/1.1 response that refuses a request with the app's JSON error, and says the connection closes."""
    body = json.dumps(Problem(status, message).body()).encode("utf-8")
    head = (f"HTTP/1.1 {status} {REASONS[status]}\r\ncontent-type: application/json\r\n"
            f"content-length: {len(body)}\r\nconnection: close\r\n\r\n")
    return head.encode("ascii") + body


def limited_protocol(base: type, limits: ConnectionLimits, responses: Counter[int] | None = None) -> type:
    """uvicorn's HTTP protocol class `base` (httptools or h11) with `limits` on each connection;
    every refusal is counted in `responses` by status."""

    class Limited(base):  # type: ignore[valid-type, misc]
        _deadline: Any = None  # the timer of the request being received, or None
        _head_bytes = 0  # bytes received since the request's head began
        _late = False  # the deadline passed once while the app held the request

        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            if len(self.connections) > limits.max_connections:
                self._refuse(503, f"{limits.max_connections} connections are open; try again later")
                return
            self._watch()

        def connection_lost(self, problem: Exception | None) -> None:
            self._stop_deadline()  # a pending timer would keep this connection's objects alive
            super().connection_lost(problem)

        def data_received(self, data: bytes) -> None:
            cycle = self.cycle
            if self._awaiting_head():
                self._head_bytes += len(data)
            super().data_received(data)
            if self.transport.is_closing():
                return
            if self.cycle is not cycle:
                self._head_bytes = 0  # a head was completed: the app holds its request
            elif self._awaiting_head() and self._head_bytes > limits.max_head:
                self._refuse(431, f"the request's line and headers are over {limits.max_head} bytes")
                return
            self._watch()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            self._late = False
            if not self.transport.is_closing():
                self._watch()

        def _awaiting_head(self) -> bool:
            """Whether bytes that arrive now belong to a request's head (not to a body)."""
            return self.cycle is None or not self.cycle.more_body

        def _receiving(self) -> bool:
            """Whether a request is being received: none has begun to be answered since the last response."""
            cycle = self.cycle
            return cycle is None or cycle.more_body or cycle.response_complete

        def _watch(self) -> None:
            if self._receiving():
                if self._deadline is None:
                    self._deadline = self.loop.call_later(limits.request_s, self._overdue)
            else:
                self._stop_deadline()

        def _stop_deadline(self) -> None:
            if self._deadline is not None:
                self._deadline.cancel()
                self._deadline = None

        def _overdue(self) -> None:
            self._deadline = None
            if self.transport.is_closing():
                return
            cycle = self.cycle
            if cycle is None or (cycle.response_complete and not cycle.more_body):
                if not self._head_bytes:  # nothing sent: closed without a word, as a kept-alive connection is
                    self.transport.close()
                    return
                self._refuse(408, f"the request's head did not arrive within {limits.request_s:g} s")
            elif cycle.response_complete or self._late:
                self.transport.close()  # a body trickling in after its response, or one the app did not refuse
            else:
                self._late = True  # the app reads this body and answers 408 itself when it is too slow
                self._watch()

        def _refuse(self, status: int, message: str) -> None:
            self._stop_deadline()
            if responses is not None:
                responses[status] += 1
            self.transport.write(refusal(status, message))
            self.transport.close()

    Limited.__name__ = Limited.__qualname__ = f"Limited{base.__name__}"
    return Limited


def open_files_allowed(wanted: int) -> int:
    """Raise this process's soft limit on open files toward `wanted` (at most the hard limit); the limit now.
    Sockets past it would fail to be accepted, a traceback in asyncio's log."""
    try:
        import resource
    except ImportError:  # not a POSIX system: nothing to raise
        return wanted
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < wanted:
        raised = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (raised, hard))
            soft = raised
        except (OSError, ValueError):
            pass
    return wanted if soft == resource.RLIM_INFINITY else soft
