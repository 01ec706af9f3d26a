"""Python tools through ToolSet: specs, calls, and every way a call goes wrong ending as an error result.

The tools are tests/fixtures/tools/python_tools.py. Timeouts are short, but
no assertion depends on how long anything took.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bamasc.runtime import tool_process
from bamasc.runtime.tool_process import ChildProcess, Oversized
from bamasc.runtime.tool_text import CUT_MARKER, SAFE_NAME, Cutter, cut_text, model_names
from bamasc.runtime.tools import ToolSet, ToolStartError
from tests.conftest import ROOT
from tests.runtime.processes import no_leftover_process  # noqa: F401 (fixture)
from tests.runtime.tool_records import SPAN, python_tool

FIXTURES = os.path.join(ROOT, "tests", "fixtures", "tools")
sys.path.insert(0, FIXTURES)
import python_tools  # noqa: E402  (the same module the ToolSet imports)

sys.path.remove(FIXTURES)

pytestmark = pytest.mark.usefixtures("no_leftover_process")


def tool(name: str, function: str | None = None, **fields):
    fields.setdefault("description", f"The {name} tool.")
    return python_tool(name, f"python_tools:{function or name}", **fields)


def run(tools, body, **options):
    """Start a ToolSet of `tools` and return `await body(toolset)`."""

    async def main():
        async with ToolSet(tools, base_dir=FIXTURES, **options) as toolset:
            return await body(toolset)

    return asyncio.run(main())


def call(tools, name: str, arguments: str = "{}", role=None):
    return run(tools, lambda toolset: toolset.call(name, arguments, role))


def start_problems(tools) -> tuple[str, ...]:
    with pytest.raises(ToolStartError) as raised:
        run(tools, lambda toolset: asyncio.sleep(0))
    return raised.value.problems


# --- cutting results --------------------------------------------------------------------------------------------


def test_a_result_within_its_limit_is_unchanged():
    assert cut_text("order 12: shipped", 17) == ("order 12: shipped", False, 17)


def test_a_cut_result_ends_with_its_marker_inside_the_limit():
    text, truncated, total = cut_text("a" * 1000, 100)
    marker = CUT_MARKER.format(1000 - (100 - len("…[cut: 1000 bytes more]".encode())))
    assert truncated and total == 1000
    assert text == "a" * (100 - len("…[cut: 1000 bytes more]".encode())) + marker
    assert len(text.encode()) <= 100


def test_a_cut_never_splits_a_character():
    text, truncated, _ = cut_text("€" * 100, 50)  # 3 bytes each
    head = text[: text.index("…")]
    assert truncated and set(head) == {"€"}
    assert len(text.encode("utf-8")) <= 50


def test_a_limit_shorter_than_the_marker_keeps_the_first_bytes():
    assert cut_text("abcdefghij" * 10, 5) == ("abcde", True, 100)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.text(), max_size=4), st.integers(min_value=0, max_value=120))
def test_cutting_keeps_a_prefix_within_the_limit_and_counts_the_rest(pieces, limit):
    whole = "".join(pieces)
    cutter = Cutter(limit)
    for piece in pieces:
        cutter.feed(piece)
    text = cutter.text()
    size = len(whole.encode("utf-8", "replace"))
    assert cutter.total == size
    assert len(text.encode("utf-8")) <= limit
    sent = whole.encode("utf-8", "replace").decode("utf-8")
    if size <= limit:
        assert not cutter.truncated and text == sent
    else:
        assert cutter.truncated
        head, _, rest = text.partition("…[cut: ")
        assert sent.startswith(head)
        if rest:  # the marker fitted: it says how much was left out
            assert rest == f"{size - len(head.encode())} bytes more]"


# --- names a model sees ---------------------------------------------------------------------------------------------


def test_model_names_are_safe_unique_and_no_longer_than_python_names():
    names = model_names(
        ["lookup", "files__read", "p" * 70],
        ["files.read", "files.read-it", "files.a.b", "web.fetch page", "x." + "t" * 80],
    )
    assert names["lookup"] == "lookup"
    assert names["files__read"] == "files__read"  # a python name is kept; the MCP name it matches moves
    assert names["files.read"] != "files__read" and names["files.read"].startswith("files__read_")
    assert names["files.read-it"] == "files__read-it"
    assert names["files.a.b"] == "files__a_b"
    assert names["web.fetch page"] == "web__fetch_page"
    assert all(SAFE_NAME.match(name) for name in names.values())
    assert len(set(names.values())) == len(names)
    assert len(names["p" * 70]) == 64


@settings(max_examples=200, deadline=None)
@given(st.lists(st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,80}", fullmatch=True), unique=True, max_size=5),
       st.lists(st.text(min_size=1, max_size=90), unique=True, max_size=5))
def test_model_names_are_always_safe_and_unique(python, tools):
    mcp = [f"srv.{tool}" for tool in tools]
    names = model_names(python, mcp)
    assert all(SAFE_NAME.match(name) for name in names.values())
    assert len(set(names.values())) == len(python) + len(mcp)
    assert all(len(names[reference]) <= len(reference) for reference in python)


# --- specs and start-up --------------------------------------------------------------------------------------------


def test_a_schema_is_derived_from_type_hints():
    specs = run([tool("typed", max_spec=1000)], lambda toolset: asyncio.sleep(0, toolset.specs(["typed"])))
    number = {"type": "number"}
    assert specs[0].parameters == {
        "type": "object",
        "properties": {
            "text": {"type": "string"},
            "count": {"type": "integer"},
            "ratio": number,
            "flag": {"type": "boolean"},
            "items": {"type": "array", "items": {"type": "string"}},
            "table": {"type": "object", "additionalProperties": {"type": "integer"}},
            "note": {"anyOf": [{"type": "string"}, {"type": "null"}]},
            "mode": {"enum": ["fast", "slow"]},
            "matrix": {"anyOf": [{"type": "array", "items": {"type": "array", "items": number}}, {"type": "null"}]},
        },
        "required": ["text", "count", "ratio", "flag", "items", "table"],
        "additionalProperties": False,
    }


def test_specs_follow_the_roles_order_with_declared_parameters():
    schema = {"type": "object", "properties": {"order_id": {"type": "string"}}, "required": ["order_id"]}
    tools = [tool("lookup", parameters=schema), tool("async_lookup")]

    class Role:
        tools = ("async_lookup", "lookup")

    specs = run(tools, lambda toolset: asyncio.sleep(0, toolset.specs(Role())))
    assert [spec.name for spec in specs] == ["async_lookup", "lookup"]
    assert specs[1].parameters == schema and specs[1].description == "The lookup tool."
    with pytest.raises(ValueError, match="no tool 'missing'"):
        run(tools, lambda toolset: asyncio.sleep(0, toolset.specs(["missing"])))


def test_every_problem_refuses_the_start_and_is_named():
    problems = start_problems([
        tool("untyped"),
        tool("starred"),
        tool("odd_type"),
        tool("with_kwargs"),
        tool("gone", "no_such_function"),
        tool("number", "NOT_CALLABLE"),
        python_tool("nocolon", "python_tools.lookup"),
        python_tool("nomodule", "no_such_module_here:f"),
        tool("limitless", "lookup", max_result=0),
        tool("notobject", "lookup", parameters={"type": "array"}),
        tool("badschema", "lookup", parameters={"type": "object", "properties": {"order_id": {"type": "text"}}}),
        tool("extra_arg", "lookup", parameters={"type": "object", "properties": {"sku": {"type": "string"}}}),
        tool("optional_arg", "lookup", parameters={"type": "object", "properties": {"order_id": {"type": "string"}}}),
        tool("long_spec", "typed", max_spec=20),
    ])
    text = "\n".join(problems)
    assert len(problems) == 14, text
    for expected in (
        "tool untyped (python_tools:untyped): parameter 'order_id' has no type hint",
        "tool starred (python_tools:starred): parameter 'orders' is not a plain keyword parameter",
        "tool odd_type (python_tools:odd_type): parameter 'orders' has type set[str]",
        "tool with_kwargs (python_tools:with_kwargs): parameter 'fields' is not a plain keyword parameter",
        "tool gone (python_tools:no_such_function): python_tools has no attribute 'no_such_function'",
        "tool number (python_tools:NOT_CALLABLE): python_tools:NOT_CALLABLE is a int, not a function",
        "tool nocolon (python_tools.lookup): python = 'python_tools.lookup' is not 'module:name'",
        "tool nomodule (no_such_module_here:f): cannot import no_such_module_here: ModuleNotFoundError",
        "tool limitless: max_result must be a positive number of tokens",
        "tool notobject (python_tools:lookup): its parameters schema does not describe an object",
        "tool badschema (python_tools:lookup): its parameters are not a valid JSON Schema",
        "tool extra_arg (python_tools:lookup): the schema names arguments the function does not take: sku",
        "tool long_spec: its derived spec is",
    ):
        assert expected in text
    assert "tool optional_arg (python_tools:lookup): the function needs arguments the schema does not require: " \
        "order_id" in text


def test_the_search_path_is_restored_after_the_import():
    before = list(sys.path)
    run([tool("lookup")], lambda toolset: asyncio.sleep(0))
    assert sys.path == before


# --- calls ----------------------------------------------------------------------------------------------------------------


def test_sync_and_async_tools_answer():
    async def body(toolset):
        return await asyncio.gather(
            toolset.call("lookup", '{"order_id": "A1"}'),
            toolset.call("async_lookup", '{"order_id": "B2", "verbose": true}'),
        )

    first, second = run([tool("lookup", price=50), tool("async_lookup")], body)
    assert (first.name, first.text, first.error, first.truncated) == ("lookup", "order A1: shipped", None, False)
    assert (first.price, first.arguments_bytes, first.result_bytes) == (50.0, len(b'{"order_id": "A1"}'), 17)
    assert second.text == "order B2: shipped on Monday" and second.price == 0.0


def test_values_that_are_not_text_come_back_as_json():
    results = run(
        [tool("structured"), tool("nothing"), tool("raw_bytes"), tool("surrogate")],
        lambda toolset: asyncio.gather(*(toolset.call(name, "") for name in
                                         ("structured", "nothing", "raw_bytes", "surrogate"))),
    )
    texts = [result.text for result in results]
    assert json.loads(texts[0]) == python_tools.structured() and "Zürich" in texts[0]
    assert texts[1:] == ["null", "café \ufffd", "half ? a pair"]
    assert all(result.error is None for result in results)


def error_of(tools, name, arguments="{}", role=None):
    result = call(tools, name, arguments, role)
    assert result.error is not None and result.text.startswith("error: ")
    assert len(result.text.encode("utf-8")) <= 200
    return result


def test_a_tool_that_raises_is_an_error_result(capfd):
    result = error_of([tool("raises", price=7)], "raises", '{"order_id": "A1"}')
    assert result.error == "raised RuntimeError: database down while reading A1"
    assert result.price == 7.0  # it was invoked
    assert "Traceback" not in capfd.readouterr().err


@pytest.mark.parametrize("form", ["plain", "base64", "url"])
@pytest.mark.parametrize("key", ["sk-proj-Zq81vXw0Lm3Nb7Tc2Yd5Ke9Rf4Hg6Ja1", "sk-ant-api03-Xy7Qw2Er5Ty8Ui1Op4As6Df9Gh3Jk0",
                                 "AIzaSyA1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q"])
def test_a_key_in_a_tools_exception_is_masked_before_anyone_reads_it(monkeypatch, form, key):
    """The error is what the trace, the output and the model read: a key in it, plain or encoded, never is."""
    import base64
    import urllib.parse

    monkeypatch.setenv("TOOL_TEST_KEY", key)
    result = error_of([tool("raises_with_a_key", parameters={"type": "object", "properties": {"form": {"type": "string"}}})],
                      "raises_with_a_key", json.dumps({"form": form}))
    for shown in (key, base64.b64encode(key.encode()).decode(), urllib.parse.quote(key + "/=")):
        assert shown not in result.error and shown not in result.text
    assert result.error.startswith("raised PermissionError: 401 from upstream: invalid api key ")


def test_a_tool_that_raises_a_huge_message_is_cut():
    result = error_of([tool("raises_huge")], "raises_huge")
    assert result.truncated and result.text.startswith("error: raised ValueError: xxx")


def test_a_tool_that_exits_does_not_end_the_run():
    assert error_of([tool("exits")], "exits").error == "raised SystemExit: 3"


def test_a_coroutine_from_a_plain_def_is_an_error():
    assert "declare it async def" in error_of([tool("sneaky", parameters={"type": "object"})], "sneaky").error


def test_a_value_that_cannot_be_json_is_an_error():
    assert "cannot be written as JSON" in error_of([tool("circular")], "circular").error


def test_a_sync_tool_that_never_returns_times_out_and_its_late_result_is_dropped(capfd):
    python_tools.RELEASE.clear()
    try:
        result = error_of([tool("never", timeout_s=0.2)], "never")
        assert result.error == "timed out after 0.2 s"
    finally:
        python_tools.RELEASE.set()  # the thread returns after its loop has closed
    for thread in threading.enumerate():
        if thread.name == "bamasc-tool":
            thread.join()
    assert "Exception in thread" not in capfd.readouterr().err


def test_an_async_tool_that_never_returns_is_cancelled_at_its_timeout():
    python_tools.CANCELLED.clear()
    result = error_of([tool("async_never", timeout_s=0.2)], "async_never")
    assert result.error == "timed out after 0.2 s"
    assert python_tools.CANCELLED == ["async_never"]


def test_a_100_mb_result_is_cut_to_its_limit():
    result = call([tool("huge", max_result=300)], "huge")
    assert result.truncated and result.error is None and result.result_bytes == 100_000_000
    assert len(result.text.encode("utf-8")) <= 300
    assert result.text.endswith(f"…[cut: {100_000_000 - result.text.index('…')} bytes more]")


def test_a_multibyte_result_is_counted_in_bytes():
    result = call([tool("huge_multibyte", max_result=100)], "huge_multibyte")
    assert result.result_bytes == 3_000_000 and len(result.text.encode("utf-8")) <= 100
    assert set(result.text[: result.text.index("…")]) == {"€"}


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        ("{not json", "the arguments are not JSON (JSONDecodeError"),
        ('["A1"]', "the arguments must be a JSON object, not list"),
        ('{"order_id": 12}', "the arguments do not match the schema at order_id: 12 is not of type 'string'"),
        ("{}", "the arguments do not match the schema at the top level: 'order_id' is a required property"),
        ('{"order_id": "A1", "sku": "x"}', "Additional properties are not allowed ('sku' was unexpected)"),
        ("[" * 100_000 + "]" * 100_000, "the arguments are not JSON (RecursionError"),
    ],
)
def test_bad_arguments_are_an_error_result_and_the_tool_is_not_invoked(arguments, expected):
    python_tools.CALLS.clear()
    result = error_of([tool("lookup", price=9)], "lookup", arguments)
    assert expected in result.error
    assert python_tools.CALLS == [] and result.price == 0.0


def test_a_megabyte_of_arguments_reaches_the_tool():
    payload = "é" * 500_000
    arguments = json.dumps({"payload": payload}, ensure_ascii=False)
    result = call([tool("size_of")], "size_of", arguments)
    assert result.text == "500000" and result.arguments_bytes == len(arguments.encode()) > 1_000_000


def test_an_undeclared_tool_is_an_error_result():
    result = error_of([tool("lookup")], "delete_everything")
    assert result.error == "there is no tool 'delete_everything' (the tools are: lookup)"
    assert result.price == 0.0


def test_a_megabyte_tool_name_is_cut_everywhere():
    result = call([tool("lookup", max_result=50)], "n" * 1_000_000)
    assert len(result.text.encode()) <= 50 and len(result.name) < 100 and len(result.error) < 200


def test_a_role_calls_only_its_own_tools():
    result = error_of([tool("lookup"), tool("raises")], "raises", '{"order_id": "A1"}', role=["lookup"])
    assert result.error == "there is no tool 'raises' (the tools are: lookup)"


def test_a_cancelled_call_ends_at_once():
    python_tools.RELEASE.clear()

    async def body(toolset):
        task = asyncio.ensure_future(toolset.call("never", "{}"))
        while "never" not in python_tools.CALLS:
            await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return True

    python_tools.CALLS.clear()
    try:
        assert run([tool("never", timeout_s=600)], body)
    finally:
        python_tools.RELEASE.set()


def test_a_call_before_start_is_a_programming_error():
    with pytest.raises(RuntimeError, match="before start"):
        asyncio.run(ToolSet([tool("lookup")]).call("lookup", "{}"))


def test_nothing_heavy_is_imported_until_a_run_has_tools():
    script = (
        "import asyncio, sys\n"
        "from bamasc.program import Tool\n"
        "from bamasc.source import Span\n"
        "from bamasc.runtime.tools import ToolSet\n"
        "asyncio.run(ToolSet([]).start())\n"
        "print('jsonschema' in sys.modules, 'mcp' in sys.modules)\n"
        f"tool = Tool('lookup', 'python', 'python_tools:lookup', '', None, (), 9, 5.0, 0.0, {SPAN!r})\n"
        f"asyncio.run(ToolSet([tool], base_dir={FIXTURES!r}).start())\n"
        "print('jsonschema' in sys.modules, 'mcp' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT, check=True)
    assert out.stdout.split("\n")[:2] == ["False False", "True False"]


# --- a tool server's process (the MCP transport), with plain Python children --------------------------------------


def child_run(code: str, body):
    """Start `python -c code` as a tool server's process and return `await body(child)`; it is always stopped."""

    async def main():
        child = await ChildProcess.start([sys.executable, "-c", code], None, dict(os.environ))
        try:
            return await body(child)
        finally:
            await child.stop()

    return asyncio.run(main())


