"""`bamasc fit-weights`: estimate each model's quality per role from offline rows, as `quality` blocks to review."""

from __future__ import annotations

import sys

from bamasc.cli import inputs, output
from bamasc.cli.report import Report


def add_parser(commands) -> None:
    fit = commands.add_parser(
        "fit-weights",
        help="estimate each model's quality for each role from offline rows; writes quality blocks to review",
    )
    fit.add_argument("file", metavar="FILE")
    fit.add_argument("--data", required=True, metavar="JSONL", help="offline rows (from `bamasc collect`)")
    fit.add_argument("--system", help="the system the rows were collected for (default: the first)")
    fit.add_argument("-o", "--output", metavar="BAM", help="write the quality blocks here (default: print them)")
    fit.add_argument("--skip-bad-rows", action="store_true", help="report malformed offline rows and go on")
    fit.set_defaults(run=run)


def run(args) -> int:
    report = Report()
    if not (inputs.is_file(report, args.file) and inputs.is_file(report, args.data)):
        return report.return_code
    if args.output and not inputs.writable(report, args.output, "the quality blocks"):
        return report.return_code
    found = inputs.checked_program_system(report, args.file, args.system)
    if found is None:
        return report.return_code
    program, system = found
    from bamasc.policy.data import OfflineDataError, read_offline_rows
    from bamasc.policy.quality_fit import fit_quality, quality_text

    rows = inputs.rows(report, read_offline_rows, args.data, args.skip_bad_rows, OfflineDataError)
    if rows is None:
        return report.return_code
    fit = fit_quality(program, system, rows)
    if not fit.rows:
        output.failure(report, f"{args.data} has no feasible row of a template of system '{system.name}'")
        return report.return_code
    text = quality_text(fit, system.name, args.data)
    if args.output:
        with open(args.output, "w", encoding="utf-8") as out:
            out.write(text)
        print(f"wrote {len(fit.estimates)} estimates from {fit.rows} rows to {args.output}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return report.return_code
