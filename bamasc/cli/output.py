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


class ProgressBar:
    """A one-line progress bar on standard error, called with (done, total): redrawn in
    place on a terminal, a line per tenth elsewhere. `close()` ends a terminal line it drew."""

    def __init__(self) -> None:
        self.interactive = sys.stderr.isatty()
        self.open = False

    def __call__(self, done: int, total: int) -> None:
        if not self.interactive and done != total and done % max(1, total // 10):
            return
        width = 30
        filled = int(width * done / max(1, total))
        end = "" if self.interactive else "\n"
        print(f"\r[{'#' * filled}{'.' * (width - filled)}] {done}/{total}", end=end, file=sys.stderr, flush=True)
        self.open = self.interactive

    def close(self) -> None:
        if self.open:
            self.open = False
            print(file=sys.stderr)