def test_a_line_over_the_limit_is_skipped_as_it_streams(monkeypatch):
    monkeypatch.setattr(tool_process, "MAX_MESSAGE_BYTES", 100_000)
    code = "import sys; sys.stdout.write('x' * 300_000 + '\\n{\"ok\": 1}\\n')"

    async def body(child):
        return [await child.read_line() for _ in range(3)]

    oversized, line, end = child_run(code, body)
    assert isinstance(oversized, Oversized) and oversized.size == 300_000
    assert (line, end) == (b'{"ok": 1}', None)


def test_stderr_keeps_its_last_bytes():
    code = "import sys; sys.stderr.write('e' * 100_000 + 'the end')"

    async def body(child):
        await child.wait_exit(60)
        await child.settle_stderr(60)
        return child.stderr_text()

    text = child_run(code, body)
    dropped = 100_007 - tool_process.STDERR_KEEP_BYTES
    assert text == f"[{dropped} bytes before this dropped]\n" + "e" * (tool_process.STDERR_KEEP_BYTES - 7) + "the end"


def test_a_process_that_ignores_sigterm_and_its_stdin_is_killed(no_leftover_process):
    code = (
        "import signal, subprocess, sys, time\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(3600)'])\n"
        "print('ready', flush=True)\n"
        "time.sleep(3600)\n"
    )

    async def body(child):
        no_leftover_process.add(child.pid)
        return await child.read_line()

    assert child_run(code, body) == b"ready"
    assert tool_process.running() == []


def test_the_processes_a_python_tool_starts_end_with_the_run():
    """A tool that starts a process which starts another, and returns: neither outlives the tools' stop."""
    from tests.runtime.processes import SETTLE_LIMIT_S, alive, descendants, left_after

    before = descendants()
    seen: dict[str, set[int]] = {}

    async def body(toolset):
        result = await toolset.call("spawns", "{}")
        child = int(result.text)
        while not descendants(child):  # the grandchild has started (no time limit: the test's own)
            await asyncio.sleep(0.01)
        seen["pids"] = {child} | descendants(child)
        return result

    assert run([tool("spawns")], body).error is None
    assert len(seen["pids"]) == 2
    # Killed: no longer alive (a zombie counts as ended), and nothing new is left below this process.
    assert left_after(before) == []
    deadline = time.monotonic() + SETTLE_LIMIT_S  # a kill takes a moment to land; no assertion on how long
    while any(alive(pid) for pid in seen["pids"]) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert [pid for pid in seen["pids"] if alive(pid)] == []
