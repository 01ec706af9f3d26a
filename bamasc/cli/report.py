"""What a command found, counted, and the exit code that follows from it (docs/cli.md)."""

from __future__ import annotations

EXIT_OK = 0
EXIT_ERRORS = 1  # errors in the input or the run: diagnostics, a refused plan, a failed task
EXIT_USAGE = 2  # the command line itself: a missing file, an unknown flag, system or template
EXIT_SKIPPED = 3  # no error, but tasks were left undone (skipped for a budget): a later --resume runs them


class Report:
    """Counts a command's outcomes; `return_code` is its exit code. It prints nothing."""

    def __init__(self, strict: bool = False) -> None:
        self.strict = strict  # warnings fail the run too (`lint --strict`)
        self.errors = 0
        self.warnings = 0
        self.usage_errors = 0
        self.skipped = 0  # tasks a run left undone without an error

    def add(self, diagnostics) -> None:
        for diagnostic in diagnostics:
            if diagnostic.severity == "error":
                self.errors += 1
            else:
                self.warnings += 1
                self.errors += self.strict

    def failed(self) -> None:
        """One error that is no diagnostic: a refused plan, a provider error, a task that overran."""
        self.errors += 1

    def left_undone(self, tasks: int) -> None:
        """Tasks that did not run (no room in a budget), with nothing wrong: the run is not done."""
        self.skipped += tasks

    def misused(self) -> None:
        """One problem with the command line."""
        self.usage_errors += 1

    @property
    def return_code(self) -> int:
        if self.usage_errors:
            return EXIT_USAGE
        if self.errors:
            return EXIT_ERRORS
        return EXIT_SKIPPED if self.skipped else EXIT_OK

    def summary(self, files: int) -> str:
        def plural(n: int, word: str) -> str:
            return f"{n} {word}{'' if n == 1 else 's'}"

        return f"{plural(files, 'file')} checked: {plural(self.errors, 'error')}, {plural(self.warnings, 'warning')}"
