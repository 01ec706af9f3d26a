"""OpenTelemetry export: exec --otlp to a real loopback OTLP/HTTP receiver, trace export, and their errors."""

from __future__ import annotations

import asyncio
import http.server
import json
import os
import threading

import pytest

pytest.importorskip("opentelemetry.sdk.trace")
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (  # noqa: E402
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from bamasc.cli import main  # noqa: E402
from bamasc.plan.compile import compile_file  # noqa: E402
from bamasc.metering.guard import BudgetGuard  # noqa: E402
from bamasc.runtime.interpreter import TaskRun  # noqa: E402
from bamasc.runtime.providers.base import Completion  # noqa: E402
from bamasc.runtime.providers.fake import FakeProvider  # noqa: E402
from bamasc.runtime.retry import RetryPolicy  # noqa: E402
from bamasc.runtime.trace import TraceWriter  # noqa: E402
from tests.conftest import ROOT  # noqa: E402

GSM8K = os.path.join(ROOT, "examples", "gsm8k.bam")
NO_WAIT = RetryPolicy(max_attempts=3, base_delay=0.0, max_delay=0.0, timeout=5.0)
STATUS_ERROR = 2  # Status.StatusCode.STATUS_CODE_ERROR


class Receiver:
    """An OTLP/HTTP collector on 127.0.0.1: POST /v1/traces bodies decoded as ExportTraceServiceRequest."""

    def __init__(self) -> None:
        self.requests: list[ExportTraceServiceRequest] = []
        received = self.requests

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 (the http.server name)
                body = self.rfile.read(int(self.headers["Content-Length"]))
                if self.path != "/v1/traces":
                    self.send_response(404)
                    self.end_headers()
                    return
                request = ExportTraceServiceRequest()
                request.ParseFromString(body)
                received.append(request)
                reply = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base = f"http://127.0.0.1:{self.server.server_address[1]}"  # the collector's base URL
        self.url = f"{self.base}/v1/traces"
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True)
        self.thread.start()

    def spans(self) -> list:
        return [span for request in self.requests for resource in request.resource_spans
                for scope in resource.scope_spans for span in scope.spans]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver():
    server = Receiver()
    yield server
    server.close()


@pytest.fixture(autouse=True)
def short_export_timeout(monkeypatch):
    # The exporter retries a refused connection until its timeout; one second keeps the error tests short.
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "1")


def attributes(span) -> dict:
    found = {}
    for pair in span.attributes:
        value = pair.value
        found[pair.key] = getattr(value, value.WhichOneof("value"))
    return found


