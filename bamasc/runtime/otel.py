"""OpenTelemetry spans of a trace's records, under the GenAI semantic conventions, exported over OTLP/HTTP or as JSON.

Per task run a span `invoke_workflow {template}`, per plan node in it a child
`invoke_agent {role}`, per attempt a grandchild `chat {model}`. The trace
keeps each attempt's duration (`latency_ms`), not when it started, so the
attempts of a task are laid end to end in trace order and the task ends at a
given time: calls that ran in parallel are shown one after the other.

The SDK (the `otel` extra) is imported by the functions that build or export
spans, never when this module loads.
"""

from __future__ import annotations

import json
import logging
import re
import time

from bamasc.rows import parse_lines
from bamasc.runtime.trace import read_ledgers
from bamasc.secrets import redact

INSTALL_HINT = "OpenTelemetry export needs the otel extra: pip install 'bamasc[otel]'"
MICRO = 1_000_000  # µ$ per USD
# Task outcomes shown as errors: those that make `exec` exit 1 (`exhausted` still answers).
FAILED_STATUSES = frozenset({"error", "failed", "overbilled"})


class OtelMissing(RuntimeError):
    """The OpenTelemetry SDK or the OTLP exporter is not installed."""


class ExportError(RuntimeError):
    """The collector did not take the spans; the message says where and why."""


def require() -> None:
    """OtelMissing unless the SDK and the OTLP exporter can be imported: checked before a run whose spans they export."""
    try:
        import opentelemetry.exporter.otlp.proto.http.trace_exporter  # noqa: F401
        import opentelemetry.sdk.trace  # noqa: F401
    except ImportError:
        raise OtelMissing(INSTALL_HINT) from None


def read_records(path: str) -> list[dict]:
    """Every record of a trace, in file order; a bad line is the trace reader's TraceError (a cut-short last line is dropped)."""
    read_ledgers(path)  # checks every line, with the messages `--resume` gives
    with open(path, "rb") as handle:
        lines = handle.read().split(b"\n")
    # A trace written before errors were redacted may hold a key a server echoed: none reaches a span.
    return [
        {**record, "error": redact(record["error"])} if isinstance(record.get("error"), str) else record
        for _, record, problem in parse_lines(lines) if problem is None
    ]


def task_runs(records: list[dict]) -> list[list[dict]]:
    """The records grouped by task run: a task's records up to and including its next task line.

    A task resumed after `error` has a run per task line. A run that died
    before its task line is one with the resume that finished the task (whose
    `interrupted` call lines settle its open reservations); records after a
    task's last task line form a run without one. A proxy's `budget` lines
    and a thread's `turn` lines are no attempt and belong to no run.
    """
    runs: list[list[dict]] = []
    open_runs: dict[str, list[dict]] = {}
    for record in records:
        if record["type"] in ("budget", "turn"):  # no attempt: a scope's budget, a thread's turn about to start
            continue
        run = open_runs.get(record["task_id"])
        if run is None:
            run = open_runs[record["task_id"]] = []
            runs.append(run)
        run.append(record)
        if record["type"] == "task":
            del open_runs[record["task_id"]]
    return runs


def attempts(run: list[dict]) -> list[dict]:
    """The run's attempts as call lines; a reservation without a call line is an attempt in flight
    when the run died, charged in full (as the ledger counts it)."""
    settled = {record.get("id") for record in run if record["type"] in ("call", "tool")}
    found = []
    for record in run:
        if record["type"] == "call":
            found.append(record)
        elif record["type"] == "tool":  # a tool call of a tool loop: an execute_tool span
            found.append({**record, "latency_ms": record.get("duration_ms")})
        elif record["type"] == "reserve" and record["id"] not in settled and "tool" not in record:
            found.append({
                **record, "type": "call", "role": None, "prompt_tokens": 0, "completion_tokens": 0,
                "charged": record["reserved"], "latency_ms": None, "clamped": False, "skipped": False,
                "error": "interrupted: the run ended with this attempt in flight; reservation kept",
            })
    return found


