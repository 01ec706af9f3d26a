"""`bamasc exec`, the Python API and its session run a plan's tools: examples/support_tools.bam offline on the fake,
with its Python tool and its MCP server, charged at most its bound; tools that cannot start stop the run
before anything is spent, with a clear error; the Ray engine refuses plans with tools."""

from __future__ import annotations

import asyncio
import json
import os

import pytest

from bamasc.cli import main
from tests.conftest import ROOT
from tests.runtime.processes import no_leftover_process  # noqa: F401 (fixture)

EXAMPLE = os.path.join(ROOT, "examples", "support_tools.bam")
TASK = "Where is my order A1002? I think I was charged twice."
pytestmark = pytest.mark.usefixtures("no_leftover_process")


def needs_mcp():
    pytest.importorskip("mcp", reason="support_tools.bam's help pages are an MCP server: it needs the MCP SDK "
                                      "(pip install 'bamasc[mcp]')")


def lines_of(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.parametrize("mode", ["--dry-run", "echo", "random"])
def test_the_support_example_runs_offline_with_its_tools(tmp_path, capsys, mode):
    needs_mcp()
    trace = tmp_path / "trace.jsonl"
    fake = ["--dry-run"] if mode == "--dry-run" else ["--fake", mode]
    code = main(["exec", EXAMPLE, "--task", TASK, "--trace", str(trace), *fake])
    out = capsys.readouterr()
    assert code == 0, out.err
    assert "Traceback" not in out.err
    lines = lines_of(trace)
    task = lines[-1]
    assert task["status"] == "ok" and task["cost"] <= task["bound"] + 1e-6
    assert sum(line["charged"] for line in lines if line["type"] in ("call", "tool")) == pytest.approx(task["cost"])
    tools = [line for line in lines if line["type"] == "tool"]
    rounds = [line["round"] for line in lines if line["type"] == "call" and line["node"].startswith("agent")]
    if mode == "--dry-run":  # the costliest tool (the MCP server's largest results), twice a round, every round
        assert {line["name"] for line in tools} == {"help_pages.list_dir"} and len(tools) == 3 * 2
        assert rounds == [0, 1, 2, 3]
        assert "tool help_pages.list_dir" in out.out  # the ledger table's tool rows
    elif mode == "echo":  # the python tool once, at its price, then the answer
        assert [(line["name"], line["charged"], line["error"]) for line in tools] == [("lookup_order", 20.0, None)]
        assert rounds == [0, 1]


def test_tools_that_cannot_start_stop_exec_before_anything_is_spent(tmp_path, capsys):
    needs_mcp()
    source = open(EXAMPLE, encoding="utf-8").read()
    broken = tmp_path / "broken.bam"
    broken.write_text(source.replace('"support_tools:lookup_order"', '"no_such_module_here:lookup_order"')
                      .replace('mcp        = "python files_server.py"', 'mcp        = "python -c pass"'))
    trace = tmp_path / "trace.jsonl"
    code = main(["exec", str(broken), "--task", TASK, "--trace", str(trace), "--fake", "echo"])
    err = capsys.readouterr().err
    assert code == 1
    assert "cannot start the tools" in err and "no_such_module_here" in err and "Traceback" not in err
    assert not trace.exists() or not trace.read_text().strip()  # not one call reserved


def test_exec_asks_for_the_mcp_extra_before_it_spends(tmp_path, capsys, monkeypatch):
    import bamasc.extras

    real = bamasc.extras.missing_modules
    monkeypatch.setattr(bamasc.extras, "missing_modules",
                        lambda extra: ("mcp",) if extra.name == "mcp" else real(extra))
    code = main(["exec", EXAMPLE, "--task", TASK, "--fake", "echo"])
    err = capsys.readouterr().err
    assert code == 1 and "tool help_pages (an MCP server) needs the mcp extra" in err and "pip install" in err


def test_the_ray_engine_refuses_a_plan_with_tools():
    from bamasc.plan.compile import compile_file
    from bamasc.runtime.execute import ExecOptions, Task
    from bamasc.runtime.ray_engine import run_on_ray

    compiled = compile_file(EXAMPLE)
    with pytest.raises(ValueError, match="the Ray engine does not run tools yet .*help_pages.*--engine local"):
        run_on_ray(compiled.plan, compiled.program, None, [Task("1", TASK)], ExecOptions(fake_mode="echo"))


def test_the_api_and_its_session_start_the_tools_once(tmp_path):
    needs_mcp()
    import bamasc

    plan = bamasc.load(EXAMPLE).compile()
    result = plan.run_sync(TASK, provider=bamasc.providers.fake("echo"))
    assert result.status == "ok" and result.cost <= result.bound

    async def serve():
        trace = str(tmp_path / "session.jsonl")
        async with plan.session(trace=trace, provider=bamasc.providers.fake("verbose")) as session:
            first = await session.run(TASK)
            second = await session.run(TASK)
            return first, second, session.spent_here, session.open_reservations

    first, second, spent, held = asyncio.run(serve())
    assert first.status == second.status == "ok"
    assert first.cost <= first.bound + 1e-6 and spent == pytest.approx(first.cost + second.cost) and held == 0
    lines = lines_of(tmp_path / "session.jsonl")
    assert len([line for line in lines if line["type"] == "tool"]) == 2 * 3 * 2


def test_the_export_has_an_execute_tool_span_per_tool_line(tmp_path, capsys):
    needs_mcp()
    pytest.importorskip("opentelemetry.sdk.trace", reason="the export needs the otel extra")
    from bamasc.runtime.otel import build_spans, read_records

    trace = tmp_path / "trace.jsonl"
    assert main(["exec", EXAMPLE, "--task", TASK, "--trace", str(trace), "--fake", "echo"]) == 0
    capsys.readouterr()
    spans = build_spans(read_records(str(trace)))
    tools = [span for span in spans if span.name.startswith("execute_tool")]
    assert [span.name for span in tools] == ["execute_tool lookup_order"]
    (tool,) = tools
    assert tool.attributes["gen_ai.operation.name"] == "execute_tool" and tool.attributes["bamasc.round"] == 0
    assert tool.attributes["bamasc.charged_micro_usd"] == 20.0
    (line,) = [line for line in lines_of(trace) if line["type"] == "tool"]
    assert line["call_id"] and tool.attributes["gen_ai.tool.call.id"] == line["call_id"]
    assert tool.attributes["gen_ai.provider.name"] == "openai"  # the provider of the model that asked for it
    agent = next(span for span in spans if span.name == "invoke_agent Agent")
    assert tool.parent.span_id == agent.context.span_id
    assert len([span for span in spans if span.name.startswith("chat")]) == 3  # the classifier, two rounds