def records(path) -> list[dict]:
    with open(path, encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def tree(spans):
    by_id = {span.span_id: span for span in spans}
    tasks = [s for s in spans if not s.parent_span_id]
    children = {}
    for span in spans:
        if span.parent_span_id:
            children.setdefault(span.parent_span_id, []).append(span)
    for span in spans:
        assert not span.parent_span_id or span.parent_span_id in by_id
    return tasks, children


# ---------------------------------------------------------------- exec --otlp


def test_exec_otlp_sends_a_span_per_task_node_and_attempt(tmp_path, receiver, capsys):
    trace = tmp_path / "trace.jsonl"
    dataset = tmp_path / "tasks.jsonl"
    dataset.write_text('{"id": "a", "question": "What is 2+3?"}\n{"id": "b", "question": "What is 6 times 7?"}\n')
    code = main(["exec", GSM8K, "--fake", "echo", "--dataset", str(dataset), "--trace", str(trace), "--otlp", receiver.url])
    assert code == 0, capsys.readouterr().err
    spans = receiver.spans()
    lines = records(trace)
    calls = [r for r in lines if r["type"] == "call"]
    tasks_lines = [r for r in lines if r["type"] == "task"]
    tasks, children = tree(spans)
    assert sorted(attributes(t)["bamasc.task_id"] for t in tasks) == ["a", "b"]
    assert len({t.trace_id for t in tasks}) == 2  # a trace per task
    program = compile_file(GSM8K).program
    chats = []
    for task in tasks:
        a = attributes(task)
        line = next(t for t in tasks_lines if t["task_id"] == a["bamasc.task_id"])
        assert task.name == f"invoke_workflow {line['template']}"
        assert a["gen_ai.operation.name"] == "invoke_workflow"
        assert a["bamasc.template"] == line["template"] and a["bamasc.status"] == line["status"] == "ok"
        assert a["bamasc.cost_micro_usd"] == line["cost"] and a["bamasc.cost_usd"] == pytest.approx(line["cost"] / 1e6)
        assert a["bamasc.budget_usd"] == pytest.approx(line["budget"] / 1e6)
        assert a["bamasc.bound_micro_usd"] == line["bound"]
        assert "bamasc.error" not in a and task.status.code != STATUS_ERROR
        for agent in children[task.span_id]:
            b = attributes(agent)
            assert b["gen_ai.operation.name"] == "invoke_agent"
            assert agent.name == f"invoke_agent {b['gen_ai.agent.name']}"
            assert agent.trace_id == task.trace_id
            assert task.start_time_unix_nano <= agent.start_time_unix_nano <= agent.end_time_unix_nano <= task.end_time_unix_nano
            for chat in children[agent.span_id]:
                c = attributes(chat)
                assert c["bamasc.node"] == b["bamasc.node"]
                assert chat.name == f"chat {c['gen_ai.request.model']}" and c["gen_ai.operation.name"] == "chat"
                declared = program.models[c["bamasc.model"]]
                assert c["gen_ai.provider.name"] == declared.provider == b["gen_ai.provider.name"]
                assert c["gen_ai.request.model"] == declared.model_id == b["gen_ai.request.model"]  # the vendor's id
                assert c["gen_ai.response.finish_reasons"].values[0].string_value in ("stop", "length")
                assert "gen_ai.response.id" not in c and "server.address" not in c  # the fake gives no id, has no server
                assert c["gen_ai.request.max_tokens"] > 0
                assert agent.start_time_unix_nano <= chat.start_time_unix_nano < chat.end_time_unix_nano <= agent.end_time_unix_nano
                chats.append((a["bamasc.task_id"], b["gen_ai.agent.name"], c))
    # One chat span per call line: the same node, model, tokens and µ$.
    assert len(chats) == len(calls)
    seen = sorted((task_id, role, c["bamasc.node"], c["bamasc.model"], c["gen_ai.usage.input_tokens"],
                   c["gen_ai.usage.output_tokens"], c["bamasc.charged_micro_usd"], c["bamasc.reserved_micro_usd"],
                   c["bamasc.attempt"], c["bamasc.clamped"], c["bamasc.skipped"]) for task_id, role, c in chats)
    expected = sorted((r["task_id"], r["role"], r["node"], r["model"], r["prompt_tokens"], r["completion_tokens"],
                       r["charged"], r["reserved"], r["attempt"], r["clamped"], r["skipped"]) for r in calls)
    assert seen == expected
    for _, _, c in chats:
        assert "gen_ai.usage.cost" not in c  # no such attribute in the conventions: bamasc's figure is bamasc's
        assert c["bamasc.charged_usd"] == pytest.approx(c["bamasc.charged_micro_usd"] / 1e6)
        assert c["bamasc.reserved_usd"] == pytest.approx(c["bamasc.reserved_micro_usd"] / 1e6)


def test_exec_output_is_the_same_with_and_without_otlp(tmp_path, receiver, capsys):
    task = ["exec", GSM8K, "--fake", "echo", "--task", "What is 2+3?"]
    assert main(task) == 0
    plain = capsys.readouterr()
    assert main([*task, "--otlp", receiver.url]) == 0
    exported = capsys.readouterr()
    assert exported.out == plain.out
    assert len(receiver.spans()) == 9  # star: a task, four executors, four attempts
    assert not [name for name in os.listdir(tmp_path)]  # the temporary trace is gone (and never here)


def test_exec_otlp_sends_only_this_runs_records(tmp_path, receiver, capsys):
    trace = tmp_path / "trace.jsonl"
    base = ["exec", GSM8K, "--fake", "echo", "--task", "What is 2+3?", "--trace", str(trace)]
    assert main(base) == 0
    assert main([*base, "--otlp", receiver.url]) == 0
    assert len([s for s in receiver.spans() if not s.parent_span_id]) == 1


def test_exec_otlp_to_a_closed_port_fails_cleanly_after_the_run(tmp_path, capsys):
    trace = tmp_path / "trace.jsonl"
    code = main(["exec", GSM8K, "--fake", "echo", "--task", "What is 2+3?", "--trace", str(trace), "--otlp", closed_url()])
    captured = capsys.readouterr()
    assert code == 1
    assert "status: ok" in captured.out  # the run itself happened and was reported
    assert "cannot export the spans to" in captured.err and "Traceback" not in captured.err
    assert [r for r in records(trace) if r["type"] == "task"]


def closed_url() -> str:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1/traces"


# ---------------------------------------------------------------- trace export


class Overbilling(FakeProvider):
    """Bills ten times the output cap: the guard must record `overbilled` and stop the task."""

    async def complete(self, messages, max_tokens, **options):
        completion = await super().complete(messages, max_tokens, **options)
        return Completion(completion.text, completion.prompt_tokens, max_tokens * 10)


def write_task(writer: TraceWriter, result) -> None:
    writer.task({
        "task_id": result.task_id, "answer": result.answer, "cost": round(result.cost, 6), "budget": result.budget,
        "bound": round(result.bound, 6), "template": result.template, "overran": result.overran,
        "status": result.status, "error": result.error, "calls": result.calls, "guard": "reserve", "earlier_runs": 0,
    })


@pytest.fixture(scope="module")
def hard_trace(tmp_path_factory):
    """A real trace with failed and retried attempts, skipped calls and an overbilled task."""
    compiled = compile_file(GSM8K)
    plan, program = compiled.plan, compiled.program
    system = plan.systems[0]
    path = str(tmp_path_factory.mktemp("otel") / "hard.jsonl")
    writer = TraceWriter(path)
    runs = [
        ("flaky", "linear", "What is 6 times 7?", dict(fail_rate=0.6, fail_kinds=("timeout",), seed=3), FakeProvider),
        ("huge", "linear", "7 " * 2000, dict(mode="verbose"), FakeProvider),
        ("billed", "linear", "What is 2+3?", {}, Overbilling),
    ]
    for task_id, template, text, options, kind in runs:
        providers = {name: kind(name, **options) for name in program.systems["gsm8k"].models}
        run = TaskRun(program, system, system.template(template), providers, BudgetGuard(system.budget), task_id,
                      text, writer, NO_WAIT)
        write_task(writer, asyncio.run(run.run()))
    writer.close()
    return path


def exported(tmp_path, trace, *extra) -> tuple[int, list]:
    out = tmp_path / "spans.json"
    code = main(["trace", "export", trace, "-o", str(out), *extra])
    if code != 0:
        return code, []
    data = json.loads(out.read_text())
    return code, [span for resource in data["resourceSpans"] for scope in resource["scopeSpans"] for span in scope["spans"]]


def json_attributes(span) -> dict:
    return {pair["key"]: next(iter(pair["value"].values())) for pair in span.get("attributes", [])}


def test_export_marks_failed_skipped_and_overbilled_attempts(tmp_path, hard_trace, capsys):
    code, spans = exported(tmp_path, hard_trace)
    assert code == 0, capsys.readouterr().err
    calls = [r for r in records(hard_trace) if r["type"] == "call"]
    chats = [s for s in spans if json_attributes(s)["gen_ai.operation.name"] == "chat"]
    assert len(chats) == len(calls)
    by_reason = {}
    for chat, call in zip(sorted(chats, key=lambda s: int(s["startTimeUnixNano"])), calls):
        a = json_attributes(chat)
        assert a["bamasc.node"] == call["node"] and float(a["bamasc.charged_micro_usd"]) == call["charged"]
        assert int(a["gen_ai.usage.input_tokens"]) == call["prompt_tokens"]
        assert a["bamasc.skipped"] == call["skipped"]
        assert a["gen_ai.provider.name"] == call["provider"] == "openai"  # the trace names them: no --plan needed
        assert a["gen_ai.request.model"] == call["model_id"] and a["bamasc.model"] == call["model"]
        if call["error"] or call["skipped"]:
            assert chat["status"]["code"] == STATUS_ERROR
            by_reason.setdefault(a["error.type"], []).append(call)
        else:
            assert "error.type" not in a and chat.get("status", {}).get("code") != STATUS_ERROR
    assert {"timeout", "skipped", "overbilled"} <= set(by_reason)
    assert all(c["charged"] == c["reserved"] for c in by_reason["timeout"])
    tasks = {json_attributes(s)["bamasc.task_id"]: s for s in spans if "parentSpanId" not in s}
    billed = json_attributes(tasks["billed"])
    assert billed["bamasc.status"] == "overbilled" and billed["bamasc.error"]
    assert tasks["billed"]["status"]["code"] == STATUS_ERROR
    # Ids are OTLP/JSON's hex, each span's parent is in the file.
    ids = {s["spanId"] for s in spans}
    assert all(len(s["spanId"]) == 16 and len(s["traceId"]) == 32 for s in spans)
    assert all(s["parentSpanId"] in ids for s in spans if "parentSpanId" in s)


def test_export_with_the_plan_names_providers_and_max_tokens(tmp_path, hard_trace, capsys):
    code, spans = exported(tmp_path, hard_trace, "--plan", GSM8K)
    assert code == 0, capsys.readouterr().err
    chats = [json_attributes(s) for s in spans if json_attributes(s)["gen_ai.operation.name"] == "chat"]
    assert {a["gen_ai.provider.name"] for a in chats} == {"openai"}
    assert all(("gen_ai.request.max_tokens" in a) != a["bamasc.clamped"] for a in chats)


def test_export_sends_to_a_collector(tmp_path, hard_trace, receiver, capsys):
    assert main(["trace", "export", hard_trace, "--otlp", receiver.url]) == 0
    assert f"spans sent to {receiver.url}" in capsys.readouterr().out
    tasks, _ = tree(receiver.spans())
    assert sorted(attributes(t)["bamasc.task_id"] for t in tasks) == ["billed", "flaky", "huge"]


def test_an_open_reservation_is_an_interrupted_attempt(tmp_path, capsys):
    trace = tmp_path / "died.jsonl"
    trace.write_text(json.dumps({"type": "reserve", "id": "r.1", "task_id": "t", "node": "solver[0]@0.draft",
                                 "model": "gpt41_nano", "attempt": 1, "reserved": 12.5}) + "\n")
    code, spans = exported(tmp_path, str(trace))
    assert code == 0, capsys.readouterr().err
    # A reserve line written before lines named the provider and model id: the span says neither.
    chat = next(s for s in spans if s["name"] == "chat")
    a = json_attributes(chat)
    assert a["error.type"] == "interrupted" and a["bamasc.charged_micro_usd"] == 12.5
    assert a["bamasc.model"] == "gpt41_nano" and "gen_ai.request.model" not in a and "gen_ai.provider.name" not in a
    root = next(s for s in spans if "parentSpanId" not in s)
    assert root["name"] == "invoke_workflow" and root["status"]["code"] == STATUS_ERROR


# ---------------------------------------------------------------- errors


def test_export_errors_are_messages_with_exit_codes(tmp_path, hard_trace, capsys):
    missing = str(tmp_path / "missing.jsonl")
    assert main(["trace", "export", missing, "-o", str(tmp_path / "x.json")]) == 2
    assert capsys.readouterr().err == f"bamasc: error: no such file: {missing}\n"
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"type": "call", "task_id": "t", "charged": -1}\n{"type": "task", "task_id": "t"}\n')
    assert main(["trace", "export", str(bad), "-o", str(tmp_path / "x.json")]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"bamasc: error: {bad}:1: call line with charged = ") and "Traceback" not in err
    assert main(["trace", "export", hard_trace, "--otlp", closed_url()]) == 1
    err = capsys.readouterr().err
    assert "cannot export the spans to http://127.0.0.1:" in err and "Connection refused" in err
    assert "Traceback" not in err and err.count("\n") == 1
    assert main(["trace", "export", hard_trace, "-o", str(tmp_path)]) == 2
    assert "it is a directory" in capsys.readouterr().err


