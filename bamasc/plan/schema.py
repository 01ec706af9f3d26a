"""Plan records and their JSON form (documented in docs/plan.md)."""

from __future__ import annotations

import hashlib
import json

from bamasc.records import record

# 2: `compiled_with` (the compile settings that reproduce the plan) and `plan_sha256`.
# 3: latency: each node's `step` and `latency_s`, each template's `worst_case_latency_s`,
# each system's `deadline_s`, and each model's `latency` among the prices.
# 4: routes: each node's `alternative` and each template's `decisions`.
SCHEMA_VERSION = 4

# How `bamasc compile --method` may have bound the seats; "paper" is `--cost-model paper`.
METHODS = ("lexicographic", "weights", "paper", "greedy")


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
    step: int  # the walker request that makes it: calls of one step run together
    input_tokens: int
    output_tokens: int
    input_cost: float
    output_cost: float
    cost: float
    latency_s: float | None  # one attempt's worst case; None when the model declares no latency
    alternative: tuple = ()  # [[decision, branch], ...] it runs under, outermost first; [] when always possible
    # A call whose role has tools (combinators/tools.py); absent from the JSON of a call without them.
    rounds: int | None = None  # R: rounds that may ask for tools, then one final round without them
    tool_calls: int | None = None  # C: tool calls one round may ask for
    tools: tuple[str, ...] | None = None  # the tools as its role names them
    round_input_tokens: tuple[int, ...] | None = None  # each round's prompt bound, rounds 0..R (input_tokens: its own)
    tool_cost: float | None = None  # µ$ of its tool calls, part of `cost`

    omitted_when_none = ("rounds", "tool_calls", "tools", "round_input_tokens", "tool_cost")


@record
class PlanBranch:
    """One branch of a route: its worst case, and the calls it alone makes."""

    name: str
    cost: float  # µ$, its calls and nested routes' costliest branches
    latency_s: float | None  # its steps' worst case; None when a bound model declares no latency
    nodes: tuple[str, ...]  # the calls in it, nested routes' included


@record
class PlanDecision:
    """A route: its router call, and its branches (exactly one runs)."""

    id: str  # the router call
    within: tuple  # [[decision, branch], ...] the route itself runs under
    fallback: str | None  # the branch taken when the router's output names none
    worst_case_branch: str  # the costliest branch: the one the proven bound takes (first declared on a tie)
    branches: tuple[PlanBranch, ...]


@record
class PlanSeat:
    slot: str
    instance: int
    model: str
    cap: int | None = None  # the output cap chosen in its role's `max_output = lo..hi`; absent when fixed

    omitted_when_none = ("cap",)


@record
class TemplatePlan:
    name: str
    feasible: bool
    worst_case_cost: float | None  # µ$; None when infeasible
    worst_case_latency_s: float | None  # the critical path; None when a bound model declares no latency
    objective: dict  # {"tiers": [...], "tier_seats": [...], "quality": q}, and "kind": "value" by value
    counts: dict  # slot -> instances
    binding: tuple[PlanSeat, ...]
    nodes: tuple[PlanNode, ...]
    answer_nodes: tuple[str, ...]  # calls whose output the flow's answer is (one of)
    cheapest_cost: float | None  # when infeasible: the budget from which it becomes feasible
    binding_rows: tuple[str, ...]  # when infeasible: the rules that stop it
    decisions: tuple[PlanDecision, ...] = ()  # every route, in flow order

    def graph(self):
        """The template's call graph (ir/graph.py), rebuilt from its nodes."""
        from bamasc.ir.graph import call_graph

        return call_graph(self.nodes, answer=self.answer_nodes)


@record
class LengthClassPlan:
    """A length class after a system's first (`task_tokens = [...]`): its templates bound for tasks this long."""

    task_tokens: int
    templates: tuple[TemplatePlan, ...]

    def template(self, name: str) -> TemplatePlan:
        for template in self.templates:
            if template.name == name:
                return template
        raise KeyError(name)


@record
class SystemPlan:
    name: str
    budget: float
    task_tokens: int
    min_agents: int
    answer: str
    on_exhausted: str
    deadline_s: float | None  # seconds per task; None: no deadline
    selection: dict  # {"rule": ..., "selected": name or None, "policy": path or None}
    templates: tuple[TemplatePlan, ...]
    # Each length class after the first (`task_tokens`), ascending; None for a system of one length.
    length_classes: tuple[LengthClassPlan, ...] | None = None
    omitted_when_none = ("length_classes",)

    def template(self, name: str) -> TemplatePlan:
        for template in self.templates:
            if template.name == name:
                return template
        raise KeyError(name)

    def in_class(self, name: str, length_class: int | None) -> TemplatePlan:
        """Template `name` as bound for length class `length_class` (None or the first: `template(name)`)."""
        for length in self.length_classes or ():
            if length.task_tokens == length_class:
                return length.template(name)
        return self.template(name)

    def bindings(self, name: str) -> list[TemplatePlan]:
        """Template `name` in every length class, the first class's first."""
        return [t for c in (self, *(self.length_classes or ())) for t in c.templates if t.name == name]


@record
class Plan:
    schema_version: int
    compiler_version: str
    source_sha256: str
    root: str  # the compiled file, named as in `sources`
    compiled_with: dict  # {"system": name or None, "budget": µ$ or None, "method": ...}: what reproduces the plan
    sources: tuple[dict, ...]  # {"path": ..., "sha256": ...}; std/ files as "std/NAME.bam"
    prices: dict  # model -> {"provider", "name", "input", "output", "tier", "max_output", "latency", and Pricing.record()}
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
        omitted = getattr(value, "omitted_when_none", ())
        return {name: to_data(getattr(value, name)) for name in value.__record_fields__
                if name not in omitted or getattr(value, name) is not None}
    if isinstance(value, (tuple, list)):
        return [to_data(item) for item in value]
    if isinstance(value, dict):
        return {key: to_data(item) for key, item in value.items()}
    return value


def canonical_sha256(data: dict) -> str:
    """The hash of a plan's JSON data, independent of key order, spacing and of how a number is written."""
    text = json.dumps(_canonical(data), sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False)
    return hashlib.sha256(text.encode("ascii")).hexdigest()


def _canonical(value):
    # JSON has one kind of number: 1625 and 1625.0 are the same value and must hash alike.
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, list):
        return [_canonical(item) for item in value]
    if isinstance(value, dict):
        return {key: _canonical(item) for key, item in value.items()}
    return value


def plan_data(plan: Plan) -> dict:
    """The plan as the JSON object a plan file holds: its records, then the hash over them."""
    data = to_data(plan)
    data["plan_sha256"] = canonical_sha256(data)
    return data


def dumps(plan: Plan) -> str:
    return json.dumps(plan_data(plan), indent=2) + "\n"


class PlanFormatError(ValueError):
    """The file is not a plan this version of bamasc can read."""