def _error_type(error: str) -> str:
    return error.split(":", 1)[0].strip() or "error"


def _usd(micro: float) -> float:
    return round(micro / MICRO, 12)  # µ$ are kept to 6 decimals: no float noise past them


def build_spans(records: list[dict], program=None, plan=None, end_ns: int | None = None) -> list:
    """Finished SDK spans (ReadableSpan) for `records`; task runs laid end to end, the last ending at `end_ns` (now).

    With `program` each chat span names the model's provider; with `plan`
    (the plan the trace ran) its requested max_tokens, the node's output cap
    (unknown when clamped), and each node's role where the trace has none.
    """
    try:
        from opentelemetry import trace as otel_trace
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    except ImportError:
        raise OtelMissing(INSTALL_HINT) from None
    from bamasc.version import __version__

    collected = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "bamasc", "service.version": __version__}))
    provider.add_span_processor(SimpleSpanProcessor(collected))
    tracer = provider.get_tracer("bamasc", __version__)
    runs = task_runs(records)
    durations = [[_duration_ns(call) for call in attempts(run)] for run in runs]
    clock = (end_ns if end_ns is not None else time.time_ns()) - sum(map(sum, durations))
    for run, lengths in zip(runs, durations):
        clock = _task_span(tracer, otel_trace, run, lengths, clock, program, plan)
    provider.shutdown()
    return list(collected.get_finished_spans())


def _duration_ns(call: dict) -> int:
    latency = call.get("latency_ms")
    return int(round(latency * 1_000_000)) if isinstance(latency, (int, float)) and latency > 0 else 0


def _task_span(tracer, otel_trace, run: list[dict], lengths: list[int], start: int, program, plan) -> int:
    """The spans of one task run from `start` (ns); returns when it ends."""
    from opentelemetry.trace import SpanKind, Status, StatusCode

    task = run[-1] if run[-1]["type"] == "task" else None
    calls = attempts(run)
    end = start + sum(lengths)
    template = task.get("template") if task else None
    nodes = _plan_nodes(plan, template)
    attributes = {"gen_ai.operation.name": "invoke_workflow", "bamasc.task_id": run[0]["task_id"]}
    if task is not None:
        attributes.update(_task_attributes(task))
    root = tracer.start_span(
        f"invoke_workflow {template}" if template else "invoke_workflow", kind=SpanKind.INTERNAL,
        attributes=attributes, start_time=start,
    )
    if task is None:
        root.set_status(Status(StatusCode.ERROR, "no task line: the run ended before the task did"))
    elif task.get("status") in FAILED_STATUSES or task.get("overran"):
        root.set_status(Status(StatusCode.ERROR, task.get("error") or task.get("status")))
    # Each node's span covers its attempts, from the first one's start to the last one's end.
    starts, clock = [], start
    for length in lengths:
        starts.append(clock)
        clock += length
    by_node: dict[str, list[int]] = {}
    for index, call in enumerate(calls):
        by_node.setdefault(call.get("node") or "?", []).append(index)
    root_context = otel_trace.set_span_in_context(root)
    for node_id, indices in by_node.items():
        spans = [(calls[i], starts[i], starts[i] + lengths[i]) for i in indices]
        _node_span(tracer, otel_trace.set_span_in_context, root_context, node_id, spans, program, nodes.get(node_id))
    root.end(end_time=end)
    return end


