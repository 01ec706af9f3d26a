"""`bamasc.load` and `Program`: a checked .bam file, compiled into plans as `bamasc compile` does."""

from __future__ import annotations

import math
import os
from typing import TYPE_CHECKING, Any

from bamasc.api.errors import BamError, BudgetError, Diagnostic, UsageError, diagnostics_error, public_diagnostics

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


def checked_budget(value: object, field: str, above: float | None = None) -> float:
    """`value` as µ$ when it is a number above 0, at most 1e12 µ$ and (given `above`) at most that; else BudgetError."""
    from bamasc.limits import MAX_BUDGET, written

    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise BudgetError(f"{field} must be a number of µ$, not {type(value).__name__}")
    try:
        amount = float(value)
    except OverflowError:
        amount = math.inf
    if not amount > 0:  # NaN too
        raise BudgetError(f"{field} must be above zero, not {value!r}")
    if not amount <= MAX_BUDGET:
        raise BudgetError(f"{field} must be at most {written(MAX_BUDGET)} µ$ (${MAX_BUDGET / 1e6:,.0f}), not {value!r}")
    if above is not None and amount > above * (1 + 1e-12):
        raise BudgetError(
            f"{field} of {amount:g} µ$ is above the plan's budget of {above:g} µ$: a run may tighten the budget "
            "it was compiled for, never loosen it (compile at the larger budget instead)"
        )
    return amount


def checked_deadline(value: object, field: str, compiled: float | None) -> float:
    """`value` in seconds when it is above 0, finite and no later than the plan's deadline; else BudgetError."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise BudgetError(f"{field} must be a number of seconds, not {type(value).__name__}")
    seconds = float(value)
    if not (seconds > 0 and math.isfinite(seconds)):
        raise BudgetError(f"{field} must be seconds above zero, not {value!r}")
    if compiled is not None and seconds > compiled * (1 + 1e-12):
        raise BudgetError(
            f"{field} of {seconds:g} s is later than the plan's deadline of {compiled:g} s: a run may tighten the "
            "deadline it was compiled for, never loosen it"
        )
    return seconds


__all__ = ["BamError", "Program", "load"]
