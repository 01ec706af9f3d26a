"""MCP tool servers: one child process per declared server per run, spoken to by the official `mcp` SDK client.

The SDK's `ClientSession` speaks the protocol; the transport under it is
`tool_process.ChildProcess`, which bounds each message and stderr and stops
the server's whole process group. The session is entered and left in one task
of its own (the SDK's task groups must be), so a call may come from any task.
A server that exits, crashes or sends a message over the limit fails the calls
in flight with an error result; it is not restarted, and later calls to it get
the same error.
"""

from __future__ import annotations

import asyncio
import functools
import importlib.util
import inspect
import json
import shlex
import sys

from bamasc.runtime import tool_process
from bamasc.runtime.tool_process import GRACE_S, ChildProcess, Oversized
from bamasc.runtime.tool_text import Cutter, describe_exception

STARTUP_TIMEOUT_S = 30.0
_MAX_PAGES = 100  # tools/list pages: a server that never stops paging is refused
_PYTHON = ("python", "python3")


def command_argv(command: str) -> list[str]:
    """The server's argv: the command line split as a POSIX shell would; a leading `python` is this interpreter."""
    argv = shlex.split(command)
    if not argv:
        raise ValueError("the command line is empty")
    if argv[0] in _PYTHON:
        argv[0] = sys.executable
    return argv


