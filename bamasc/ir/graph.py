"""The IR of a bound template: one NetworkX DiGraph of the calls it may make.

Nodes are call ids, in flow order, carrying the call's fields (slot, instance,
role, reads_task, condition, combinator, step) and, once bound, its model, its
token and cost bounds and its worst-case latency (`latency_s`); an edge u -> v means v's prompt holds u's output, and a
node's predecessors come in the order its prompt reads them. The graph's
`answer` attribute names the calls the flow's answer is (one of).

The compiler builds it once per bound template (`plan/build.py`); loading a
plan rebuilds it from the plan's nodes to check every bound on it; `graph`,
`explain` and the drawing read it. The walker's plain call list stays the
form that lint and the binder's inner loops use: importing NetworkX alone
takes longer than a whole `bamasc lint`.
"""

from __future__ import annotations

import networkx as nx

from bamasc.ir.bounds import CallBound, call_bound, cost_amounts

# The fields of a call that are not its id or its reads.
CALL_FIELDS = ("slot", "instance", "role", "reads_task", "condition", "combinator", "step", "alternative")
BOUND_FIELDS = ("model", "input_tokens", "output_tokens", "input_cost", "output_cost", "cost")
# One attempt's worst case in seconds, or None when the model declares no latency.
LATENCY_FIELD = "latency_s"


def call_graph(calls, bounds: tuple[CallBound, ...] = (), answer: tuple[str, ...] = ()) -> nx.DiGraph:
    """The graph of `calls` (records with `id`, `inputs` and the call fields; plan nodes
    also carry their bound), with the bound of each call in `bounds` added."""
    graph = nx.DiGraph(answer=tuple(answer))
    by_id = {bound.node: bound for bound in bounds}
    for call in calls:
        fields = CALL_FIELDS + BOUND_FIELDS + (LATENCY_FIELD,)
        attributes = {name: getattr(call, name) for name in fields if hasattr(call, name)}
        attributes["alternative"] = tuple(tuple(pair) for pair in attributes.get("alternative", ()))
        bound = by_id.get(call.id)
        if bound is not None:
            attributes.update({name: getattr(bound, name) for name in BOUND_FIELDS})
        graph.add_node(call.id, **attributes)
        for source in call.inputs:
            graph.add_edge(source, call.id, conditional=call.condition is not None)
    if not nx.is_directed_acyclic_graph(graph):
        raise ValueError("the unrolled flow has a cycle")
    return graph


def reads(graph: nx.DiGraph, node: str) -> tuple[str, ...]:
    """The calls whose outputs `node`'s prompt holds, first read first."""
    return tuple(graph.predecessors(node))


def verified_cost(
    graph: nx.DiGraph, roles: dict, models: dict, task_tokens: int, trusted: dict, tolerance: float = 1e-6,
    caps: dict | None = None,
) -> float:
    """Recompute every call's bound from the graph's own edges and check the stored ones.

    Independent of the solver and of `call_bounds`: a call's input is its role's
    prompt text, the task if it reads it, and the output cap of every
    predecessor in the graph, plus what the plan does not record: the numbering of
    the lists it shows, the outputs it shows twice and the branches that exclude
    each other (`trusted`: each node's CallNode from a fresh unroll of the flow), each seat at its chosen output cap
    (`caps`: (slot, instance) -> cap). Returns the total; raises ValueError on a mismatch.
    """
    from bamasc.ir.alternatives import worst_case
    from bamasc.ir.tokens import output_cap, seat_model, template_tokens
    from bamasc.ir.unroll import largest_option

    calls, bounds = [], []
    for node in nx.topological_sort(graph):
        data = graph.nodes[node]
        role = roles[data["role"]]
        model = seat_model(models[data["model"]], (caps or {}).get((data["slot"], data["instance"])))
        tokens_out = output_cap(role, model)
        # Whether it reads the task comes from the flow, like the rest of what is not an edge.
        tokens_in = template_tokens(role) + (task_tokens if trusted[node].reads_task else 0)
        tokens_in += trusted[node].framing
        # Of a group of options that exclude each other (a dynamic plan's step, a route's answer),
        # the prompt shows one: the largest counts, the rest not.
        outputs = {p: graph.nodes[p]["output_tokens"] for p in graph.predecessors(node)}
        grouped = {p for group in trusted[node].either for option in group for p in option.nodes}
        tokens_in += sum(tokens for p, tokens in outputs.items() if p not in grouped)
        tokens_in += sum(largest_option(group, outputs, task_tokens) for group in trusted[node].either)
        tokens_in += sum(graph.nodes[p]["output_tokens"] for p in trusted[node].again + trusted[node].cards)
        bound = call_bound(trusted[node], model, tokens_in, tokens_out, outputs, task_tokens, role.loop)
        cost = bound.cost
        if (tokens_in, tokens_out) != (data["input_tokens"], data["output_tokens"]) or abs(cost - data["cost"]) > tolerance:
            raise ValueError(
                f"call {node}: recorded bound {data['input_tokens']}+{data['output_tokens']} tokens, "
                f"{data['cost']:.4f} µ$; the graph gives {tokens_in}+{tokens_out} tokens, {cost:.4f} µ$"
            )
        # Which calls exclude each other comes from the flow too: an edited plan could otherwise
        # mark calls that all run as alternatives and have only the dearest counted.
        calls.append(trusted[node])
        bounds.append(bound)
    return worst_case(cost_amounts(calls, bounds)).total


def critical_path(graph: nx.DiGraph):
    """The graph's worst-case latency from its nodes' `latency_s`: per step its slowest call, summed
    (ir/latency.py says why steps add up). A LatencyBound; its seconds are None if any node has none."""
    from bamasc.ir.latency import LatencyBound, slowest_path

    slowest: dict[int, tuple[str, float]] = {}
    for node, data in graph.nodes(data=True):
        seconds = data.get(LATENCY_FIELD)
        if seconds is None:
            return LatencyBound(None, ())
        if data["step"] not in slowest or seconds > slowest[data["step"]][1]:
            slowest[data["step"]] = (node, seconds)
    calls = {node: _Step(node, graph.nodes[node]["alternative"]) for node, _ in slowest.values()}
    return slowest_path([(calls[node], seconds) for node, seconds in (slowest[step] for step in sorted(slowest))])


class _Step:
    """A step's slowest call as `slowest_path` reads it: its id and its alternative."""

    def __init__(self, id: str, alternative):
        self.id, self.alternative = id, alternative


def verified_latency(graph: nx.DiGraph, roles: dict, models: dict, tolerance: float = 1e-9, caps: dict | None = None):
    """Recompute every call's worst-case latency from its role and model (at its seat's chosen output cap,
    `caps`), check the stored ones, and return the critical path (a LatencyBound). Raises ValueError on a mismatch."""
    from bamasc.ir.latency import call_latency_s
    from bamasc.ir.tokens import seat_model

    for node, data in graph.nodes(data=True):
        model = seat_model(models[data["model"]], (caps or {}).get((data["slot"], data["instance"])))
        expected = call_latency_s(roles[data["role"]], model)
        recorded = data.get(LATENCY_FIELD)
        if (expected is None) != (recorded is None) or (
            expected is not None and abs(expected - recorded) > tolerance * max(1.0, expected)
        ):
            shown = "none" if recorded is None else f"{recorded:g} s"
            raise ValueError(
                f"call {node}: recorded worst-case latency {shown}; its role and model give "
                + ("none" if expected is None else f"{expected:g} s")
            )
    return critical_path(graph)
