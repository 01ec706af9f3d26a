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


class RunProgress:
    """The progress of a long run (exec --dataset, collect, bench, reproduce), called with (done, total,
    spent, limit): tasks ended and to run, the µ$ spent and the most the run may spend (None: `limit`).

    On a terminal, a bar drawn by tqdm on standard error: the count, the time elapsed and left, and the money
    spent against that limit with the pace it is on. Elsewhere, what these commands always printed: with
    `lines`, the plain count on a line per tenth (ProgressBar), otherwise nothing. tqdm is imported only
    when a bar is drawn. `say` prints a line above the bar; `close` ends the bar."""

    def __init__(self, unit: str = "task", limit: float | None = None, lines: bool = True) -> None:
        self.interactive = sys.stderr.isatty()
        self.plain = ProgressBar() if lines and not self.interactive else None
        self.unit, self.limit = unit, limit
        self.bar = None

    def start(self, total: int, limit: float | None = None) -> None:
        """Draw the bar before the first task ends, when the caller knows the total."""
        if limit is not None:
            self.limit = limit
        if self.interactive and self.bar is None:
            self.bar = self._open(total)
            self.bar.set_postfix_str(spend_text(0.0, 0, total, self.limit))

    def __call__(self, done: int, total: int, spent: float = 0.0, limit: float | None = None) -> None:
        if not self.interactive:
            if self.plain is not None:
                self.plain(done, total)
            return
        if self.bar is None:
            self.bar = self._open(total)
        if self.bar.total != total:
            self.bar.total = total
        self.bar.set_postfix_str(spend_text(spent, done, total, limit if limit is not None else self.limit),
                                 refresh=False)
        self.bar.update(done - self.bar.n)

    def _open(self, total: int):
        from tqdm import tqdm

        # The rate is left out for the money: on 80 columns the bar, the count, the time left and the spend fit.
        return tqdm(total=total, unit=self.unit, file=sys.stderr, dynamic_ncols=True, smoothing=0.1,
                    bar_format="{l_bar}{bar}| {n_fmt}/{total_fmt} [{elapsed}<{remaining}{postfix}]")

    def say(self, message: str) -> None:
        if self.bar is not None:
            self.bar.write(message, file=sys.stderr)
        else:
            print(message, file=sys.stderr)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None
        if self.plain is not None:
            self.plain.close()


def spend_text(spent: float, done: int, total: int, limit: float | None) -> str:
    """`spent 545.6 of 2,000.0 µ$, on pace for 1,636.8`: the pace is the spend per task so far, times the total."""
    text = f"spent {spent:,.1f}" + (f" of {limit:,.1f} µ$" if limit is not None else " µ$")
    if 0 < done < total:
        text += f", on pace for {spent / done * total:,.1f}"
    return text
