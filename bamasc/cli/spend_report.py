"""`bamasc report`: one self-contained HTML page of where a trace's money went (needs bamasc[report])."""

from __future__ import annotations

from bamasc.cli import args as cli_args
from bamasc.cli import inputs, output
from bamasc.cli.report import Report


def add_parser(commands) -> None:
    report = commands.add_parser("report", help="an HTML page of a trace's spend: totals, charts, refusals "
                                                "(needs bamasc[report])")
    report.add_argument("traces", metavar="TRACE", nargs="+",
                        help="trace JSONL files written by exec --trace, serve --trace or proxy --trace")
    report.add_argument("-o", "--output", metavar="HTML", required=True, help="the page to write (replaced)")
    report.add_argument("--total-budget", type=cli_args.budget, metavar="B",
                        help="µ$ (or $) to draw the spend against, e.g. the run's --total-budget")
    report.add_argument("--title", default="bamasc spend report", help="the page's title")
    report.set_defaults(run=run)


def run(args) -> int:
    report = Report()
    if not all(inputs.is_file(report, path) for path in args.traces):
        return report.return_code
    if not inputs.writable(report, args.output, "the report"):
        return report.return_code
    from bamasc.http.page import ReportMissing, require, trace_report
    from bamasc.http.spend import TraceLineError

    try:
        require()
        text = trace_report(args.traces, args.total_budget, args.title)
    except (ReportMissing, TraceLineError) as problem:
        output.failure(report, problem)
        return report.return_code
    if not inputs.write_text(report, args.output, "the report", text):
        return report.return_code
    print(f"report written to {args.output}")
    return report.return_code
