"""MCP tools through ToolSet, against a real server built with the `mcp` SDK over stdio (tests/fixtures/tools).

It answers, hangs, crashes mid-call, returns 10 MB, prints to stdout, floods
stderr, starts a process of its own, and lists a tool whose schema does not
fit. Every test ends with no process left: neither a child of this process
nor any member of the server's process group. No assertion depends on time.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys

import pytest

from bamasc.runtime import tool_process
from bamasc.runtime.tools import ToolSet, ToolStartError
from tests.conftest import ROOT
from tests.runtime.processes import alive, left_after, no_leftover_process  # noqa: F401 (fixture)
from tests.runtime.tool_records import SPAN, mcp_tool

pytest.importorskip("mcp", reason="the mcp extra is not installed: pip install 'bamasc[mcp]'")

SERVER = os.path.join(ROOT, "tests", "fixtures", "tools", "mcp_server.py")
COMMAND = f"python {SERVER}"
SETTLE_S = 600.0  # how long a script may take to end once interrupted, on a loaded machine (a hang fails, not waits)

pytestmark = pytest.mark.usefixtures("no_leftover_process")


def server(*allow: str, command: str = COMMAND, **fields):
    return mcp_tool("files", command, allow, **fields)


def run(tools, body, groups: set[int] | None = None, **options):
    """Start a ToolSet, note its servers' process groups in `groups`, and return `await body(toolset)`."""

    async def main():
        async with ToolSet(tools, base_dir=ROOT, **options) as toolset:
            if groups is not None:
                groups.update(toolset.server_pids().values())
            return await body(toolset)

    return asyncio.run(main())


def start_problems(tools, **options) -> str:
    with pytest.raises(ToolStartError) as raised:
        run(tools, lambda toolset: asyncio.sleep(0), **options)
    return "\n".join(raised.value.problems)


def test_a_server_s_tools_are_listed_and_answer(no_leftover_process):
    async def body(toolset):
        specs = toolset.specs(["files.echo", "files.add"])
        results = await asyncio.gather(
            toolset.call("files__echo", '{"text": "héllo"}'),
            toolset.call("files__add", '{"a": 2, "b": 3}'),
            *(toolset.call("files__add", f'{{"a": {i}, "b": 1}}') for i in range(5)),
        )
        return specs, results

    specs, results = run([server("echo", "add", price=4)], body, no_leftover_process)
    assert [(spec.name, spec.reference, spec.description) for spec in specs] == [
        ("files__echo", "files.echo", "Echo the text back."),
        ("files__add", "files.add", "Add two integers."),
    ]
    assert specs[1].parameters["required"] == ["a", "b"]
    assert [result.text for result in results] == ["héllo", "5", "1", "2", "3", "4", "5"]
    assert all(result.error is None and result.price == 4.0 for result in results)
    assert results[0].result_bytes == len("héllo".encode())
    assert len(no_leftover_process) == 1


def test_arguments_are_checked_before_the_server_sees_them(no_leftover_process):
    result = run([server("add")], lambda toolset: toolset.call("files__add", '{"a": "2", "b": 3}'),
                 no_leftover_process)
    assert result.error == "the arguments do not match the schema at a: '2' is not of type 'integer'"
    assert result.price == 0.0


def test_a_hanging_tool_times_out_and_its_server_is_stopped(no_leftover_process):
    result = run([server("hang", timeout_s=0.5)], lambda toolset: toolset.call("files__hang", "{}"),
                 no_leftover_process)
    assert result.error == "timed out after 0.5 s" and result.text == "error: timed out after 0.5 s"


def test_a_crash_mid_call_is_an_error_result_and_so_is_every_later_call(no_leftover_process):
    async def body(toolset):
        return [await toolset.call("files__crash", "{}"), await toolset.call("files__echo", '{"text": "x"}')]

    crashed, later = run([server("crash", "echo")], body, no_leftover_process)
    assert crashed.error.startswith("the server exited with code 3; its stderr ends:")
    assert crashed.error.endswith("crashing on purpose")
    assert later.error == crashed.error and len(later.text.encode()) <= 300


def test_ten_megabytes_are_cut_to_the_limit(no_leftover_process):
    result = run([server("big", max_result=500)], lambda toolset: toolset.call("files__big", "{}"),
                 no_leftover_process)
    assert result.truncated and result.error is None and result.result_bytes == 10_000_000
    assert len(result.text.encode("utf-8")) <= 500
    assert result.text.endswith(f"…[cut: {10_000_000 - len(result.text[: result.text.index('…')].encode())} bytes more]")


def test_a_message_over_the_limit_is_dropped_and_the_server_lives_on(no_leftover_process, monkeypatch):
    monkeypatch.setattr(tool_process, "MAX_MESSAGE_BYTES", 1 << 20)

    async def body(toolset):
        return await toolset.call("files__big", "{}"), await toolset.call("files__echo", '{"text": "still here"}')

    dropped, later = run([server("big", "echo")], body, no_leftover_process)
    size = int(dropped.error.split("a message of ")[1].split(" bytes")[0])
    assert size > 10_000_000
    assert dropped.error == f"the server sent a message of {size} bytes, over the limit of 1048576 bytes; it was dropped"
    assert later.text == "still here"


