"""Runs the app on uvicorn: the session opened first (trace locked, earlier spend counted), the socket bound, then served."""

from __future__ import annotations

import asyncio
import logging
import signal
import socket
import sys
from collections import Counter
from dataclasses import dataclass
from typing import Any, Literal

from bamasc.serve.app import Limits, build_app
from bamasc.http.connections import FILES_PER_CONNECTION, FILES_SPARE, ConnectionLimits, limited_protocol, open_files_allowed

# Connections and requests uvicorn takes, as a multiple of the requests the app serves at once (the app answers
# 429 beyond those; uvicorn 503 beyond these): idle connections hold a little memory each.
CONNECTIONS_PER_REQUEST = 2
BACKLOG = 2048  # uvicorn's default: connections the kernel queues for accept, and asyncio accepts at a time


@dataclass(frozen=True)
class Listen:
    host: str = "127.0.0.1"
    port: int = 8080
    log_level: str = "warning"
    graceful_s: int = 30  # on SIGTERM or Ctrl-C: how long tasks in flight may finish (their reservations stay)


def bind(listen: Listen) -> socket.socket:
    """The listening socket (raises OSError, e.g. the port is taken)."""
    family = socket.AF_INET6 if ":" in listen.host else socket.AF_INET
    # IPPROTO_TCP named: asyncio sets TCP_NODELAY on accepted sockets only when the protocol says TCP, and without
    # it a reply written in two parts waits for the client's delayed ACK (40 ms per kept-alive request).
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((listen.host, listen.port))
        sock.set_inheritable(True)
    except BaseException:
        sock.close()
        raise
    return sock


async def serve(plan: Any, session: Any, token: bytes | None, listen: Listen, limits: Limits,
                sock: socket.socket, announce: Any = None, gate: Any = None) -> None:
    """Serve `session` (already open) on `sock` until a signal stops the server; then close the session."""
    from uvicorn.protocols.http.auto import AutoHTTPProtocol  # what uvicorn's http="auto" runs: httptools, else h11

    connections = connection_cap(limits.max_requests * CONNECTIONS_PER_REQUEST)
    responses: Counter[int] = Counter()
    app = build_app(plan, session, token, limits, responses, gate)
    protocol = limited_protocol(AutoHTTPProtocol, ConnectionLimits(connections, limits.max_head, limits.request_s),
                                responses)
    try:
        # uvicorn answers 503 to a head read when as many connections are open as its limit: one above the cap
        # the protocol refuses at, so every connection held is served. asyncio accepts up to `backlog`
        # connections before any is refused: at most as many as are held.
        await run_app(app, listen, sock, announce, limit_concurrency=connections + 1, http=protocol,
                      backlog=min(BACKLOG, connections), h11_max_incomplete_event_size=limits.max_head)
        if app.state.streamed:  # streamed tasks whose clients went away get the same graceful time
            await asyncio.wait(set(app.state.streamed), timeout=listen.graceful_s)
    finally:
        await session.close()


def connection_cap(wanted: int, command: str = "serve") -> int:
    """The connections the server may hold: `wanted`, or fewer where the open-files limit cannot be raised so far.
    Beside those held, asyncio may have accepted three backlogs (as many again, each) that are being refused."""
    allowed = (open_files_allowed(FILES_PER_CONNECTION * wanted + FILES_SPARE) - FILES_SPARE) // FILES_PER_CONNECTION
    if allowed < wanted:
        say(f"warning: the open-files limit (ulimit -n) allows {max(allowed, 1)} connections, not {wanted}", command)
    return max(1, min(wanted, allowed))


async def run_app(app: Any, listen: Listen, sock: socket.socket, announce: Any = None,
                  limit_concurrency: int | None = None, lifespan: Literal["auto", "on", "off"] = "off",
                  **settings: Any) -> None:
    """Run an ASGI app on uvicorn on `sock` until SIGINT or SIGTERM, then return after a graceful stop
    (`bamasc serve` and `bamasc proxy`): requests in flight get `listen.graceful_s` to finish. `settings`
    go to uvicorn.Config as they are."""
    import uvicorn

    config = uvicorn.Config(
        app, lifespan=lifespan, access_log=False, log_level=listen.log_level, server_header=False,
        limit_concurrency=limit_concurrency, timeout_graceful_shutdown=listen.graceful_s, **settings,
    )
    server = uvicorn.Server(config)
    quiet_uvicorn_errors()
    asyncio.get_running_loop().set_exception_handler(_one_line)
    # uvicorn stops gracefully on SIGINT and SIGTERM, then raises the signal again with the handlers it found:
    # these take it, so the caller cleans up and the command exits 0 after a graceful stop.
    before = {number: signal.signal(number, _taken) for number in (signal.SIGINT, signal.SIGTERM)}
    runner = asyncio.ensure_future(server.serve(sockets=[sock]))
    try:
        while not server.started and not runner.done():
            await asyncio.sleep(0.02)
        if server.started and announce is not None:
            host, port = sock.getsockname()[:2]
            announce(f"http://{host if ':' not in host else f'[{host}]'}:{port}")
        await runner
    finally:
        for number, handler in before.items():
            signal.signal(number, handler)


def _taken(number: int, frame: Any) -> None:
    """A signal uvicorn already acted on."""


def _one_line(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    """asyncio's report of an error outside any request (a socket it could not accept, say) as one log line:
    its default handler writes a traceback."""
    problem = context.get("exception")
    detail = f": {type(problem).__name__}: {str(problem)[:300]}" if problem is not None else ""
    logging.getLogger("bamasc.serve").error("%s%s", context.get("message", "asyncio error"), detail)


def quiet_uvicorn_errors() -> None:
    """uvicorn logs a traceback for an app that raises; this app never does, but keep its log to one line if it did."""

    class OneLine(logging.Filter):
        def filter(self, record: logging.LogRecord) -> bool:
            if record.exc_info:
                kind, problem = record.exc_info[0], record.exc_info[1]
                record.msg = f"{record.getMessage()}: {getattr(kind, '__name__', kind)}: {problem}"
                record.args = None
                record.exc_info = None
                record.exc_text = None
            return True

    logging.getLogger("uvicorn.error").addFilter(OneLine())


def say(message: str, command: str = "serve") -> None:
    print(f"bamasc {command}: {message}", file=sys.stderr, flush=True)
