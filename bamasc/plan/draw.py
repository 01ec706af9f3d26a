"""Draws a template's call graph as a PNG: a layered left-to-right layout, drawn with matplotlib.

Each call sits in the column of its topological generation (the longest chain
of calls before it). Every edge runs from a box's right side to the next
column's left side; an edge that skips columns passes each column it crosses
through a free slot of its own, as a box would. No segment then enters the
column of a box it does not end at, so no edge crosses a node.
"""

from __future__ import annotations

from bamasc.plan.schema import TemplatePlan

BOX_WIDTH = 2.0  # inches: a label of about 26 characters at 7 points
BOX_HEIGHT = 0.75  # inches: three lines of label
COLUMN_GAP = 1.0  # inches between columns, for the arrows
ROW_GAP = 0.35  # inches between the slots of one column


def layout(template: TemplatePlan, graph=None) -> tuple[dict[str, tuple[float, float, float, float]], list[tuple[str, str, list, bool]]]:
    """Boxes by node name as (x0, y0, x1, y1), and edges as (source, target, polyline points, conditional)."""
    graph = template.graph() if graph is None else graph  # the drawing passes the one it labels
    predecessors: dict[str, list[tuple[str, bool]]] = {"task": []}
    for node, data in graph.nodes(data=True):
        conditional = data["condition"] is not None
        sources = (["task"] if data["reads_task"] else []) + list(graph.predecessors(node))
        predecessors[node] = [(source, conditional) for source in sources]
    predecessors["answer"] = [(source, False) for source in graph.graph["answer"]]

    layer: dict[str, int] = {}

    def layer_of(name: str) -> int:
        if name not in layer:
            layer[name] = 1 + max((layer_of(source) for source, _ in predecessors[name]), default=-1)
        return layer[name]

    for name in predecessors:
        layer_of(name)
    # The answer closes the picture, in a column of its own after every call.
    layer["answer"] = max((layer[name] for name in predecessors if name != "answer"), default=0) + 1

    columns: dict[int, list[str]] = {}
    for name in predecessors:
        columns.setdefault(layer[name], []).append(name)
    # Each edge that skips columns takes a slot in every column between its ends.
    detours: list[tuple[str, str, bool, list[tuple[int, int]]]] = []
    for target, sources in predecessors.items():
        for source, conditional in sources:
            slots = []
            for column in range(layer[source] + 1, layer[target]):
                columns.setdefault(column, []).append(f"{source}->{target}")
                slots.append((column, len(columns[column]) - 1))
            detours.append((source, target, conditional, slots))

    tallest = max(len(names) for names in columns.values())

    def centre(column: int, slot: int) -> tuple[float, float]:
        count = len(columns[column])
        # Columns are centred on one another; y grows upwards, slot 0 on top.
        offset = (tallest - count) / 2
        return column * (BOX_WIDTH + COLUMN_GAP) + BOX_WIDTH / 2, -(offset + slot) * (BOX_HEIGHT + ROW_GAP)

    boxes = {}
    for column, names in columns.items():
        for slot, name in enumerate(names):
            if name in predecessors:
                x, y = centre(column, slot)
                boxes[name] = (x - BOX_WIDTH / 2, y - BOX_HEIGHT / 2, x + BOX_WIDTH / 2, y + BOX_HEIGHT / 2)
    edges = []
    for source, target, conditional, slots in detours:
        x0, y0, x1, y1 = boxes[source]
        points = [(x1, (y0 + y1) / 2)]
        for column, slot in slots:
            x, y = centre(column, slot)
            points += [(x - BOX_WIDTH / 2, y), (x + BOX_WIDTH / 2, y)]
        x0, y0, x1, y1 = boxes[target]
        points.append((x0, (y0 + y1) / 2))
        edges.append((source, target, points, conditional))
    return boxes, edges


def draw_png(template: TemplatePlan, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import FancyArrowPatch, FancyBboxPatch
    from matplotlib.path import Path

    graph = template.graph()
    boxes, edges = layout(template, graph)
    labels = {"task": "task", "answer": "answer"}
    for node, data in graph.nodes(data=True):
        labels[node] = f"{data['role']}@{data['model']}\n{node}\n<= {data['cost']:.1f} µ$"
    # Detours of long edges may run in lanes below every box: the canvas holds them too.
    lanes = [y for _, _, points, _ in edges for _, y in points]
    left = min(box[0] for box in boxes.values())
    right = max(box[2] for box in boxes.values())
    bottom = min([box[1] for box in boxes.values()] + lanes)
    top = max([box[3] for box in boxes.values()] + lanes)
    margin = 0.3
    width, height = right - left + 2 * margin, top - bottom + 2 * margin + 0.4  # room for the title
    figure = plt.figure(figsize=(max(4.0, width), max(2.0, height)), dpi=100)
    axis = figure.add_axes((0, 0, 1, 1))
    axis.set_xlim(left - margin, left - margin + max(4.0, width))
    axis.set_ylim(top + margin + 0.4 - max(2.0, height), top + margin + 0.4)
    axis.set_aspect("equal")
    axis.axis("off")
    for source, target, points, conditional in edges:
        codes = [Path.MOVETO] + [Path.LINETO] * (len(points) - 1)
        axis.add_patch(
            FancyArrowPatch(
                path=Path(points, codes), arrowstyle="-|>", mutation_scale=10,
                linestyle="--" if conditional else "-", color="#333333", linewidth=1,
            )
        )
    for name, (x0, y0, x1, y1) in boxes.items():
        axis.add_patch(
            FancyBboxPatch((x0, y0), x1 - x0, y1 - y0, boxstyle="round,pad=0,rounding_size=0.08",
                           facecolor="#eef3fb", edgecolor="#4a6fa5")
        )
        axis.text((x0 + x1) / 2, (y0 + y1) / 2, labels.get(name, name), ha="center", va="center", fontsize=7)
    axis.text(left, top + 0.25, f"{template.name}: worst case {template.worst_case_cost:.1f} µ$ (dashed: conditional calls)",
              fontsize=8, va="bottom")
    figure.savefig(path)
    plt.close(figure)