def test_a_tool_s_own_error_and_a_stray_stdout_line(no_leftover_process):
    async def body(toolset):
        return await toolset.call("files__fails", "{}"), await toolset.call("files__stray", "{}")

    failed, stray = run([server("fails", "stray")], body, no_leftover_process)
    assert failed.error.startswith("the tool reported an error: ")
    assert (stray.text, stray.error) == ("answered", None)


def test_stderr_is_captured_and_bounded(no_leftover_process):
    async def body(toolset):
        result = await toolset.call("files__noisy", '{"size": 1000000}')
        return result, toolset.stderr("files")

    result, stderr = run([server("noisy")], body, no_leftover_process)
    assert result.text == "done"
    assert stderr.startswith("[") and "bytes before this dropped]" in stderr
    assert stderr.endswith("the last line of stderr\n") and len(stderr.encode()) < 17_000


def test_a_process_the_server_started_is_stopped_with_it(no_leftover_process):
    result = run([server("spawn")], lambda toolset: toolset.call("files__spawn", "{}"), no_leftover_process)
    grandchild = int(result.text)
    assert left_after(groups=set(no_leftover_process)) == []
    assert not alive(grandchild)


def test_a_schema_that_is_not_json_schema_refuses_the_start():
    problems = start_problems([server("echo", "odd")])
    assert problems.startswith("tool files.odd: its parameters are not a valid JSON Schema: 'text' is not valid")


def test_a_missing_tool_and_a_long_spec_refuse_the_start():
    problems = start_problems([server("echo", "read_file", max_spec=20)])
    assert "tool files.read_file: the server has no tool 'read_file' (it has: add, big, crash, echo," in problems
    assert "tool files.echo: its spec is " in problems and "over max_spec = 20 tokens" in problems


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        ("no-such-server-command --stdio", "cannot start 'no-such-server-command --stdio': FileNotFoundError"),
        ("", "mcp = '': the command line is empty"),
        ("python -c \"import sys; sys.stderr.write('no config file'); sys.exit(2)\"",
         "; its stderr ends: no config file"),
        ("python -c 'import time; time.sleep(3600)'", "it did not list its tools within 0.5 s"),
    ],
)
def test_a_server_that_does_not_start_refuses_the_start(command, expected):
    problems = start_problems([server("echo", command=command)], startup_timeout_s=0.5 if "sleep" in command else None)
    assert problems.startswith("tool files (mcp = ") and expected in problems


def test_cancelling_a_run_stops_its_server(no_leftover_process):
    async def main():
        started = asyncio.Event()

        async def run_it():
            async with ToolSet([server("hang")], base_dir=ROOT) as toolset:
                no_leftover_process.update(toolset.server_pids().values())
                started.set()
                await toolset.call("files__hang", "{}")

        task = asyncio.ensure_future(run_it())
        await started.wait()
        await asyncio.sleep(0.1)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    assert len(no_leftover_process) == 1


TOOL = f"Tool('files', 'mcp', {COMMAND!r}, None, None, ('hang', 'spawn'), 100, 3600.0, 0.0, {SPAN!r})"
INTERRUPTED = f"""
import asyncio, signal, sys
# A process started in the background by a non-interactive shell inherits SIGINT ignored: take it back.
signal.signal(signal.SIGINT, signal.default_int_handler)
from bamasc.program import Tool
from bamasc.runtime.tools import ToolSet
from bamasc.source import Span

async def main():
    async with ToolSet([{TOOL}]) as toolset:
        print(toolset.server_pids()["files"], flush=True)
        await toolset.call("files__hang", "{{}}")

try:
    asyncio.run(main())
except KeyboardInterrupt:
    from bamasc.runtime import tool_process
    print("interrupted;", len(tool_process.running()), "running", file=sys.stderr)
"""
# The loop is abandoned mid-run: nothing closes the ToolSet, so only the exit hook can stop the server.
ABANDONED = f"""
import asyncio, sys
from bamasc.program import Tool
from bamasc.runtime.tools import ToolSet
from bamasc.source import Span

async def main():
    toolset = ToolSet([{TOOL}])
    await toolset.start()
    await toolset.call("files__spawn", "{{}}")  # a process of the server's own, which outlives the server
    print(toolset.server_pids()["files"], flush=True)

asyncio.new_event_loop().run_until_complete(main())
sys.exit(0)
"""


def run_script(script: str, interrupt: bool) -> tuple[int, str]:
    """Run a ToolSet in another Python process; (its server's pid, its stderr) once that process has ended."""
    process = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, cwd=ROOT)
    pid = int(process.stdout.readline())
    if interrupt:
        process.send_signal(signal.SIGINT)  # Ctrl-C, as a terminal sends it
    try:
        _, stderr = process.communicate(timeout=SETTLE_S)
    except subprocess.TimeoutExpired:
        process.kill()
        _, stderr = process.communicate()
        raise AssertionError(f"the script did not end within {SETTLE_S:g} s: {stderr}") from None
    return pid, stderr


def test_ctrl_c_stops_the_server():
    pid, stderr = run_script(INTERRUPTED, interrupt=True)
    assert "interrupted; 0 running" in stderr and "Traceback" not in stderr  # stopped by the ToolSet, not at exit
    assert left_after(groups={pid}) == []


def test_a_server_left_running_is_killed_when_the_interpreter_exits():
    pid, _ = run_script(ABANDONED, interrupt=False)
    assert left_after(groups={pid}) == []