def _node_span(tracer, in_context, parent, node_id: str, spans: list[tuple[dict, int, int]], program, node) -> None:
    """The `invoke_agent` span of one plan node and a `chat` span per (attempt, start, end) under it."""
    from opentelemetry.trace import SpanKind, Status, StatusCode

    role = next((call.get("role") for call, _, _ in spans if call.get("role")), None) or (node.role if node else None)
    attributes = {"gen_ai.operation.name": "invoke_agent", "bamasc.node": node_id}
    if role:
        attributes["gen_ai.agent.name"] = role
    agent = tracer.start_span(
        f"invoke_agent {role}" if role else "invoke_agent", context=parent, kind=SpanKind.INTERNAL,
        attributes=attributes, start_time=spans[0][1],
    )
    context = in_context(agent)
    for call, start, end in spans:
        tool = call.get("type") == "tool"
        chat = tracer.start_span(
            f"execute_tool {call.get('name')}" if tool else f"chat {call.get('model')}", context=context,
            kind=SpanKind.INTERNAL if tool else SpanKind.CLIENT, start_time=start,
            attributes=_tool_attributes(call) if tool else _chat_attributes(call, program, node),
        )
        reason = _failure(call)
        if reason:
            chat.set_attribute("error.type", _error_type(reason))
            chat.set_status(Status(StatusCode.ERROR, reason))
        chat.end(end_time=end)
    last = _failure(spans[-1][0])
    if last:  # the call failed: its last attempt did (earlier ones were retried)
        agent.set_status(Status(StatusCode.ERROR, last))
    agent.end(end_time=spans[-1][2])


def _failure(call: dict) -> str | None:
    if call.get("skipped"):
        return call.get("error") or "skipped: not even a useful minimum fits the budget"
    return call.get("error")


def _plan_nodes(plan, template: str | None) -> dict:
    if plan is None or template is None:
        return {}
    for system in plan.systems:
        for candidate in system.templates:
            if candidate.name == template:
                return {node.id: node for node in candidate.nodes}
    return {}


def _task_attributes(task: dict) -> dict:
    attributes = {"bamasc.template": task.get("template"), "bamasc.status": task.get("status")}
    for key in ("budget", "bound", "cost"):
        value = task.get(key)
        if isinstance(value, (int, float)):
            attributes[f"bamasc.{key}_usd"] = _usd(value)
            attributes[f"bamasc.{key}_micro_usd"] = float(value)
    if task.get("error"):
        attributes["bamasc.error"] = task["error"]
    return {key: value for key, value in attributes.items() if value is not None}


def _tool_attributes(call: dict) -> dict:
    attributes = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": call.get("name"),
                  "bamasc.node": call.get("node"), "bamasc.round": call.get("round"),
                  "bamasc.charged_micro_usd": float(call["charged"]), "bamasc.error": call.get("error")}
    return {key: value for key, value in attributes.items() if value is not None}


def _chat_attributes(call: dict, program, node) -> dict:
    model = call.get("model")
    attributes = {
        "gen_ai.operation.name": "chat",
        "gen_ai.request.model": model,
        "gen_ai.usage.input_tokens": call.get("prompt_tokens"),
        "gen_ai.usage.output_tokens": call.get("completion_tokens"),
        "gen_ai.usage.cost": _usd(call["charged"]),
        "bamasc.reserved_usd": _usd(call.get("reserved") or 0),
        "bamasc.charged_usd": _usd(call["charged"]),
        "bamasc.reserved_micro_usd": float(call.get("reserved") or 0),
        "bamasc.charged_micro_usd": float(call["charged"]),
        "bamasc.clamped": bool(call.get("clamped")),
        "bamasc.skipped": bool(call.get("skipped")),
        "bamasc.attempt": call.get("attempt"),
        "bamasc.node": call.get("node"),
        "bamasc.rate_wait_s": call.get("rate_wait_s"),  # before the attempt, not part of its span
    }
    if call.get("id"):
        attributes["bamasc.reservation"] = call["id"]
    if call.get("error"):
        attributes["bamasc.error"] = call["error"]
    if program is not None and model in getattr(program, "models", {}):
        attributes["gen_ai.provider.name"] = program.models[model].provider
    if node is not None and node.model == model and not call.get("clamped"):
        attributes["gen_ai.request.max_tokens"] = node.output_tokens
    return {key: value for key, value in attributes.items() if value is not None}


