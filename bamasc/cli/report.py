"""What a command found, counted, and the exit code that follows from it (docs/cli.md)."""

from __future__ import annotations

EXIT_OK = 0
EXIT_ERRORS = 1  # errors in the input or the run: diagnostics, a refused plan, a failed task
EXIT_USAGE = 2  # the command line itself: a missing file, an unknown flag, system or template


class Report:
    """Counts a command's outcomes; `return_code` is its exit code. It prints nothing."""

    def __init__(self, strict: bool = False) -> None:
        self.strict = strict  # warnings fail the run too (`lint --strict`)
        self.errors = 0
        self.warnings = 0
        self.usage_errors = 0

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

    def misused(self) -> None:
        """One problem with the command line."""
        self.usage_errors += 1

    @property
    def return_code(self) -> int:
        if self.usage_errors:
            return EXIT_USAGE
        return EXIT_ERRORS if self.errors else EXIT_OK

    def summary(self, files: int) -> str:
        def plural(n: int, word: str) -> str:
            return f"{n} {word}{'' if n == 1 else 's'}"

        return f"{plural(files, 'file')} checked: {plural(self.errors, 'error')}, {plural(self.warnings, 'warning')}"
