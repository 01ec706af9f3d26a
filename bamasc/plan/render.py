"""Text renderings of plans: compile tables, explanations, sweeps, Mermaid and Graphviz graphs."""

from __future__ import annotations

from bamasc.combinators.dynamic import seat_step
from bamasc.plan.schema import Plan, SystemPlan, TemplatePlan
from bamasc.records import record


def text_table(header: list[str], rows: list[list[str]]) -> str:
    """Columns padded to their widest cell, with a dashed rule under the header."""
    widths = [max(len(str(row[i])) for row in [header, *rows]) for i in range(len(header))]
    lines = ["  ".join(str(cell).ljust(width) for cell, width in zip(header, widths)).rstrip()]
    lines.append("  ".join("-" * width for width in widths))
    lines += ["  ".join(str(cell).ljust(width) for cell, width in zip(row, widths)).rstrip() for row in rows]
    return "\n".join(lines)


def no_binding_text(system: SystemPlan, template: TemplatePlan) -> str:
    """Why an infeasible template cannot run, in one line: the deadline, when no binding meets it at any budget."""
    from bamasc.plan.build import DEADLINE_ROW

    if DEADLINE_ROW in template.binding_rows and template.cheapest_cost is None:
        return f"template '{template.name}' has no binding within the deadline of {system.deadline_s:g} s"
    return f"template '{template.name}' has no binding within {system.budget:g} µ$"


def binding_text(template: TemplatePlan) -> str:
    if not template.feasible:
        return "-"
    models: dict[tuple[str, str, int | None], int] = {}
    for seat in template.binding:
        key = (seat.slot, seat.model, seat.cap)
        models[key] = models.get(key, 0) + 1
    # A cap the compiler chose (`max_output = lo..hi`) is shown after the model.
    return ", ".join(f"{slot}: {count}x {model}" + ("" if cap is None else f" (cap {cap})")
                     for (slot, model, cap), count in models.items())


def compile_table(plan: Plan) -> str:
    blocks = []
    for system in plan.systems:
        selection = system.selection
        chosen = selection["selected"] or "none"
        rule = selection["rule"] + (f"({selection['policy']})" if selection.get("policy") else "")
        rows = []
        for template in system.templates:
            if template.feasible:
                cost = f"{template.worst_case_cost:.1f}"
                share = f"{100 * template.worst_case_cost / system.budget:.1f}%"
            else:
                cost = f"(needs {template.cheapest_cost:.1f})" if template.cheapest_cost is not None else "(no binding)"
                share = "-"
            mark = "*" if template.name == selection["selected"] else ""
            rows.append([template.name + mark, "yes" if template.feasible else "no", cost, share, binding_text(template)])
        classes = f", tasks up to {system.task_tokens} tokens" if system.length_classes else ""
        blocks.append(
            f"system {system.name}: budget {system.budget:g} µ$ per task{classes}, select = {rule} -> {chosen}\n"
            + text_table(["template", "feasible", "worst case µ$", "of budget", "binding"], rows)
        )
        blocks += [_length_class_table(system, length) for length in system.length_classes or ()]
    return "\n\n".join(blocks) + "\n(* selected; worst case = proven bound on every call the template may make)"


def _length_class_table(system: SystemPlan, length) -> str:
    """A length class after the system's first: each template's binding for tasks that long."""
    rows = [[template.name, f"{template.worst_case_cost:.1f}", binding_text(template)]
            for template in length.templates if template.feasible]
    if not rows:
        return f"  tasks up to {length.task_tokens} tokens: no template has a binding within {system.budget:g} µ$"
    return (f"  tasks up to {length.task_tokens} tokens:\n"
            + text_table(["template", "worst case µ$", "binding"], rows))


# ---------------------------------------------------------------- graphs


def _label(node: str, data: dict) -> str:
    label = f"{data['role']}@{data['model']}\\n{node}\\n<= {data['cost']:.1f} µ$"
    if data["combinator"] == "converse" and data["condition"]:
        # Where a conversation may already have stopped: the turn runs only if it has not.
        label += "\\nonly if " + data["condition"].replace('"', "'").replace("\\", "/")
    return label


@record
class Arrow:
    """One arrow of a call graph's drawing, the same in every format."""

    source: str  # a call's node id, or `task`
    target: str  # a call's node id, or `answer`
    style: str  # ARROW_STYLES: a flow edge, a conditional one, a route's or plan's choice, the worst-case choice
    label: str | None = None  # a choice's branch (or a dynamic plan's step and seat)


