"""What commands print besides their results: errors, warnings, diagnostics and a progress bar, on standard error."""

from __future__ import annotations

import sys

from bamasc.cli.report import Report


def error(message) -> None:
    print(f"bamasc: error: {message}", file=sys.stderr)


def warning(message) -> None:
    print(f"bamasc: warning: {message}", file=sys.stderr)


def failure(report: Report, message) -> None:
    """An error in the input or the run (exit 1), printed and counted."""
    error(message)
    report.failed()


def usage(report: Report, message) -> None:
    """A problem with the command line (exit 2), printed and counted."""
    error(message)
    report.misused()


def diagnostics(found, sources) -> None:
    from bamasc.diagnostics import render_text

    if found:
        print(render_text(found, sources), file=sys.stderr)


def progress_bar():
    """A one-line progress bar on standard error (only where it is a terminal)."""
    interactive = sys.stderr.isatty()

    def show(done: int, total: int) -> None:
        if not interactive and done != total and done % max(1, total // 10):
            return
        width = 30
        filled = int(width * done / max(1, total))
        end = "" if interactive else "\n"
        print(f"\r[{'#' * filled}{'.' * (width - filled)}] {done}/{total}", end=end, file=sys.stderr, flush=True)

    return show


def end_progress_line() -> None:
    if sys.stderr.isatty():  # the bar redraws one line; end it before other output
        print(file=sys.stderr)