def spans_json(spans: list) -> str:
    """The spans as OTLP/JSON (an ExportTraceServiceRequest): the SDK's protobuf encoding in the
    protobuf JSON mapping, with trace and span ids as hex, as OTLP/JSON writes them."""
    from google.protobuf.json_format import MessageToDict

    try:
        from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
    except ImportError:
        raise OtelMissing(INSTALL_HINT) from None
    data = MessageToDict(encode_spans(spans), use_integers_for_enums=True)
    for resource in data.get("resourceSpans", []):
        for scope in resource.get("scopeSpans", []):
            for span in scope.get("spans", []):
                for key in ("traceId", "spanId", "parentSpanId"):
                    if key in span:
                        span[key] = _hex(span[key])
    return json.dumps(data, indent=2, ensure_ascii=False) + "\n"


def _hex(base64_text: str) -> str:
    import base64

    return base64.b64decode(base64_text).hex()


def check_url(url: str) -> None:
    """ExportError unless `url` is an http(s) URL with a host: checked before a run whose spans go there."""
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(url)
        # `port` raises ValueError for one out of range or not a number.
        usable = parts.scheme in ("http", "https") and bool(parts.hostname) and (parts.port is None or parts.port > 0)
    except ValueError:
        usable = False
    if not usable:
        raise ExportError(f"cannot export the spans to {url}: not an http:// or https:// URL with a host and port "
                          "(e.g. http://127.0.0.1:4318/v1/traces)")


def export_otlp(spans: list, url: str, timeout: float | None = None) -> None:
    """Send the spans to an OTLP/HTTP collector at `url` (the full path, e.g. .../v1/traces); ExportError if it did not take them."""
    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.trace.export import SpanExportResult
    except ImportError:
        raise OtelMissing(INSTALL_HINT) from None
    check_url(url)
    if not spans:
        return
    # The exporter logs its failures; they are caught here and told once, as one message.
    heard = _Heard()
    logger = logging.getLogger("opentelemetry")
    saved = logger.propagate, logger.level
    logger.addHandler(heard)
    logger.propagate = False
    logger.setLevel(logging.WARNING)
    try:
        exporter = OTLPSpanExporter(endpoint=url, timeout=timeout)
        try:
            result = exporter.export(spans)
        finally:
            exporter.shutdown()
    except Exception as problem:  # a malformed URL, refused before any request
        raise ExportError(f"cannot export the spans to {url}: {problem}") from None
    finally:
        logger.removeHandler(heard)
        logger.propagate = saved[0]
        logger.setLevel(saved[1])
    if result is not SpanExportResult.SUCCESS:
        cause = heard.os_reason() or _connect_problem(url) or heard.first()
        reason = f": {cause}" if cause else ""
        raise ExportError(f"cannot export the spans to {url} (is an OTLP/HTTP collector listening there?){reason}")


class _Heard(logging.Handler):
    """Keeps what the exporter logged, to name the cause of a failed export in one line."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.messages.append(record.getMessage())
        except Exception:
            pass

    def os_reason(self) -> str | None:
        """The operating system's reason (`[Errno 111] Connection refused`), if one was logged."""
        for message in self.messages:
            found = _OS_REASON.search(message)
            if found:
                return found.group(0)
        return None

    def first(self) -> str | None:
        return self.messages[0].splitlines()[0][:300] if self.messages else None


def _connect_problem(url: str) -> str | None:
    """Why a TCP connection to the URL's host and port fails, or None: the exporter gives up
    without logging the cause when its timeout leaves no room for a retry."""
    import socket
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(url)
        port = parts.port or (443 if parts.scheme == "https" else 80)
        with socket.create_connection((parts.hostname, port), timeout=2):
            return None
    except (OSError, ValueError, TypeError) as problem:
        if isinstance(problem, OSError) and problem.errno is not None:
            return f"[Errno {problem.errno}] {problem.strerror}"
        return str(problem) or None


_OS_REASON = re.compile(r"\[Errno -?\d+\] [^\"')]+")
