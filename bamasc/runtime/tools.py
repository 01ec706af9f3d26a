"""The tools a run's roles may call: `ToolSet` starts them once per run, gives their specs, and makes every call safe.

A call never raises: a tool that raises, times out, is not declared, gets
arguments that are not a JSON object or do not match its schema, or whose
server crashed, returns an error result to the model, counted as a call. A
result is cut to the tool's `max_result` (tokens, counted as UTF-8 bytes, the
safe bound) with a marker inside the limit. Python tools are imported and MCP
servers started when the set starts; a tool that is missing, or whose schema
does not fit, refuses the start with every problem listed. docs/tools.md.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterable

from bamasc.combinators.tools import spec_bytes
from bamasc.extras import Extra, require
from bamasc.records import record
from bamasc.runtime.tool_children import Children
from bamasc.runtime.tool_process import running
from bamasc.runtime.tool_python import (
    ToolDefinitionError,
    derive_parameters,
    is_async,
    load_callable,
    run_python,
    shape_result,
    signature_problem,
)
from bamasc.runtime.tool_schema import parse_arguments, schema_mismatch, schema_validator
from bamasc.runtime.tool_text import Cutter, cut_text, error_text, model_names, quoted, utf8_length

_SCHEMAS = Extra("mcp", "checking tool arguments against their schemas", ("jsonschema",))
_MESSAGE_BYTES = 2000  # an error's own text, before it is cut to the result's limit


@record
class ToolSpec:
    """A tool as a model is shown it."""

    name: str  # provider-safe: ^[a-zA-Z0-9_-]{1,64}$
    description: str
    parameters: dict  # JSON Schema of its arguments (an object)
    reference: str  # as a role writes it: "lookup_order", "files.read_file"


@record
class ToolResult:
    """One tool call's outcome: what goes back to the model, and what the trace records."""

    name: str  # the reference, or (cut) the name the model asked for
    text: str  # for the model: the result, or `error: ...`; at most max_result bytes
    truncated: bool
    error: str | None
    duration_s: float
    price: float  # µ$: the tool's price once it was invoked, 0 when the call was refused before that
    arguments_bytes: int
    result_bytes: int  # the whole result's UTF-8 bytes, before any cut


class ToolStartError(Exception):
    """The tools cannot start: each problem is one line naming its tool."""

    def __init__(self, problems: Iterable[str]):
        self.problems = tuple(problems)
        super().__init__("cannot start the tools:\n" + "\n".join(f"  {problem}" for problem in self.problems))


class _Entry:
    """A started tool: its spec, limits, argument validator, and how to invoke it."""

    def __init__(self, spec: ToolSpec, decl, validator, invoke):
        self.spec = spec
        self.decl = decl
        self.validator = validator
        self.invoke = invoke  # async (arguments, limit) -> ("ok", Cutter) | ("error", why)


