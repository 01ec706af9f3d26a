"""Builds a Plan from the bindings of every template of every system."""

from __future__ import annotations

import hashlib
import os

from bamasc.version import __version__
from bamasc.ir.tokens import seat_models
from bamasc.program import Program
from bamasc.optimize.bind import TemplateBinding, select_template
from bamasc.plan.schema import (
    SCHEMA_VERSION,
    LengthClassPlan,
    Plan,
    PlanNode,
    PlanSeat,
    SystemPlan,
    TemplatePlan,
)
from bamasc.plan.routes import plan_decisions
from bamasc.syntax.resources import STDLIB_PATH

# The binding row of a template bound within the budget whose worst-case latency misses the deadline.
DEADLINE_ROW = "deadline"


def source_label(path: str, plan_dir: str) -> str:
    """How a plan names a source: `std/NAME.bam` for the stdlib, else relative to the plan."""
    real = os.path.realpath(path)
    stdlib = os.path.realpath(STDLIB_PATH)
    if os.path.dirname(real) == stdlib:
        return "std/" + os.path.basename(real)
    return os.path.relpath(real, os.path.realpath(plan_dir)).replace(os.sep, "/")


def build_plan(
    program: Program, bindings: dict[str, list[TemplateBinding]], plan_dir: str, method: str = "lexicographic",
    length_bindings: dict[str, list[tuple[int, list[TemplateBinding]]]] | None = None,
) -> Plan:
    """`plan_dir` is where the plan will be written: source paths are recorded relative to it.
    `method` is the one the seats were bound with; loading the plan binds them again with it.
    `length_bindings`: per system, each length class after its first and its bindings."""
    sources = tuple(
        {"path": source_label(path, plan_dir), "sha256": hashlib.sha256(text.encode("utf-8")).hexdigest()}
        for path, text in program.source_texts.items()
    )
    used = sorted({name for system in bindings for name in program.systems[system].models})
    prices = {
        name: {
            "provider": program.models[name].provider,
            "name": program.models[name].model_id,
            "input": program.models[name].price_input,
            "output": program.models[name].price_output,
            "tier": program.models[name].tier,
            "max_output": program.models[name].max_output,
            "latency": _latency(program.models[name]),
            **program.models[name].prices().record(),
        }
        for name in used
    }
    longer = length_bindings or {}
    systems = tuple(_system_plan(program, name, found, longer.get(name, ())) for name, found in bindings.items())
    root = source_label(program.root_files[0], plan_dir)
    settings = compiled_with(program, bindings, method)
    return Plan(SCHEMA_VERSION, __version__, sources_sha256(sources), root, settings, sources, prices, systems)


def _latency(model) -> dict | None:
    if model.latency is None:
        return None
    return {"first_token_s": model.latency.first_token_s, "per_output_token_s": model.latency.per_output_token_s}


def sources_sha256(sources: tuple[dict, ...]) -> str:
    """One hash over every source file, in the order of their labels: unlike the order of the
    paths the loader saw, the labels do not depend on where the compiler was run from."""
    digest = hashlib.sha256()
    for source in sorted(sources, key=lambda s: s["path"]):
        digest.update(source["sha256"].encode())
    return digest.hexdigest()


def compiled_with(program: Program, bindings: dict[str, list[TemplateBinding]], method: str) -> dict:
    """The `bamasc compile` options that bind these systems again: `--system` when only one
    of several was compiled, `--budget` when a budget differs from the declared one."""
    names = list(bindings)
    system = names[0] if len(names) == 1 and len(program.systems) > 1 else None
    budget = None
    for name, found in bindings.items():
        # One --budget applies to every compiled system, so any system that differs tells it.
        if found and found[0].budget != program.systems[name].budget:
            budget = found[0].budget
    return {"system": system, "budget": budget, "method": method}


