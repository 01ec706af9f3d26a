"""The `bamasc` command line: parses arguments, calls library functions, prints, sets exit codes.

Heavy libraries (solvers, ML, provider SDKs) are imported only inside the
command that needs them, so `bamasc lint` starts fast.
"""

from __future__ import annotations

import argparse
import os
import sys

from bamasc import __version__

EXIT_OK = 0
EXIT_ERRORS = 1
EXIT_USAGE = 2

FORMATS = ("text", "json", "sarif", "github")


class Report:
    """Counts what a command found and owns the exit code."""

    def __init__(self) -> None:
        self.errors = 0
        self.warnings = 0
        self.usage_problems = 0

    def add(self, diagnostics) -> None:
        for diagnostic in diagnostics:
            if diagnostic.severity == "error":
                self.errors += 1
            else:
                self.warnings += 1

    def usage(self, message: str) -> None:
        self.usage_problems += 1
        print(f"bamasc: error: {message}", file=sys.stderr)

    @property
    def exit_code(self) -> int:
        if self.usage_problems:
            return EXIT_USAGE
        return EXIT_ERRORS if self.errors else EXIT_OK

    def summary(self, files: int) -> str:
        def plural(n: int, word: str) -> str:
            return f"{n} {word}{'' if n == 1 else 's'}"

        return f"{plural(files, 'file')} checked: {plural(self.errors, 'error')}, {plural(self.warnings, 'warning')}"


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # argparse's own usage errors keep exit code 2
        self.print_usage(sys.stderr)
        print(f"bamasc: error: {message}", file=sys.stderr)
        raise SystemExit(EXIT_USAGE)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="bamasc", description="Compiler for budget-aware multi-agent LLM systems.")
    parser.add_argument("--version", action="version", version=f"bamasc {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    commands.required = True

    lint = commands.add_parser("lint", help="check .bam files without compiling them (fast; for CI and pre-commit)")
    lint.add_argument("files", nargs="+", metavar="FILE")
    lint.add_argument("--format", choices=FORMATS, default="text", help="output format (default: text)")
    lint.add_argument("--strict", action="store_true", help="treat warnings as errors (exit 1)")
    lint.add_argument(
        "--max-diagnostics", type=int, default=200, metavar="N", help="text format: show at most N (default 200)"
    )
    lint.set_defaults(run=run_lint)
    return parser


def run_lint(args) -> int:
    from bamasc import diagnostics as render
    from bamasc.lint import lint_paths

    report = Report()
    present = []
    for path in args.files:
        if os.path.isdir(path):
            report.usage(f"{path} is a directory; pass .bam files (e.g. {path.rstrip('/')}/*.bam)")
        elif not os.path.exists(path):
            report.usage(f"no such file: {path}")
        else:
            present.append(path)
    if report.usage_problems:
        return report.exit_code
    result = lint_paths(present)
    report.add(result.diagnostics)
    if args.strict and report.warnings:
        report.errors += report.warnings
    if args.format == "json":
        print(render.render_json(result.diagnostics, result.files))
    elif args.format == "sarif":
        uris = {path: os.path.relpath(path).replace(os.sep, "/") for path in result.sources.files}
        print(render.render_sarif(result.diagnostics, uris))
    elif args.format == "github":
        text = render.render_github(result.diagnostics)
        if text:
            print(text)
    else:
        if result.diagnostics:
            print(render.render_text(result.diagnostics, result.sources, limit=args.max_diagnostics))
        print(report.summary(len(present)), file=sys.stderr)
    return report.exit_code


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())
