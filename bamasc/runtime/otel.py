"""OpenTelemetry spans of a trace's records, under the GenAI semantic conventions (runtime/otlp.py sends them).

Per task run a span `invoke_workflow {template}`, per plan node in it a child
`invoke_agent {role}`, per attempt a grandchild `chat {model id}`. The trace
keeps each attempt's duration (`latency_ms`), not when it started, so the
attempts of a task are laid end to end in trace order and the task ends at a
given time: calls that ran in parallel are shown one after the other.

Only the conventions' own attributes go under `gen_ai.` and `server.`, each
with what the conventions mean by it: the vendor's model id, not the `.bam`
name, so that a tool that prices spans prices them as bamasc did. A fact the
trace does not hold (a response id in a trace written before they were kept)
is left out, never made up. bamasc's own figures are under `bamasc.`.

The SDK (the `otel` extra) is imported by the functions that build spans,
never when this module loads.
"""

from __future__ import annotations

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

    The trace's lines name each call's provider and vendor model id; for a
    trace written before they did, `program` (the program the trace ran)
    names them. With `plan` (the plan the trace ran): each call's requested
    max_tokens, the node's output cap (unknown when clamped), and each node's
    role where the trace has none.
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


def model_of(call: dict, program) -> tuple[str | None, str | None]:
    """(provider, vendor model id) of an attempt: its line's, else the program's model of that `.bam` name;
    None where neither says. A tool line names no model."""
    provider, model_id = call.get("provider"), call.get("model_id")
    name = call.get("model")
    declared = getattr(program, "models", {}).get(name) if call.get("type") == "call" and isinstance(name, str) else None
    if declared is not None:
        provider = provider if isinstance(provider, str) else declared.provider
        model_id = model_id if isinstance(model_id, str) else declared.model_id
    return (provider if isinstance(provider, str) and provider else None,
            model_id if isinstance(model_id, str) and model_id else None)


def _one(values) -> str | None:
    """The one value every item agrees on, None when they disagree or say nothing."""
    found = {value for value in values if value is not None}
    return found.pop() if len(found) == 1 else None


def _task_span(tracer, otel_trace, run: list[dict], lengths: list[int], start: int, program, plan) -> int:
    """The spans of one task run from `start` (ns); returns when it ends."""
    from opentelemetry.trace import SpanKind, Status, StatusCode

    task = run[-1] if run[-1]["type"] == "task" else None
    calls = attempts(run)
    models = [model_of(call, program) for call in calls]
    end = start + sum(lengths)
    template = task.get("template") if task else None
    nodes = _plan_nodes(plan, template)
    attributes = {"gen_ai.operation.name": "invoke_workflow", "gen_ai.workflow.name": template,
                  "gen_ai.provider.name": _one(provider for provider, _ in models),  # one provider ran it all
                  "bamasc.task_id": run[0]["task_id"]}
    if task is not None:
        attributes.update(_task_attributes(task))
    root = tracer.start_span(
        f"invoke_workflow {template}" if template else "invoke_workflow", kind=SpanKind.INTERNAL,
        attributes=_present(attributes), start_time=start,
    )
    if task is None:
        root.set_status(Status(StatusCode.ERROR, "no task line: the run ended before the task did"))
        root.set_attribute("error.type", "interrupted")
    elif task.get("status") in FAILED_STATUSES or task.get("overran"):
        root.set_status(Status(StatusCode.ERROR, task.get("error") or task.get("status")))
        root.set_attribute("error.type", "overran" if task.get("status") == "ok" else task["status"])
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
        spans = [(calls[i], models[i], starts[i], starts[i] + lengths[i]) for i in indices]
        _node_span(tracer, otel_trace.set_span_in_context, root_context, node_id, spans, nodes.get(node_id))
    root.end(end_time=end)
    return end