class ToolSet:
    """The tools of one run, started once (`async with ToolSet(tools) as toolset:`) and stopped on every exit path.

    `tools` are the program's `Tool` records (bamasc/program.py) that the plan's roles use.
    `base_dir` (the .bam file's folder) is searched first for python tools'
    modules and is where MCP servers start. Not thread-safe: one event loop.
    """

    def __init__(self, tools: Iterable, *, base_dir: str | None = None,
                 startup_timeout_s: float | None = None):
        self._decls = {tool.name: tool for tool in tools}
        self.base_dir = base_dir
        self.startup_timeout_s = startup_timeout_s
        python = [name for name, tool in self._decls.items() if tool.kind == "python"]
        mcp = [f"{name}.{allowed}" for name, tool in self._decls.items() if tool.kind == "mcp"
               for allowed in tool.allow]
        self._names = model_names(python, mcp)  # reference -> the name the model sees
        self._entries: dict[str, _Entry] = {}  # by the name the model sees
        self._servers: dict = {}  # server name -> McpServer
        self._children = Children()  # what python tools started, stopped with the tools
        self._started = False

    async def __aenter__(self) -> ToolSet:
        await self.start()
        return self

    async def __aexit__(self, *exc_info) -> None:
        await self.close()

    async def start(self) -> None:
        """Import python tools, start MCP servers, check every tool; ToolStartError with every problem otherwise."""
        if self._started:
            return
        self._started = True
        problems: list[str] = []
        try:
            if self._decls:
                require(_SCHEMAS, "tools")
            for decl in self._decls.values():
                problem = _declaration_problem(decl)
                if problem:
                    problems.append(f"tool {decl.name}: {problem}")
                elif decl.kind == "python":
                    problems += self._start_python(decl)
            servers = [decl for decl in self._decls.values() if decl.kind == "mcp" and not _declaration_problem(decl)]
            if servers:
                require("mcp", "tool " + servers[0].name)
                for found in await asyncio.gather(*(self._start_server(decl) for decl in servers)):
                    problems += found
        except BaseException:
            await self.close()
            raise
        if problems:
            await self.close()
            raise ToolStartError(problems)

    async def close(self) -> None:
        """Stop every MCP server (their whole process groups) and every process a python tool started
        (runtime/tool_children.py); waits for that even when cancelled."""
        self._children.stop()
        servers, self._servers = list(self._servers.values()), {}
        if not servers:
            return
        stopping = asyncio.ensure_future(asyncio.gather(*(server.close() for server in servers),
                                                        return_exceptions=True))
        cancelled = False
        while not stopping.done():
            try:
                await asyncio.shield(stopping)
            except asyncio.CancelledError:
                cancelled = True  # each stop is bounded: finish it, then let the cancellation go on
        if cancelled:
            raise asyncio.CancelledError

    def specs(self, role) -> tuple[ToolSpec, ...]:
        """The specs of a role's tools, in its order; `role` has `.tools` or is the references themselves."""
        return tuple(self._entry_of(reference).spec for reference in _references(role))

    def server_pids(self) -> dict[str, int]:
        """The process id of each running MCP server, by its declaration's name."""
        return {name: server.pid for name, server in self._servers.items() if server.pid}

    def stderr(self, server: str) -> str:
        """What an MCP server wrote to stderr (its last 16 KiB)."""
        return self._servers[server].stderr_text() if server in self._servers else ""

    async def call(self, name: str, arguments: str, role=None) -> ToolResult:
        """Run the tool the model calls `name` with `arguments` (its JSON text); an error result, never an exception.

        With `role`, only that role's tools may be called.
        """
        if not self._started:
            raise RuntimeError("ToolSet.call before start: use `async with ToolSet(...)`")
        started = time.monotonic()
        arguments = arguments if isinstance(arguments, str) else json.dumps(arguments)
        size = utf8_length(arguments)
        allowed = None if role is None else {self._names.get(ref) for ref in _references(role)} - {None}
        entry = self._entries.get(name) if allowed is None or name in allowed else None
        if entry is None:
            limits = [e.decl.max_result for n, e in self._entries.items() if allowed is None or n in allowed]
            offered = ", ".join(sorted(allowed if allowed is not None else self._entries)) or "none"
            why = f"there is no tool {quoted(name)} (the tools are: {offered})"
            return _failed(quoted(name, 64), why, min(limits, default=64), started, 0.0, size)
        decl, reference = entry.decl, entry.spec.reference
        parsed = parse_arguments(arguments)
        if isinstance(parsed, str):
            return _failed(reference, parsed, decl.max_result, started, 0.0, size)
        mismatch = schema_mismatch(entry.validator, parsed)
        if mismatch:
            return _failed(reference, mismatch, decl.max_result, started, 0.0, size)
        status, value = await entry.invoke(parsed, decl.max_result)
        del parsed
        price = float(decl.price or 0.0)
        if status == "error":
            return _failed(reference, value, decl.max_result, started, price, size)
        return ToolResult(reference, value.text(), value.truncated, None, time.monotonic() - started, price, size,
                          value.total)

    def _entry_of(self, reference: str) -> _Entry:
        name = self._names.get(reference)
        if name is None or name not in self._entries:
            known = ", ".join(sorted(self._names)) or "none"
            raise ValueError(f"no tool {reference!r} is declared and started (the tools are: {known})")
        return self._entries[name]

    def _start_python(self, decl) -> list[str]:
        try:
            function = load_callable(decl.target, self.base_dir)
            schema = decl.parameters
            derived = schema is None
            if derived:
                schema = derive_parameters(function)
            validator, problem = schema_validator(schema)
            problem = problem or (None if derived else signature_problem(function, schema))
        except ToolDefinitionError as exc:
            return [f"tool {decl.name} ({decl.target}): {exc}"]
        if problem:
            return [f"tool {decl.name} ({decl.target}): {problem}"]
        spec = ToolSpec(self._names[decl.name], decl.description or "", schema, decl.name)
        size = spec_bytes(spec.name, spec.description, schema)
        if derived and size > decl.max_spec:
            return [f"tool {decl.name}: its derived spec is {size} tokens, over max_spec = {decl.max_spec} tokens: "
                    "raise max_spec, or give `parameters`"]
        asynchronous = is_async(function)

        def shape(value) -> Cutter:
            return shape_result(value, decl.max_result)

        async def invoke(arguments: dict, limit: int):
            with self._children.during(ignore={server.pid for server in running()}):
                return await run_python(function, asynchronous, arguments, float(decl.timeout_s), shape)

        self._entries[spec.name] = _Entry(spec, decl, validator, invoke)
        return []

    async def _start_server(self, decl) -> list[str]:
        from bamasc.runtime.tool_mcp import STARTUP_TIMEOUT_S, McpServer

        server = McpServer(decl.name, decl.target, self.base_dir)
        self._servers[decl.name] = server
        try:
            listed = await server.start(self.startup_timeout_s or STARTUP_TIMEOUT_S)
        except RuntimeError as exc:
            return [f"tool {decl.name} (mcp = {decl.target!r}): {exc}"]
        problems = []
        for tool in decl.allow:
            reference = f"{decl.name}.{tool}"
            if tool not in listed:
                offered = ", ".join(sorted(listed)) or "none"
                problems.append(f"tool {reference}: the server has no tool {tool!r} (it has: {offered})")
                continue
            description, schema = listed[tool]
            validator, problem = schema_validator(schema)
            spec = ToolSpec(self._names[reference], description, schema, reference)
            size = 0 if problem else spec_bytes(spec.name, description, schema)
            if not problem and size > decl.max_spec:
                problem = f"its spec is {size} tokens, over max_spec = {decl.max_spec} tokens"
            if problem:
                problems.append(f"tool {reference}: {problem}")
                continue
            self._entries[spec.name] = _Entry(spec, decl, validator, _server_call(server, tool, decl))
        return problems


def _server_call(server, tool: str, decl):
    async def invoke(arguments: dict, limit: int):
        return await server.call(tool, arguments, float(decl.timeout_s), limit)

    return invoke


def _declaration_problem(decl) -> str | None:
    if decl.kind not in ("python", "mcp"):
        return f"kind must be python or mcp, not {decl.kind!r}"
    if not isinstance(decl.max_result, int) or decl.max_result <= 0:
        return "max_result must be a positive number of tokens"
    if not decl.timeout_s or decl.timeout_s <= 0:
        return "timeout must be positive"
    if decl.kind == "mcp" and not decl.allow:
        return "allow names none of the server's tools"
    return None


def _failed(name: str, why: str, limit: int, started: float, price: float, arguments_bytes: int) -> ToolResult:
    why = cut_text(why, _MESSAGE_BYTES)[0]
    text, truncated, total = error_text(why, limit)
    return ToolResult(name, text, truncated, why, time.monotonic() - started, price, arguments_bytes, total)


def _references(role) -> tuple[str, ...]:
    references = getattr(role, "tools", role)
    return (references,) if isinstance(references, str) else tuple(references)
