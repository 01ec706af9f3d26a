"""`bamasc.load` and `Program`: a checked .bam file, compiled into plans as `bamasc compile` does."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from bamasc.api.checks import checked_budget
from bamasc.api.errors import BamError, Diagnostic, UsageError, diagnostics_error, public_diagnostics

if TYPE_CHECKING:
    from bamasc.api.plan import Plan

# The static budget check of the declared budgets: compiling at another budget does not raise it.
DECLARED_BUDGET_CODES = frozenset({"BAM404"})
METHODS = ("lexicographic", "weights", "greedy", "paper")


def load(path: str | os.PathLike[str]) -> Program:
    """Parse and check a .bam file and its imports, as `bamasc lint` does.

    Raises BamError holding the diagnostics when it has errors, except the
    declared budget's BAM404, which `compile()` at that budget raises (a file
    whose declared budget fits nothing still compiles at a budget that does).
    """
    from bamasc.plan.compile import check_file

    text_path = os.fspath(path)
    if not os.path.isfile(text_path):
        raise UsageError(f"no such file: {text_path}")
    program, found, sources = check_file(text_path, budgets=True)
    if program is None and any(d.severity == "error" and d.code not in DECLARED_BUDGET_CODES for d in found):
        raise diagnostics_error(found, sources)
    if program is None:
        program, _, _ = check_file(text_path, budgets=False)
    return Program(text_path, program, public_diagnostics(found))


class Program:
    """A checked .bam file. `diagnostics` holds its warnings (and a declared budget's BAM404)."""

    def __init__(self, path: str, checked: Any, diagnostics: tuple[Diagnostic, ...]) -> None:
        self.path = path
        self.diagnostics = diagnostics
        self._checked = checked

    def __repr__(self) -> str:
        return f"bamasc.Program({self.path!r}, systems={list(self.systems)!r})"

    @property
    def systems(self) -> tuple[str, ...]:
        """The names of the systems the file declares, in order."""
        return tuple(self._checked.systems)

    def compile(self, system: str | None = None, budget: float | None = None, method: str = "lexicographic") -> Plan:
        """Bind every template under the budget and build the plan, as `bamasc compile` does.

        `system`: the system to compile (default: every system; the plan then
        runs the first, as `bamasc exec` does). `budget`: µ$ per task instead of
        the declared one. Raises BamError with the diagnostics (BAM502 when no
        template fits), UsageError for an unknown system or method, BudgetError
        for a budget that is not above 0 and at most 1e12 µ$.
        """
        from bamasc.api.plan import Plan
        from bamasc.plan.compile import CompileError, compile_file

        if method not in METHODS:
            raise UsageError(f"method must be one of {', '.join(METHODS)}, not {method!r}")
        if budget is not None:
            budget = checked_budget(budget, "budget")
        plan_dir = os.path.dirname(os.path.abspath(self.path))
        try:
            compiled = compile_file(self.path, system, budget, method, plan_dir)
        except CompileError as problem:
            raise UsageError(str(problem)) from None
        if compiled.plan is None:
            raise diagnostics_error(compiled.diagnostics, compiled.sources)
        return Plan(compiled.plan, compiled.program, system, public_diagnostics(compiled.diagnostics), plan_dir)


__all__ = ["BamError", "Program", "load"]
