"""`bamasc trace export`: a trace's calls as OpenTelemetry spans, sent to a collector or written as OTLP/JSON."""

from __future__ import annotations

import os

from bamasc.cli import inputs, output
from bamasc.cli.report import Report


def add_parser(commands) -> None:
    trace = commands.add_parser("trace", help="work with exec traces (export them as OpenTelemetry spans)")
    actions = trace.add_subparsers(dest="action", metavar="ACTION", prog="bamasc trace")
    actions.required = True
    export = actions.add_parser("export", help="export a trace as OpenTelemetry spans (GenAI semantic conventions)")
    export.add_argument("trace", metavar="TRACE", help="a trace JSONL written by exec --trace")
    target = export.add_mutually_exclusive_group(required=True)
    target.add_argument("--otlp", metavar="URL",
                        help="send the spans to this OTLP/HTTP collector: its base URL (e.g. http://127.0.0.1:4318; "
                             "/v1/traces is added) or its traces endpoint")
    target.add_argument("-o", "--output", metavar="JSON", help="write the spans here as OTLP/JSON")
    export.add_argument("--plan", metavar="FILE|PLAN",
                        help="the .bam file or plan the trace ran: adds each call's requested max_tokens (and its "
                             "provider and model id, for a trace written before it named them)")
    export.add_argument("--system", help="with a .bam --plan: the system to compile")
    export.set_defaults(run=run)


def run(args) -> int:
    report = Report()
    if not inputs.is_file(report, args.trace):
        return report.return_code
    if args.output and not inputs.writable(report, args.output, "the spans"):
        return report.return_code
    from bamasc.runtime.otel import ExportError, OtelMissing, build_spans, read_records, require
    from bamasc.runtime.otlp import export_otlp, spans_json, traces_url
    from bamasc.runtime.trace import TraceError

    try:
        require()
    except OtelMissing as problem:
        output.failure(report, problem)
        return report.return_code
    url = None
    if args.otlp:
        try:
            url = traces_url(args.otlp)
        except ExportError as problem:
            output.usage(report, problem)
            return report.return_code
    plan = program = None
    if args.plan:
        loaded = plan_for(report, args.plan, args.system)
        if loaded is None:
            return report.return_code
        plan, program = loaded

    try:
        spans = build_spans(read_records(args.trace), program, plan)
        if url:
            export_otlp(spans, url)
            print(f"{len(spans)} spans sent to {url}")
        else:
            text = spans_json(spans)
            if not inputs.write_text(report, args.output, "the spans", text):
                return report.return_code
            print(f"{len(spans)} spans written to {args.output}")
    except (OtelMissing, TraceError, ExportError) as problem:
        output.failure(report, problem)
    return report.return_code


def plan_for(report: Report, path: str, system: str | None):
    """(plan, program) of a plan JSON (re-verified) or of a .bam file compiled at its declared budget."""
    if path.endswith(".json"):
        return inputs.loaded_plan(report, path)
    result = inputs.compiled(report, path, system, None, "lexicographic")
    if result is None or result.plan is None:
        return None
    return result.plan, result.program


class LiveExport:
    """`exec --otlp`: the spans of the records a run appends to its trace, sent when the run ends.

    Without --trace the run writes a temporary trace for them. Records already
    in the trace are counted first, so only this run's are sent.
    """

    def __init__(self, url: str, trace_path: str | None) -> None:
        self.url = url
        self.temporary = trace_path is None
        if self.temporary:
            import tempfile

            handle, trace_path = tempfile.mkstemp(prefix="bamasc-trace-", suffix=".jsonl")
            os.close(handle)
        self.trace_path = trace_path
        self.before = 0

    @classmethod
    def start(cls, report: Report, url: str, trace_path: str | None):
        """A LiveExport ready for the run, or None once a problem is reported (the extra missing, a bad trace)."""
        from bamasc.runtime.otel import ExportError, OtelMissing, read_records, require
        from bamasc.runtime.otlp import traces_url
        from bamasc.runtime.trace import TraceError

        try:
            require()
            url = traces_url(url)
        except ExportError as problem:
            output.usage(report, problem)
            return None
        except OtelMissing as problem:
            output.failure(report, problem)
            return None
        live = cls(url, trace_path)
        if not live.temporary and os.path.exists(trace_path):
            try:
                live.before = len(read_records(trace_path))
            except TraceError as problem:
                output.failure(report, problem)
                return None
        return live

    def finish(self, report: Report, program, plan) -> None:
        """Send this run's spans; a collector that does not take them is reported (exit 1)."""
        from bamasc.runtime.otel import ExportError, build_spans, read_records
        from bamasc.runtime.otlp import export_otlp
        from bamasc.runtime.trace import TraceError

        try:
            records = read_records(self.trace_path)[self.before:]
            export_otlp(build_spans(records, program, plan), self.url)
        except (TraceError, ExportError) as problem:
            output.failure(report, problem)
        finally:
            self.close()

    def close(self) -> None:
        if self.temporary:
            try:
                os.remove(self.trace_path)
            except OSError:
                pass
