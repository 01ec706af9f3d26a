"""Loads a plan, refuses it if its sources or prices changed, and re-verifies every bound."""

from __future__ import annotations

import hashlib
import json
import os

from bamasc.plan.schema import Plan, PlanFormatError, from_data
from bamasc.syntax.resources import STDLIB_PATH


class StalePlanError(Exception):
    """The sources the plan was compiled from have changed since."""


class PlanVerificationError(Exception):
    """A recorded bound does not hold on the plan's own call graph."""


def source_path(label: str, plan_dir: str) -> str:
    if label.startswith("std/"):
        return os.path.join(STDLIB_PATH, label[4:])
    return os.path.normpath(os.path.join(plan_dir, label))


def load_plan(path: str) -> tuple[Plan, object]:
    """The plan and the program it was compiled from, both checked.

    Raises PlanFormatError (not a plan), StalePlanError (sources or prices
    changed: recompile) or PlanVerificationError (a bound does not hold).
    """
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except json.JSONDecodeError as problem:
        raise PlanFormatError(f"{path} is not JSON: {problem.msg} at line {problem.lineno} column {problem.colno}") from None
    if not isinstance(data, dict):
        raise PlanFormatError(f"{path} is not a bamasc plan (expected a JSON object)")
    plan = from_data(data)
    plan_dir = os.path.dirname(os.path.abspath(path))
    changed = _changed_sources(plan, plan_dir)
    program = _program(plan, plan_dir)
    if changed:
        details = _price_changes(plan, program) if program is not None else []
        what = "; ".join(details) if details else "its source changed"
        raise StalePlanError(
            f"{path} is stale: {', '.join(changed)} changed since it was compiled ({what}). "
            f"Recompile it: bamasc compile {source_path(plan.root, plan_dir)} -o {path}"
        )
    if program is None:
        raise StalePlanError(f"{path}: its source {plan.root} no longer compiles; fix it and recompile")
    _check_policies(plan, program, path)
    verify_plan(plan, program)
    return plan, program


def _check_policies(plan: Plan, program, path: str) -> None:
    """A plan compiled with a policy checkpoint is stale once that checkpoint changes."""
    from bamasc.plan.build import _checkpoint_sha256

    for system in plan.systems:
        recorded = system.selection.get("policy_sha256")
        if recorded and system.name in program.systems:
            if _checkpoint_sha256(program.systems[system.name]) != recorded:
                raise StalePlanError(
                    f"{path} is stale: the policy checkpoint of system '{system.name}' "
                    f"({system.selection.get('policy')}) changed since it was compiled. Recompile it."
                )


def _changed_sources(plan: Plan, plan_dir: str) -> list[str]:
    changed = []
    for source in plan.sources:
        try:
            with open(source_path(source["path"], plan_dir), "rb") as handle:
                digest = hashlib.sha256(handle.read()).hexdigest()
        except OSError:
            changed.append(f"{source['path']} (missing)")
            continue
        if digest != source["sha256"]:
            changed.append(source["path"])
    return changed


def _program(plan: Plan, plan_dir: str):
    from bamasc.check import check
    from bamasc.diagnostics import has_errors
    from bamasc.loader import load

    loaded = load(source_path(plan.root, plan_dir))
    if has_errors(loaded.diagnostics) or not loaded.modules:
        return None
    program, diagnostics = check(loaded)
    return None if has_errors(diagnostics) else program


def _price_changes(plan: Plan, program) -> list[str]:
    changes = []
    for name, recorded in plan.prices.items():
        model = program.models.get(name)
        if model is None:
            changes.append(f"model '{name}' was removed")
            continue
        for key, now in (("input", model.price_input), ("output", model.price_output), ("tier", model.tier)):
            if recorded[key] != now:
                label = "tier" if key == "tier" else f"{key} price"
                changes.append(f"{label} of model '{name}' went from {recorded[key]} to {now}")
    return changes


def verify_plan(plan: Plan, program) -> None:
    """Every feasible template's bound, recomputed on its call graph, matches and fits the budget."""
    import networkx as nx

    from bamasc.ir.graph import verified_cost
    from bamasc.ir.unroll import unroll

    for system in plan.systems:
        for template in system.templates:
            if not template.feasible:
                continue
            expected = unroll(program.topologies[template.name], template.counts).calls
            if [(c.id, c.inputs) for c in expected] != [(n.id, n.inputs) for n in template.nodes]:
                raise PlanVerificationError(
                    f"system '{system.name}', template '{template.name}': the recorded calls differ from the flow's"
                )
            graph = nx.DiGraph()
            for node in template.nodes:
                graph.add_node(node.id, **{k: getattr(node, k) for k in node.__record_fields__ if k != "id"})
                for source in node.inputs:
                    graph.add_edge(source, node.id)
            try:
                total = verified_cost(graph, program.roles, program.models, system.task_tokens)
            except ValueError as problem:
                raise PlanVerificationError(f"system '{system.name}', template '{template.name}': {problem}") from None
            if abs(total - template.worst_case_cost) > 1e-6 * max(1.0, total):
                raise PlanVerificationError(
                    f"system '{system.name}', template '{template.name}': recorded worst case "
                    f"{template.worst_case_cost:.4f} µ$, the graph gives {total:.4f} µ$"
                )
            if total > system.budget * (1 + 1e-9):
                raise PlanVerificationError(
                    f"system '{system.name}', template '{template.name}': worst case {total:.4f} µ$ "
                    f"exceeds the budget of {system.budget:g} µ$"
                )