ARROW_STYLES = ("flow", "conditional", "choice", "worst")


def arrows(template: TemplatePlan, graph=None) -> list[Arrow]:
    """Every arrow of the template's drawing: each call's inputs (`task` and `answer` included), then
    each route's branches from the router and each dynamic plan's seats from the planner. Mermaid, dot
    and the PNG (drawn by Graphviz from the dot text) are all written from this one list."""
    graph = template.graph() if graph is None else graph
    found = []
    for node, data in graph.nodes(data=True):
        style = "conditional" if data["condition"] is not None else "flow"
        if data["reads_task"]:
            found.append(Arrow("task", node, style))
        found += [Arrow(source, node, style) for source in graph.predecessors(node)]
    found += [Arrow(node, "answer", "flow") for node in graph.graph["answer"]]
    for router, target, label, worst in _choices(template):
        found.append(Arrow(router, target, "worst" if worst else "choice", label))
    return found


def _choices(template: TemplatePlan):
    """Each route's alternative edges: (router, first call of the branch or `answer`, label, worst),
    `worst` for the branch the proven bound takes; a dynamic plan's, from the planner to each seat."""
    for decision in template.decisions:
        step = seat_step(decision.id)  # a dynamic plan's step: the planner's cards choose its seat
        for branch in decision.branches:
            label = branch.name + (" (fallback)" if branch.name == decision.fallback else "")
            label = f"step {step[1] + 1} by {branch.name}" if step else label
            target = branch.nodes[0] if branch.nodes else "answer"
            yield step[0] if step else decision.id, target, label, branch.name == decision.worst_case_branch


MERMAID_ARROWS = {"flow": "-->", "conditional": "-.->"}


def mermaid(template: TemplatePlan) -> str:
    graph = template.graph()
    ids = {node: f"n{i}" for i, node in enumerate(graph)} | {"task": "task", "answer": "answer"}
    lines = ["flowchart TD", '  task(["task"])']
    for node, data in graph.nodes(data=True):
        label = _label(node, data).replace("\\n", "<br/>")
        lines.append(f'  {ids[node]}["{label}"]')
    answer = ['  answer(["answer"])']
    for arrow in arrows(template, graph):
        if arrow.style == "worst":
            shape = f'== "{arrow.label}: worst case" ==>'
        elif arrow.style == "choice":
            shape = f'-. "{arrow.label}" .->'
        else:
            shape = MERMAID_ARROWS[arrow.style]
        (answer if arrow.target == "answer" else lines).append(f"  {ids[arrow.source]} {shape} {ids[arrow.target]}")
    return "\n".join(lines + answer) + "\n"


def dot_attributes(arrow: Arrow) -> str:
    """The arrow's attributes in dot, with the brackets; empty for a plain flow edge."""
    if arrow.style == "conditional":
        return " [style=dashed]"
    if arrow.style == "worst":
        return f' [label="{arrow.label}: worst case", style=bold]'
    if arrow.style == "choice":
        return f' [label="{arrow.label}", style=dotted]'
    return ""


def dot(template: TemplatePlan, graph_attributes: tuple[str, ...] = (), arrow_attributes=dot_attributes) -> str:
    """The template's call graph in Graphviz's dot language; `graph_attributes` are extra statements
    (the PNG's title and sizes) written after the defaults, and `arrow_attributes(arrow)` each edge's
    attributes (the PNG's add colours)."""
    graph = template.graph()
    lines = [f'digraph "{template.name}" {{', "  rankdir=TB;", '  node [shape=box, fontname="Helvetica"];']
    lines += [f"  {statement}" for statement in graph_attributes]
    lines.append('  "task" [shape=oval];')
    lines.append('  "answer" [shape=oval];')
    for node, data in graph.nodes(data=True):
        lines.append(f'  "{node}" [label="{_label(node, data)}"];')
    for arrow in arrows(template, graph):
        lines.append(f'  "{arrow.source}" -> "{arrow.target}"{arrow_attributes(arrow)};')
    lines.append("}")
    return "\n".join(lines) + "\n"


def pick_template(system: SystemPlan, name: str | None) -> TemplatePlan:
    """The named template, or the selected one."""
    if name is None:
        name = system.selection["selected"]
        if name is None:
            raise KeyError("no template is feasible")
    return system.template(name)
