"""`bamasc.load` and `Program`: a checked .bam file, compiled into plans as `bamasc compile` does."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from bamasc.api.checks import checked_budget
from bamasc.api.errors import BamError, Diagnostic, UsageError, diagnostics_error, public_diagnostics

if TYPE_CHECKING:
    from bamasc.api.plan import Plan

METHODS = ("lexicographic", "weights", "greedy", "paper")


def load(path: str | os.PathLike[str]) -> Program:
    """Parse and check a .bam file and its imports, as `bamasc lint` does.

    Raises BamError holding the diagnostics when it has errors, except the
    declared budget's BAM404, which `compile()` at that budget raises (a file
    whose declared budget fits nothing still compiles at a budget that does).
    """
    from bamasc.plan.compile import check_file

    if not isinstance(path, (str, os.PathLike)):
        raise UsageError(f"load takes the path of a .bam file, not {type(path).__name__}")
    text_path = os.fspath(path)
    if not isinstance(text_path, str):
        raise UsageError(f"load takes the path of a .bam file as text, not {type(text_path).__name__}")
    if not os.path.isfile(text_path):
        raise UsageError(f"no such file: {text_path}")
    program, found, sources = check_file(text_path, budgets=False)
    if program is None:
        raise diagnostics_error(found, sources)
    return Program(text_path, program, found, sources)


class Program:
    """A checked .bam file. `diagnostics` holds its warnings (and a declared budget's BAM404)."""

    def __init__(self, path: str, checked: Any, found: list[Any], sources: Any) -> None:
        self.path = path
        self._checked = checked
        self._found = found  # the checks' diagnostics, the declared budgets' left out
        self._sources = sources
        self._declared: list[Any] | None = None  # the declared budgets' diagnostics, found when first needed

    def __repr__(self) -> str:
        return f"bamasc.Program({self.path!r}, systems={list(self.systems)!r})"

    @property
    def diagnostics(self) -> tuple[Diagnostic, ...]:
        return public_diagnostics(self._found + self._declared_budgets())

    @property
    def systems(self) -> tuple[str, ...]:
        """The names of the systems the file declares, in order."""
        return tuple(self._checked.systems)

    def compile(self, system: str | None = None, budget: float | None = None, method: str = "lexicographic",
                *, folder: str | os.PathLike[str] | None = None) -> Plan:
        """Bind every template under the budget and build the plan, as `bamasc compile` does.

        `system`: the system to compile (default: every system; the plan then
        runs the first, as `bamasc exec` does). `budget`: µ$ per task instead of
        the declared one. `folder`: where the plan file will be saved (the
        source paths it holds are relative to it; default: the source's
        folder). Raises BamError with the diagnostics (BAM502 when no
        template fits), UsageError for an unknown system or method, BudgetError
        for a budget that is not above 0 and at most 1e12 µ$.
        """
        from bamasc.api.plan import Plan
        from bamasc.diagnostics import has_errors, render_text
        from bamasc.plan.compile import CompileError, bind_checked

        if method not in METHODS:
            raise UsageError(f"method must be one of {', '.join(METHODS)}, not {method!r}")
        if budget is not None:
            budget = checked_budget(budget, "budget")
        found = self._found
        if budget is None:  # the declared budget is in force: its static check is part of the compile
            found = found + self._declared_budgets()
            if has_errors(found):
                raise diagnostics_error(found, self._sources)
        plan_dir = os.path.abspath(os.fspath(folder) if folder is not None else os.path.dirname(os.path.abspath(self.path)))
        try:
            compiled = bind_checked(self._checked, found, self._sources, system, budget, method, plan_dir)
        except CompileError as problem:
            raise UsageError(str(problem)) from None
        if compiled.plan is None:
            raise diagnostics_error(compiled.diagnostics, compiled.sources)
        text = render_text(compiled.diagnostics, compiled.sources) if compiled.diagnostics else ""
        return Plan(compiled.plan, compiled.program, system, public_diagnostics(compiled.diagnostics), plan_dir, text)

    def _declared_budgets(self) -> list[Any]:
        if self._declared is None:
            from bamasc.plan.compile import declared_budgets

            self._declared = declared_budgets(self._checked)
        return self._declared


__all__ = ["BamError", "Program", "load"]