def test_the_missing_extra_is_named(tmp_path, hard_trace, capsys, monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_otel(name, *args, **kwargs):
        if name.startswith("opentelemetry"):
            raise ImportError(f"No module named {name!r}")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_otel)
    assert main(["trace", "export", hard_trace, "-o", str(tmp_path / "x.json")]) == 1
    assert "pip install 'bamasc[otel]'" in capsys.readouterr().err
    assert main(["exec", GSM8K, "--fake", "echo", "--task", "2+3", "--otlp", "http://127.0.0.1:1/v1/traces"]) == 1
    captured = capsys.readouterr()
    assert "pip install 'bamasc[otel]'" in captured.err and captured.out == ""  # refused before the run


def test_a_url_that_is_no_http_url_is_refused_before_the_run(tmp_path, hard_trace, capsys):
    for url in ("127.0.0.1:4318", "http://127.0.0.1:99999/v1/traces", "ftp://collector/v1/traces"):
        assert main(["exec", GSM8K, "--fake", "echo", "--task", "2+3", "--otlp", url]) == 2
        captured = capsys.readouterr()
        assert captured.out == "" and "not an http:// or https:// URL" in captured.err
        assert main(["trace", "export", hard_trace, "--otlp", url]) == 2
        assert "not an http:// or https:// URL" in capsys.readouterr().err