class McpServer:
    """One MCP server of a run: started, its tools listed, called, and stopped."""

    def __init__(self, name: str, command: str, cwd: str | None = None):
        self.name = name
        self.command = command
        self.cwd = cwd
        self.child: ChildProcess | None = None
        self.session = None
        self.ended: str | None = None  # why calls can no longer reach the server
        self.skipped_lines = 0  # stdout lines that were not JSON-RPC (a stray print), skipped
        self._output_ended = False
        self._in_flight: set[asyncio.Future] = set()
        self._tasks: list[asyncio.Task] = []
        self._owner: asyncio.Task | None = None
        self._stop: asyncio.Event | None = None
        self._streams: tuple = ()

    @property
    def pid(self) -> int | None:
        return self.child.pid if self.child else None

    def stderr_text(self) -> str:
        return self.child.stderr_text() if self.child else ""

    async def start(self, timeout_s: float = STARTUP_TIMEOUT_S) -> dict[str, tuple[str, object]]:
        """Start the server and list its tools: {name: (description, input schema)}. Raises RuntimeError."""
        import anyio
        from mcp.client.stdio import get_default_environment

        try:
            argv = command_argv(self.command)
        except ValueError as exc:
            raise RuntimeError(f"mcp = {self.command!r}: {exc}") from None
        try:
            # The SDK's default environment (HOME, PATH, ...): the run's API keys are not handed to a server.
            self.child = await ChildProcess.start(argv, self.cwd, get_default_environment())
        except OSError as exc:
            raise RuntimeError(f"cannot start {self.command!r}: {describe_exception(exc, 400)}") from None
        to_session, session_reads = anyio.create_memory_object_stream(0)
        session_writes, from_session = anyio.create_memory_object_stream(0)
        self._streams = (to_session, session_reads, session_writes, from_session)
        self._stop = asyncio.Event()
        ready = asyncio.get_running_loop().create_future()
        self._tasks = [
            asyncio.ensure_future(self._pump_in(to_session)),
            asyncio.ensure_future(self._pump_out(from_session)),
        ]
        self._owner = asyncio.ensure_future(self._own(session_reads, session_writes, ready))
        done, _ = await asyncio.wait({ready, self._owner}, timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED)
        if ready in done:
            return ready.result()
        await self.child.settle_stderr(GRACE_S / 2)
        if self._owner in done and not self._owner.cancelled() and self._owner.exception() is not None:
            why = f"it failed to start: {describe_exception(_innermost(self._owner.exception()), 400)}"
        elif self._owner in done or self.ended:
            why = f"it ended before listing its tools ({self.ended or 'the session closed'})"
        else:
            why = f"it did not list its tools within {timeout_s:g} s"
        raise RuntimeError(why + self._stderr_note())

    async def _own(self, reads, writes, ready: asyncio.Future) -> None:
        from mcp import ClientSession

        async with ClientSession(reads, writes) as session:
            await session.initialize()
            tools = await _list_tools(session)
            self.session = session
            ready.set_result(tools)
            await self._stop.wait()

    async def _pump_in(self, to_session) -> None:
        """Server stdout → the session, one parsed message at a time."""
        import anyio

        try:
            while (line := await self.child.read_line()) is not None:
                if isinstance(line, Oversized):
                    limit = tool_process.MAX_MESSAGE_BYTES
                    self._interrupt(f"the server sent a message of {line.size} bytes, over the limit of "
                                    f"{limit} bytes; it was dropped", end=False)
                    continue
                if not line.strip():
                    continue
                try:
                    message = _parse(line)
                except ValueError:
                    self.skipped_lines += 1
                    continue
                del line
                await to_session.send(message)
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, ConnectionError):
            pass
        finally:
            self._output_ended = True  # before the session hears of it: a failed call then waits for the why
            to_session.close()
            if self.child.returncode is None:
                await self.child.wait_exit(GRACE_S / 2)  # usually at once: it closed its output by exiting
            await self.child.settle_stderr(GRACE_S / 2)
            code = self.child.returncode
            self._interrupt("the server exited" + (f" with code {code}" if code is not None else "")
                            + self._stderr_note(), end=True)

    async def _pump_out(self, from_session) -> None:
        """The session → server stdin."""
        import anyio

        try:
            async for message in from_session:
                await self.child.write(_dump(message))
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError, RuntimeError):
            pass  # the server is gone: its end of output ends the calls in flight

    def _interrupt(self, why: str, end: bool) -> None:
        if end and self.ended is None:
            self.ended = why
        for waiter in self._in_flight:
            if not waiter.done():
                waiter.set_result(why)

    def _stderr_note(self) -> str:
        tail = self.stderr_text().strip()[-200:]
        return f"; its stderr ends: {tail}" if tail else ""

    async def call(self, tool: str, arguments: dict, timeout_s: float, limit: int) -> tuple[str, object]:
        """("ok", a Cutter holding the result) or ("error", why); never raises but on cancellation."""
        if self.ended or self.session is None:
            return ("error", self.ended or "the server is not running")
        interrupted = asyncio.get_running_loop().create_future()
        self._in_flight.add(interrupted)
        task = asyncio.ensure_future(self.session.call_tool(tool, arguments))
        try:
            done, _ = await asyncio.wait({task, interrupted}, timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            task.cancel()
            raise
        finally:
            self._in_flight.discard(interrupted)
        failed = task not in done or task.cancelled() or task.exception() is not None
        if failed:
            if task not in done:
                task.cancel()
            task.add_done_callback(_forget)
            if not interrupted.done() and self._output_ended:
                # The session failed the call because the server's output ended: say why, once that is known.
                await asyncio.wait({interrupted, self._tasks[0]}, timeout=GRACE_S,
                                   return_when=asyncio.FIRST_COMPLETED)
            if interrupted.done() or self.ended:
                return ("error", interrupted.result() if interrupted.done() else self.ended)
            if task not in done:
                return ("error", f"timed out after {timeout_s:g} s")
            return ("error", f"the call failed: {describe_exception(task.exception(), 400)}")
        result = task.result()
        del task
        return _read_result(result, limit)

    async def close(self) -> None:
        """Leave the session and stop the process; bounded, and the process is killed even if this is cancelled."""
        try:
            if self._owner is not None and not self._owner.done():
                self._stop.set()
                done, _ = await asyncio.wait({self._owner}, timeout=GRACE_S)
                if not done:
                    self._owner.cancel()
                    await asyncio.wait({self._owner}, timeout=GRACE_S)
        finally:
            if self.child is not None:
                await self.child.stop()
            for task in self._tasks:
                task.cancel()
            for stream in self._streams:
                stream.close()
            if self._owner is not None:
                self._owner.add_done_callback(_forget)
            self._interrupt("the run's tools were stopped", end=True)


async def _list_tools(session) -> dict[str, tuple[str, object]]:
    """Every tool the server lists, page after page."""
    paged = "params" in inspect.signature(session.list_tools).parameters  # the SDK 2 signature; 1.x takes cursor=
    found, cursor = {}, None
    for _ in range(_MAX_PAGES):
        if cursor is None:
            result = await session.list_tools()
        elif paged:
            from mcp import types

            result = await session.list_tools(params=types.PaginatedRequestParams(cursor=cursor))
        else:
            result = await session.list_tools(cursor=cursor)
        for tool in result.tools:
            schema = _field(tool, "input_schema", "inputSchema")
            found[tool.name] = (tool.description or "", schema)
        cursor = _field(result, "next_cursor", "nextCursor")
        if not cursor:
            return found
    raise RuntimeError(f"its tool list goes on past {_MAX_PAGES} pages")


def _read_result(result, limit: int) -> tuple[str, object]:
    """The text of a tools/call result, cut as it is read; ("error", text) when the tool reported an error."""
    cutter = Cutter(limit)
    blocks = result.content or ()
    for index, block in enumerate(blocks):
        if index:
            cutter.feed("\n")
        cutter.feed(_block_text(block))
    structured = _field(result, "structured_content", "structuredContent")
    if not blocks and structured is not None:
        cutter.feed(json.dumps(structured, ensure_ascii=False, default=str))
    if _field(result, "is_error", "isError"):
        return ("error", "the tool reported an error: " + cutter.text())
    return ("ok", cutter)


def _block_text(block) -> str:
    kind = getattr(block, "type", "")
    if kind == "text":
        return block.text
    if kind == "resource":
        resource = block.resource
        text = getattr(resource, "text", None)
        return text if text is not None else f"[resource {resource.uri}: {_field(resource, 'mime_type', 'mimeType')}]"
    if kind == "resource_link":
        return f"[resource {block.uri}]"
    if kind in ("image", "audio"):
        return f"[{kind}: {_field(block, 'mime_type', 'mimeType')}]"
    return f"[{kind or type(block).__name__}]"


def _field(value, name: str, older: str):
    """An attribute the SDK 2 spells `name` and 1.x spells `older`."""
    found = getattr(value, name, None)
    return found if found is not None else getattr(value, older, None)


@functools.cache
def _sdk2() -> bool:
    """Whether the installed SDK is 2.x (its message types live in the `mcp_types` package)."""
    return importlib.util.find_spec("mcp_types") is not None


def _parse(line: bytes):
    """One JSON-RPC message from the server, wrapped for the session (ValueError when it is not one)."""
    from mcp.shared.message import SessionMessage

    if _sdk2():
        from mcp_types import jsonrpc_message_adapter

        return SessionMessage(jsonrpc_message_adapter.validate_json(line, by_name=False))
    from mcp.types import JSONRPCMessage

    return SessionMessage(JSONRPCMessage.model_validate_json(line))


def _dump(message) -> bytes:
    """One message to the server, as the SDK's own stdio transport writes it."""
    if _sdk2():
        text = message.message.model_dump_json(by_alias=True, exclude_unset=True)
    else:
        text = message.message.model_dump_json(by_alias=True, exclude_none=True)
    return (text + "\n").encode("utf-8")


def _innermost(exc: BaseException) -> BaseException:
    """The first leaf of an exception group (the SDK's task groups wrap what went wrong)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


def _forget(task: asyncio.Future) -> None:
    if not task.cancelled():
        task.exception()
