"""Draws a template's call graph as a PNG with matplotlib and NetworkX."""

from __future__ import annotations

from bamasc.plan.schema import TemplatePlan


def draw_png(template: TemplatePlan, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import networkx as nx

    graph = nx.DiGraph()
    graph.add_node("task", label="task")
    for node in template.nodes:
        graph.add_node(node.id, label=f"{node.role}@{node.model}\n{node.id}\n<= {node.cost:.1f} µ$")
        conditional = node.condition is not None
        if node.reads_task:
            graph.add_edge("task", node.id, conditional=conditional)
        for source in node.inputs:
            graph.add_edge(source, node.id, conditional=conditional)
    graph.add_node("answer", label="answer")
    for source in template.answer_nodes:
        graph.add_edge(source, "answer", conditional=False)
    for layer, names in enumerate(nx.topological_generations(graph)):
        for name in names:
            graph.nodes[name]["layer"] = layer
    positions = nx.multipartite_layout(graph, subset_key="layer", align="horizontal", scale=2.0)
    # Top to bottom in call order.
    positions = {name: (x, -y) for name, (x, y) in positions.items()}
    width = max(6, 2.2 * max((len(g) for g in nx.topological_generations(graph)), default=1))
    height = max(4, 1.4 * (1 + max((d["layer"] for _, d in graph.nodes(data=True)), default=0)))
    figure, axis = plt.subplots(figsize=(width, height), dpi=100)
    solid = [(u, v) for u, v, d in graph.edges(data=True) if not d["conditional"]]
    dashed = [(u, v) for u, v, d in graph.edges(data=True) if d["conditional"]]
    # Invisible nodes give the axes their extent; the labels are the boxes.
    nx.draw_networkx_nodes(graph, positions, node_size=2500, node_color="none", ax=axis)
    nx.draw_networkx_edges(graph, positions, edgelist=solid, ax=axis, arrows=True, node_size=2500, connectionstyle="arc3,rad=0.15")
    nx.draw_networkx_edges(
        graph, positions, edgelist=dashed, ax=axis, arrows=True, style="dashed", node_size=2500, connectionstyle="arc3,rad=0.3"
    )
    nx.draw_networkx_labels(
        graph,
        positions,
        labels={n: d["label"] for n, d in graph.nodes(data=True)},
        font_size=8,
        bbox={"boxstyle": "round", "facecolor": "#eef3fb", "edgecolor": "#4a6fa5"},
        ax=axis,
    )
    xs = [x for x, _ in positions.values()]
    ys = [y for _, y in positions.values()]
    axis.set_xlim(min(xs) - 1.0, max(xs) + 1.0)
    axis.set_ylim(min(ys) - 0.5, max(ys) + 0.5)
    axis.set_title(f"{template.name}: worst case {template.worst_case_cost:.1f} µ$ (dashed: conditional calls)")
    axis.axis("off")
    figure.tight_layout()
    figure.savefig(path)
    plt.close(figure)