@pytest.mark.parametrize("path", ["/v1/logs", "/traces", "/v1/traces/x", "/v1", "/?x=1", "/v1/traces#top", "/api/v1/traces"])
def test_a_collector_url_with_another_path_is_a_usage_error(hard_trace, path, capsys):
    url = f"http://127.0.0.1:4318{path}"
    assert main(["exec", GSM8K, "--fake", "echo", "--task", "2+3", "--otlp", url]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and "give the collector's base URL (e.g. http://127.0.0.1:4318)" in captured.err
    assert "Traceback" not in captured.err and captured.err.count("\n") == 1
    assert main(["trace", "export", hard_trace, "--otlp", url]) == 2
    assert "or its traces endpoint (http://127.0.0.1:4318/v1/traces)" in capsys.readouterr().err


@pytest.mark.parametrize("suffix", ["", "/", "/v1/traces", "/v1/traces/"])
def test_the_collectors_base_url_or_its_traces_endpoint_both_reach_it(tmp_path, hard_trace, receiver, suffix, capsys):
    assert main(["trace", "export", hard_trace, "--otlp", receiver.base + suffix]) == 0
    assert capsys.readouterr().out.endswith(f"spans sent to {receiver.url}\n")
    assert len(receiver.spans()) > 0  # the receiver answers 404 on any other path


def test_exec_otlp_takes_the_base_url(tmp_path, receiver, capsys):
    assert main(["exec", GSM8K, "--fake", "echo", "--task", "What is 2+3?", "--otlp", receiver.base]) == 0
    assert len(receiver.spans()) == 9
