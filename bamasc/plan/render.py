"""Text renderings of plans: compile tables, explanations, sweeps, Mermaid and Graphviz graphs."""

from __future__ import annotations

from bamasc.combinators.dynamic import seat_step
from bamasc.plan.schema import Plan, SystemPlan, TemplatePlan


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


def _edges(graph):
    """Each arrow of the drawing: (source, target, conditional), `task` and `answer` included."""
    for node, data in graph.nodes(data=True):
        conditional = data["condition"] is not None
        if data["reads_task"]:
            yield "task", node, conditional
        for source in graph.predecessors(node):
            yield source, node, conditional
    for node in graph.graph["answer"]:
        yield node, "answer", False


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


def mermaid(template: TemplatePlan) -> str:
    graph = template.graph()
    ids = {node: f"n{i}" for i, node in enumerate(graph)} | {"task": "task", "answer": "answer"}
    lines = ["flowchart TD", '  task(["task"])']
    for node, data in graph.nodes(data=True):
        label = _label(node, data).replace("\\n", "<br/>")
        lines.append(f'  {ids[node]}["{label}"]')
    answer = ['  answer(["answer"])']
    for source, target, conditional in _edges(graph):
        line = f"  {ids[source]} {'-.->' if conditional else '-->'} {ids[target]}"
        (answer if target == "answer" else lines).append(line)
    for router, target, label, worst in _choices(template):
        arrow = f'== "{label}: worst case" ==>' if worst else f'-. "{label}" .->'
        (answer if target == "answer" else lines).append(f"  {ids[router]} {arrow} {ids[target]}")
    return "\n".join(lines + answer) + "\n"


def dot(template: TemplatePlan) -> str:
    graph = template.graph()
    lines = [f'digraph "{template.name}" {{', "  rankdir=TB;", '  node [shape=box, fontname="Helvetica"];']
    lines.append('  "task" [shape=oval];')
    lines.append('  "answer" [shape=oval];')
    for node, data in graph.nodes(data=True):
        lines.append(f'  "{node}" [label="{_label(node, data)}"];')
    for source, target, conditional in _edges(graph):
        lines.append(f'  "{source}" -> "{target}"{" [style=dashed]" if conditional else ""};')
    for router, target, label, worst in _choices(template):
        style = f'label="{label}: worst case", style=bold' if worst else f'label="{label}", style=dotted'
        lines.append(f'  "{router}" -> "{target}" [{style}];')
    lines.append("}")
    return "\n".join(lines) + "\n"


def pick_template(system: SystemPlan, name: str | None) -> TemplatePlan:
    """The named template, or the selected one."""
    if name is None:
        name = system.selection["selected"]
        if name is None:
            raise KeyError("no template is feasible")
    return system.template(name)
