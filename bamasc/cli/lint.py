"""`bamasc lint`: check .bam files without compiling them, in the format CI reads.

Its start-up is the one users wait on in editors and pre-commit: this module
imports only the report at load time.
"""

from __future__ import annotations

import os
import sys

from bamasc.cli.report import Report

FORMATS = ("text", "json", "sarif", "github")


def add_parser(commands) -> None:
    lint = commands.add_parser("lint", help="check .bam files without compiling them (fast; for CI and pre-commit)")
    lint.add_argument("files", nargs="+", metavar="FILE")
    lint.add_argument("--format", choices=FORMATS, default="text", help="output format (default: text)")
    lint.add_argument("--strict", action="store_true", help="treat warnings as errors (exit 1)")
    lint.add_argument("--with-importers", action="store_true",
                      help="also lint every .bam file under the current directory that imports a FILE (pre-commit)")
    lint.add_argument(
        "--max-diagnostics", type=int, default=200, metavar="N", help="text format: show at most N (default 200)"
    )
    lint.set_defaults(run=run)


def run(args) -> int:
    from bamasc import diagnostics as render
    from bamasc.lint import lint_paths

    report = Report(strict=args.strict)
    # A missing, unreadable or non-UTF-8 file is a BAM006/BAM005 diagnostic, not a usage
    # error: CI then still gets valid SARIF (or JSON, or an annotation) that names it.
    files = list(args.files)
    if args.with_importers:
        from bamasc.lint import importers

        files += [path for path in importers(files) if path not in files]
    result = lint_paths(files)
    report.add(result.diagnostics)
    if args.format == "json":
        print(render.render_json(result.diagnostics, result.files))
    elif args.format == "sarif":
        print(render.render_sarif(result.diagnostics, root=os.getcwd()))
    elif args.format == "github":
        text = render.render_github(result.diagnostics)
        if text:
            print(text)
    else:
        if result.diagnostics:
            print(render.render_text(result.diagnostics, result.sources, limit=args.max_diagnostics))
        print(report.summary(len(result.files)), file=sys.stderr)
    return report.return_code
