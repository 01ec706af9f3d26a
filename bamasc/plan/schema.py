"""Plan records and their JSON form (documented in docs/plan.md)."""

from __future__ import annotations

import json

from bamasc.records import record

SCHEMA_VERSION = 1


@record
class PlanNode:
    """One call the template may make, with its worst case on the bound model."""

    id: str
    slot: str
    instance: int
    role: str
    model: str
    inputs: tuple[str, ...]
    reads_task: bool
    condition: str | None
    combinator: str
    input_tokens: int
    output_tokens: int
    input_cost: float
    output_cost: float
    cost: float


@record
class PlanSeat:
    slot: str
    instance: int
    model: str


@record
class TemplatePlan:
    name: str
    feasible: bool
    worst_case_cost: float | None  # µ$; None when infeasible
    objective: dict  # {"tiers": [...], "tier_seats": [...], "quality": q}
    counts: dict  # slot -> instances
    binding: tuple[PlanSeat, ...]
    nodes: tuple[PlanNode, ...]
    answer_nodes: tuple[str, ...]  # calls whose output the flow's answer is (one of)
    cheapest_cost: float | None  # when infeasible: the budget from which it becomes feasible
    binding_rows: tuple[str, ...]  # when infeasible: the rules that stop it


@record
class SystemPlan:
    name: str
    budget: float
    task_tokens: int
    min_agents: int
    answer: str
    on_exhausted: str
    selection: dict  # {"rule": ..., "selected": name or None, "policy": path or None}
    templates: tuple[TemplatePlan, ...]

    def template(self, name: str) -> TemplatePlan:
        for template in self.templates:
            if template.name == name:
                return template
        raise KeyError(name)


@record
class Plan:
    schema_version: int
    compiler_version: str
    source_sha256: str
    root: str  # the compiled file, named as in `sources`
    sources: tuple[dict, ...]  # {"path": ..., "sha256": ...}; std/ files as "std/NAME.bam"
    prices: dict  # model -> {"provider", "name", "input", "output", "tier", "max_output"}
    systems: tuple[SystemPlan, ...]

    def system(self, name: str | None = None) -> SystemPlan:
        if name is None:
            return self.systems[0]
        for system in self.systems:
            if system.name == name:
                return system
        raise KeyError(name)


def to_data(value):
    """Records, tuples and dicts as plain JSON data."""
    if hasattr(value, "__record_fields__"):
        return {name: to_data(getattr(value, name)) for name in value.__record_fields__}
    if isinstance(value, (tuple, list)):
        return [to_data(item) for item in value]
    if isinstance(value, dict):
        return {key: to_data(item) for key, item in value.items()}
    return value


def dumps(plan: Plan) -> str:
    return json.dumps(to_data(plan), indent=2) + "\n"


class PlanFormatError(ValueError):
    """The file is not a plan this version of bamasc can read."""


def from_data(data: dict) -> Plan:
    try:
        version = data["schema_version"]
        if version != SCHEMA_VERSION:
            raise PlanFormatError(
                f"plan schema version {version} is not supported (this bamasc reads version {SCHEMA_VERSION}); recompile it"
            )
        return Plan(
            schema_version=version,
            compiler_version=data["compiler_version"],
            source_sha256=data["source_sha256"],
            root=data["root"],
            sources=tuple(data["sources"]),
            prices=data["prices"],
            systems=tuple(_system(s) for s in data["systems"]),
        )
    except (KeyError, TypeError) as problem:
        raise PlanFormatError(f"not a bamasc plan: missing or malformed field {problem}") from None


def _system(data: dict) -> SystemPlan:
    return SystemPlan(
        name=data["name"],
        budget=data["budget"],
        task_tokens=data["task_tokens"],
        min_agents=data["min_agents"],
        answer=data["answer"],
        on_exhausted=data["on_exhausted"],
        selection=data["selection"],
        templates=tuple(_template(t) for t in data["templates"]),
    )


def _template(data: dict) -> TemplatePlan:
    return TemplatePlan(
        name=data["name"],
        feasible=data["feasible"],
        worst_case_cost=data["worst_case_cost"],
        objective=data["objective"],
        counts=data["counts"],
        binding=tuple(PlanSeat(**seat) for seat in data["binding"]),
        nodes=tuple(PlanNode(**{**node, "inputs": tuple(node["inputs"])}) for node in data["nodes"]),
        answer_nodes=tuple(data["answer_nodes"]),
        cheapest_cost=data["cheapest_cost"],
        binding_rows=tuple(data["binding_rows"]),
    )