def _system_plan(program: Program, name: str, found: list[TemplateBinding], longer=()) -> SystemPlan:
    system = program.systems[name]
    rule = system.select.kind
    selected = select_template(found, "strongest" if rule == "policy" else rule)
    return SystemPlan(
        name=name,
        budget=found[0].budget if found else system.budget,
        task_tokens=system.task_tokens,
        min_agents=system.min_agents,
        answer=system.answer,
        on_exhausted=system.on_exhausted,
        deadline_s=system.deadline,
        selection={
            "rule": rule,
            # A policy picks per task at run time; until then the strongest feasible template is the default.
            "selected": selected.template if selected else None,
            "policy": system.select.path,
            "policy_sha256": _checkpoint_sha256(system),
        },
        templates=tuple(template_plan(b, program) for b in found),
        length_classes=tuple(
            LengthClassPlan(tokens, tuple(template_plan(b, program) for b in bound)) for tokens, bound in longer
        ) or None,
    )


def _tool_fields(loop, bound) -> dict:
    """What a plan node records of a tool-using call's loop (nothing for a call without tools)."""
    if loop is None:
        return {}
    return {"rounds": loop.rounds, "tool_calls": loop.calls, "tools": loop.tools,
            "round_input_tokens": bound.round_inputs, "tool_cost": bound.tool_cost}


def _checkpoint_sha256(system) -> str | None:
    """The policy checkpoint's hash, so a plan is known stale when the policy is retrained."""
    path = system.checkpoint_path()
    if path is None or not os.path.isfile(path):
        return None
    with open(path, "rb") as handle:
        return hashlib.sha256(handle.read()).hexdigest()


def template_plan(binding: TemplateBinding, program: Program) -> TemplatePlan:
    nodes = ()
    answer_nodes = ()
    latency = None
    decisions = ()
    if binding.feasible:
        from bamasc.ir.bounds import cost_amounts
        from bamasc.ir.graph import LATENCY_FIELD, call_graph, critical_path, reads
        from bamasc.ir.latency import call_latency_s

        graph = call_graph(binding.unrolled.calls, binding.bounds, binding.unrolled.answer.nodes)
        bounds = {bound.node: bound for bound in binding.bounds}
        model_of = seat_models(program.models, binding.seats)
        for node, data in graph.nodes.items():
            data[LATENCY_FIELD] = call_latency_s(program.roles[data["role"]], model_of[(data["slot"], data["instance"])])
            data.update(_tool_fields(program.roles[data["role"]].loop, bounds[node]))
        nodes = tuple(PlanNode(id=node, inputs=reads(graph, node), **data) for node, data in graph.nodes(data=True))
        answer_nodes = graph.graph["answer"]
        latency = critical_path(graph).seconds
        amounts = cost_amounts(binding.unrolled.calls, binding.bounds)
        decisions = plan_decisions(nodes, binding.unrolled.choices, amounts)
    elif binding.binding_rows == (DEADLINE_ROW,) and binding.unrolled is not None:
        # Bound, but too slow for the deadline (compile's check on its graph): its bound says by how much.
        # A template the binder found no binding for within the deadline has no binding to measure.
        from bamasc.ir.latency import worst_case_latency

        model_of = seat_models(program.models, binding.seats)
        latency = worst_case_latency(binding.unrolled.calls, model_of, program.roles).seconds
    return TemplatePlan(
        name=binding.template,
        feasible=binding.feasible,
        worst_case_cost=binding.worst_case_cost if binding.feasible else None,
        worst_case_latency_s=latency,
        objective={
            "tiers": list(binding.tiers),
            "tier_seats": list(binding.tier_seats),
            "quality": binding.quality,
            # Only by value (the sum of weight x quality is then `quality`), so plans by tiers keep their fields.
            **({"kind": "value"} if binding.objective_kind == "value" else {}),
        },
        counts=dict(binding.counts),
        binding=tuple(PlanSeat(s.slot, s.instance, s.model, s.cap) for s in binding.seats),
        nodes=nodes,
        answer_nodes=answer_nodes,
        cheapest_cost=binding.cheapest_cost,
        binding_rows=binding.binding_rows,
        decisions=decisions,
    )
