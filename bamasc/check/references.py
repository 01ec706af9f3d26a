"""Checks that systems name declared models and topologies, and that every slot's role exists."""

from __future__ import annotations

from bamasc.check.attributes import did_you_mean
from bamasc.program import Program
from bamasc.diagnostics import Diagnostic, Note, error, warning


def check_references(program: Program) -> list[Diagnostic]:
    diagnostics = []
    # Like a topology's roles, a model's per-role quality names roles that the
    # file using the model supplies, so they are resolved for the systems only.
    pooled = {name for system in program.systems.values() for name in system.models}
    for model in (program.models[name] for name in sorted(pooled) if name in program.models):
        for role in model.quality:
            if role not in program.roles:
                diagnostics.append(
                    error(
                        "BAM103",
                        f"model '{model.name}' gives a quality for role '{role}', which is not declared",
                        model.spans.get("quality", model.span),
                        hint=did_you_mean(role, program.roles),
                    )
                )
    for model in program.models.values():
        seen: set[str] = set()
        for name, span in zip(model.fallbacks, model.fallback_spans):
            if name not in program.models:
                diagnostics.append(
                    error("BAM102", f"unknown model '{name}' in the fallback of model '{model.name}'", span,
                          hint=did_you_mean(name, program.models))
                )
            elif name == model.name:
                diagnostics.append(
                    error("BAM226", f"model '{model.name}' names itself as its fallback", span,
                          hint="a fallback is another model, tried when this one's provider keeps failing")
                )
            elif name in seen:
                diagnostics.append(
                    warning("BAM227", f"model '{model.name}' names fallback '{name}' twice", span,
                            hint="the second is never tried: remove it")
                )
            seen.add(name)
    for system in program.systems.values():
        for name, span in zip(system.models, system.item_spans.get("models", ())):
            if name not in program.models:
                diagnostics.append(
                    error("BAM102", f"unknown model '{name}'", span, hint=did_you_mean(name, program.models))
                )
        for name, span in zip(system.topologies, system.item_spans.get("topologies", ())):
            topology = program.topologies.get(name)
            if topology is None:
                hint = did_you_mean(name, program.topologies)
                if name in ("linear", "star", "feedback", "planner"):
                    hint = f'import it: `import "std/{name}"`'
                diagnostics.append(error("BAM104", f"unknown topology '{name}'", span, hint=hint))
                continue
            for slot in topology.slots:
                if slot.role not in program.roles:
                    diagnostics.append(
                        error(
                            "BAM103",
                            f"topology '{name}' needs role '{slot.role}' (slot '{slot.name}'), which is not declared",
                            span,
                            Note(f"slot '{slot.name}' is declared here", slot.role_span),
                            hint=did_you_mean(slot.role, program.roles) or f"declare `role {slot.role} {{ ... }}`",
                        )
                    )
        diagnostics.extend(_tiers_in_requires(program, system))
    return diagnostics


def _tiers_in_requires(program: Program, system) -> list[Diagnostic]:
    from bamasc.check.linear import NotLinear, linear_row

    tiers = {program.models[m].tier for m in system.models if m in program.models}
    found = []
    # Reported where the system names the template: the pool is what lacks the tier,
    # and the template may be a stdlib file the user does not edit.
    for name, span in zip(system.topologies, system.item_spans.get("topologies", ())):
        topology = program.topologies.get(name)
        reported = set()
        for require in topology.requires if topology else ():
            try:
                row = linear_row(require)
            except NotLinear:
                continue
            for _, tier, _ in row.terms:
                if tier is not None and tiers and tier not in tiers and tier not in reported:
                    reported.add(tier)
                    found.append(
                        warning(
                            "BAM406",
                            f"system '{system.name}' has no tier-{tier} model, so a require row of '{name}' counts no seats",
                            span,
                            Note("the row is here", require.span),
                            Note(f"tiers in the pool: {', '.join(map(str, sorted(tiers)))}"),
                        )
                    )
    return found
