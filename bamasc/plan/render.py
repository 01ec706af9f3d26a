"""Text renderings of plans: compile tables, explanations, sweeps, Mermaid and Graphviz graphs."""

from __future__ import annotations

from bamasc.plan.schema import Plan, SystemPlan, TemplatePlan


def text_table(header: list[str], rows: list[list[str]]) -> str:
    """Columns padded to their widest cell, with a dashed rule under the header."""
    widths = [max(len(str(row[i])) for row in [header, *rows]) for i in range(len(header))]
    lines = ["  ".join(str(cell).ljust(width) for cell, width in zip(header, widths)).rstrip()]
    lines.append("  ".join("-" * width for width in widths))
    lines += ["  ".join(str(cell).ljust(width) for cell, width in zip(row, widths)).rstrip() for row in rows]
    return "\n".join(lines)


def binding_text(template: TemplatePlan) -> str:
    if not template.feasible:
        return "-"
    models: dict[tuple[str, str], int] = {}
    for seat in template.binding:
        models[(seat.slot, seat.model)] = models.get((seat.slot, seat.model), 0) + 1
    return ", ".join(f"{slot}: {count}x {model}" for (slot, model), count in models.items())


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
        blocks.append(
            f"system {system.name}: budget {system.budget:g} µ$ per task, select = {rule} -> {chosen}\n"
            + text_table(["template", "feasible", "worst case µ$", "of budget", "binding"], rows)
        )
    return "\n\n".join(blocks) + "\n(* selected; worst case = proven bound on every call the template may make)"


# ---------------------------------------------------------------- graphs


def _label(node) -> str:
    return f"{node.role}@{node.model}\\n{node.id}\\n<= {node.cost:.1f} µ$"


def mermaid(template: TemplatePlan) -> str:
    ids = {node.id: f"n{i}" for i, node in enumerate(template.nodes)}
    lines = ["flowchart TD", '  task(["task"])']
    for node in template.nodes:
        label = _label(node).replace("\\n", "<br/>")
        lines.append(f'  {ids[node.id]}["{label}"]')
    for node in template.nodes:
        arrow = "-.->" if node.condition else "-->"
        if node.reads_task:
            lines.append(f"  task {arrow} {ids[node.id]}")
        for source in node.inputs:
            lines.append(f"  {ids[source]} {arrow} {ids[node.id]}")
    lines.append('  answer(["answer"])')
    for node_id in template.answer_nodes:
        lines.append(f"  {ids[node_id]} --> answer")
    return "\n".join(lines) + "\n"


def dot(template: TemplatePlan) -> str:
    lines = [f'digraph "{template.name}" {{', "  rankdir=TB;", '  node [shape=box, fontname="Helvetica"];']
    lines.append('  "task" [shape=oval];')
    lines.append('  "answer" [shape=oval];')
    for node in template.nodes:
        lines.append(f'  "{node.id}" [label="{_label(node)}"];')
    for node in template.nodes:
        style = " [style=dashed]" if node.condition else ""
        if node.reads_task:
            lines.append(f'  "task" -> "{node.id}"{style};')
        for source in node.inputs:
            lines.append(f'  "{source}" -> "{node.id}"{style};')
    for node_id in template.answer_nodes:
        lines.append(f'  "{node_id}" -> "answer";')
    lines.append("}")
    return "\n".join(lines) + "\n"


def pick_template(system: SystemPlan, name: str | None) -> TemplatePlan:
    """The named template, or the selected one."""
    if name is None:
        name = system.selection["selected"]
        if name is None:
            raise KeyError("no template is feasible")
    return system.template(name)
