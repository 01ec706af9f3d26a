"""The API's exceptions and its diagnostics: the codes and messages the command line prints, raised instead of printed."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

# The command line's exit codes (bamasc/cli/report.py), which no library module imports.
EXIT_ERRORS = 1
EXIT_USAGE = 2


@dataclass(frozen=True)
class Note:
    """Extra context of a diagnostic, optionally at another place."""

    message: str
    file: str | None = None
    line: int | None = None
    column: int | None = None


@dataclass(frozen=True)
class Diagnostic:
    """One problem found in a source file, as `bamasc lint --format json` gives it."""

    code: str  # BAM123
    name: str  # its short name, e.g. budget-unreachable
    severity: str  # error | warning
    message: str
    file: str | None
    line: int | None
    column: int | None
    end_line: int | None
    end_column: int | None
    notes: tuple[Note, ...] = ()
    hint: str | None = None

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}:{self.column}: " if self.file else ""
        return f"{where}{self.severity}[{self.code}]: {self.message}"


class BamError(Exception):
    """Any error bamasc reports: its message is what the command line prints after `bamasc: error:`,
    or the diagnostics it prints, rendered the same way.

    `diagnostics` holds the diagnostics behind it (none for an error that is not
    about a source file); `code` is the first error's code; `exit_code` is the
    exit code the command line gives for it (1: the input, 2: the request).
    """

    exit_code = EXIT_ERRORS

    def __init__(self, message: str, diagnostics: Iterable[Diagnostic] = ()) -> None:
        super().__init__(message)
        self.message = message
        self.diagnostics: tuple[Diagnostic, ...] = tuple(diagnostics)

    @property
    def code(self) -> str | None:
        return next((d.code for d in self.diagnostics if d.severity == "error"), None)


class UsageError(BamError):
    """A request the command line would refuse as a usage error: an unknown system or template, a missing file."""

    exit_code = EXIT_USAGE


class BudgetError(UsageError, ValueError):
    """A budget or deadline that is not a positive finite number, or is looser than the plan's."""


class PlanError(BamError):
    """A plan file refused at loading: not a plan, stale, or not what its sources compile to (docs/plan.md)."""


class TraceError(BamError):
    """A trace that cannot be used as the ledger: held by another run, or holding a line bamasc did not write."""


class ProviderError(BamError):
    """A provider that cannot be made: a missing API key, a cassette that cannot be read."""


def public_diagnostics(found: Iterable[Any]) -> tuple[Diagnostic, ...]:
    """The compiler's diagnostics as public records."""
    from bamasc.diagnostics import to_dict

    made = []
    for diagnostic in found:
        data = to_dict(diagnostic)
        notes = tuple(
            Note(note["message"], note.get("file"), note.get("line"), note.get("column")) for note in data.pop("notes")
        )
        made.append(Diagnostic(notes=notes, **data))
    return tuple(made)


def diagnostics_error(found: list[Any], sources: Any) -> BamError:
    """A BamError for diagnostics with errors: its message is their text as `bamasc` prints it."""
    from bamasc.diagnostics import render_text

    return BamError(render_text(found, sources), public_diagnostics(found))