def _node_span(tracer, in_context, parent, node_id: str, spans: list[tuple], node) -> None:
    """The `invoke_agent` span of one plan node and, under it, a `chat` span per (attempt, model, start, end)
    and an `execute_tool` span per tool call of its tool loop."""
    from opentelemetry.trace import SpanKind, Status, StatusCode

    role = next((call.get("role") for call, *_ in spans if call.get("role")), None) or (node.role if node else None)
    # A node calls one model; its tool calls name none, and are that model's.
    provider = _one(model[0] for call, model, *_ in spans if call.get("type") == "call")
    model_id = _one(model[1] for call, model, *_ in spans if call.get("type") == "call")
    attributes = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": role,
                  "gen_ai.provider.name": provider, "gen_ai.request.model": model_id, "bamasc.node": node_id}
    agent = tracer.start_span(
        f"invoke_agent {role}" if role else "invoke_agent", context=parent, kind=SpanKind.INTERNAL,
        attributes=_present(attributes), start_time=spans[0][2],
    )
    context = in_context(agent)
    for call, (call_provider, call_model), start, end in spans:
        if call.get("type") == "tool":
            name, kind, attributes = f"execute_tool {call.get('name')}", SpanKind.INTERNAL, _tool_attributes(call, provider)
        else:
            name = f"chat {call_model}" if call_model else "chat"
            kind, attributes = SpanKind.CLIENT, _chat_attributes(call, call_provider, call_model, node)
        span = tracer.start_span(name, context=context, kind=kind, start_time=start, attributes=_present(attributes))
        reason = _failure(call)
        if reason:
            span.set_attribute("error.type", _error_type(reason))
            span.set_status(Status(StatusCode.ERROR, reason))
        span.end(end_time=end)
    last = _failure(spans[-1][0])
    if last:  # the call failed: its last attempt did (earlier ones were retried)
        agent.set_attribute("error.type", _error_type(last))
        agent.set_status(Status(StatusCode.ERROR, last))
    agent.end(end_time=spans[-1][3])


def _present(attributes: dict) -> dict:
    return {key: value for key, value in attributes.items() if value is not None}


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
    return _present(attributes)


def _tool_attributes(call: dict, provider: str | None) -> dict:
    call_id = call.get("call_id")
    return {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": call.get("name"),
            "gen_ai.tool.call.id": call_id if isinstance(call_id, str) and call_id else None,
            "gen_ai.provider.name": provider,  # the provider of the model that asked for the call
            "bamasc.node": call.get("node"), "bamasc.round": call.get("round"),
            "bamasc.charged_usd": _usd(call["charged"]), "bamasc.charged_micro_usd": float(call["charged"]),
            "bamasc.error": call.get("error")}


def _chat_attributes(call: dict, provider: str | None, model_id: str | None, node) -> dict:
    reason = call.get("finish_reason")
    port = call.get("server_port")
    attributes = {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": provider,
        "gen_ai.request.model": model_id,
        "gen_ai.usage.input_tokens": call.get("prompt_tokens"),
        "gen_ai.usage.output_tokens": call.get("completion_tokens"),
        "gen_ai.response.id": _text(call.get("response_id")),
        "gen_ai.response.model": _text(call.get("response_model")),
        "gen_ai.response.finish_reasons": [reason] if _text(reason) else None,
        "server.address": _text(call.get("server_address")),
        "server.port": port if type(port) is int and 0 < port < 65536 else None,
        "bamasc.model": call.get("model"),  # the model's name in the .bam
        "bamasc.reserved_usd": _usd(call.get("reserved") or 0),
        "bamasc.charged_usd": _usd(call["charged"]),
        "bamasc.reserved_micro_usd": float(call.get("reserved") or 0),
        "bamasc.charged_micro_usd": float(call["charged"]),
        "bamasc.clamped": bool(call.get("clamped")),
        "bamasc.skipped": bool(call.get("skipped")),
        "bamasc.attempt": call.get("attempt"),
        "bamasc.node": call.get("node"),
        "bamasc.rate_wait_s": call.get("rate_wait_s"),  # before the attempt, not part of its span
        "bamasc.reservation": call.get("id") or None,
        "bamasc.error": call.get("error") or None,
    }
    # Of the input tokens, those read from and written to the provider's cache (billed at their own rates).
    for key, field in (("cached_tokens", "cache_read"), ("cache_write_tokens", "cache_creation")):
        if type(call.get(key)) is int and call[key] > 0:
            attributes[f"gen_ai.usage.{field}.input_tokens"] = call[key]
    if node is not None and node.model == call.get("model") and not call.get("clamped"):
        attributes["gen_ai.request.max_tokens"] = node.output_tokens
    return attributes


def _text(value) -> str | None:
    return value if isinstance(value, str) and value else None
