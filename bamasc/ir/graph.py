"""The call DAG of a bound template as a NetworkX graph, and the bound checked on it."""

from __future__ import annotations

import networkx as nx

from bamasc.ir.bounds import CallBound
from bamasc.ir.unroll import CallNode


def call_graph(calls: tuple[CallNode, ...], bounds: tuple[CallBound, ...] = ()) -> nx.DiGraph:
    """One node per possible call; an edge u -> v when v's prompt holds u's output.

    Edges into a call that runs only under a condition are marked conditional.
    """
    graph = nx.DiGraph()
    by_id = {bound.node: bound for bound in bounds}
    for call in calls:
        attributes = {
            "slot": call.slot,
            "instance": call.instance,
            "role": call.role,
            "condition": call.condition,
            "combinator": call.combinator,
            "reads_task": call.reads_task,
        }
        bound = by_id.get(call.id)
        if bound is not None:
            attributes.update(
                model=bound.model,
                input_tokens=bound.input_tokens,
                output_tokens=bound.output_tokens,
                input_cost=bound.input_cost,
                output_cost=bound.output_cost,
                cost=bound.cost,
            )
        graph.add_node(call.id, **attributes)
        for source in call.inputs:
            graph.add_edge(source, call.id, conditional=call.condition is not None)
    if not nx.is_directed_acyclic_graph(graph):
        raise ValueError("the unrolled flow has a cycle")
    return graph


def graph_cost(graph: nx.DiGraph) -> float:
    """Worst-case cost of the plan: the sum over every call that may run."""
    return sum(data["cost"] for _, data in graph.nodes(data=True))


def verified_cost(graph: nx.DiGraph, roles: dict, models: dict, task_tokens: int, tolerance: float = 1e-6) -> float:
    """Recompute every call's bound from the graph's own edges and check the stored ones.

    Independent of the solver and of `call_bounds`: a call's input is its role's
    prompt text, the task if it reads it, and the output cap of every
    predecessor in the graph. Returns the total; raises ValueError on a mismatch.
    """
    from bamasc.ir.tokens import output_cap, template_tokens

    total = 0.0
    for node in nx.topological_sort(graph):
        data = graph.nodes[node]
        role = roles[data["role"]]
        model = models[data["model"]]
        tokens_out = output_cap(role, model)
        tokens_in = template_tokens(role) + (task_tokens if data["reads_task"] else 0)
        tokens_in += sum(graph.nodes[p]["output_tokens"] for p in graph.predecessors(node))
        cost = model.price_input * tokens_in + model.price_output * tokens_out
        if (tokens_in, tokens_out) != (data["input_tokens"], data["output_tokens"]) or abs(cost - data["cost"]) > tolerance:
            raise ValueError(
                f"call {node}: recorded bound {data['input_tokens']}+{data['output_tokens']} tokens, "
                f"{data['cost']:.4f} µ$; the graph gives {tokens_in}+{tokens_out} tokens, {cost:.4f} µ$"
            )
        total += cost
    return total
