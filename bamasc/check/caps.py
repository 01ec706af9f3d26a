"""Every call needs a finite output cap, or its cost has no bound."""

from __future__ import annotations

from bamasc.diagnostics import Diagnostic, error
from bamasc.program import Program


def check_caps(program: Program) -> list[Diagnostic]:
    """Every call needs a finite output cap: from its role, or from every model that may run it."""
    diagnostics = []
    for system in program.systems.values():
        uncapped = [program.models[m] for m in system.models if program.models[m].max_output is None]
        if not uncapped:
            continue
        for name in system.topologies:
            for slot in program.topologies[name].slots:
                role = program.roles[slot.role]
                if role.max_output is None:
                    diagnostics.append(
                        error(
                            "BAM107",
                            f"role '{role.name}' has no max_output, and model '{uncapped[0].name}' of system "
                            f"'{system.name}' sets none either, so its calls have no output cap",
                            role.span,
                            hint="add `max_output = 384` to the role",
                        )
                    )
    return _unique(diagnostics)



def _unique(diagnostics: list[Diagnostic]) -> list[Diagnostic]:
    seen = set()
    result = []
    for d in diagnostics:
        key = (d.code, d.span, d.message)
        if key not in seen:
            seen.add(key)
            result.append(d)
    return result
