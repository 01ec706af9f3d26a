"""Hover text (Markdown) for a declared name: what it declares, and for systems and topologies
the worst-case cost the compiler proves at the system's budget."""

from __future__ import annotations

from bamasc.lsp.bounds import COMPUTING, DONE, ERRORS, SystemBound
from bamasc.lsp.index import Occurrence
from bamasc.words import rounded_up

PROMPT_LINES = 8


def hover_text(analysis, occurrence: Occurrence, bound_state: tuple[str, object]) -> str | None:
    """Markdown for the name under the cursor, or None when it names nothing declared."""
    program = analysis.program
    if program is None:
        return None
    kind, name = occurrence.kind, occurrence.name
    if kind == "model" and name in program.models:
        return _model(program.models[name])
    if kind == "role" and name in program.roles:
        return _role(program.roles[name])
    if kind == "tool" and name in program.tools:
        return _tool(program.tools[name])
    if kind == "key" and name in program.keys:
        return _key(program.keys[name])
    if kind == "team" and name in program.teams:
        return _team(program.teams[name], [key.name for key in program.keys.values() if key.team == name])
    if kind == "slot" and occurrence.scope in program.topologies:
        slot = program.topologies[occurrence.scope].slot(name)
        if slot is None:
            return None
        text = f"**slot** `{slot.name}` : `{slot.role}` [{slot.lo}..{slot.hi}] in topology `{occurrence.scope}`"
        role = program.roles.get(slot.role)
        return text + ("\n\n---\n\n" + _role(role) if role else "")
    if kind == "flow":
        declared = analysis.index.declarations(occurrence.key)
        if not declared:
            return "**flow input** `task`: the task text" if name == "task" else None
        line = analysis.lines(declared[0].span.file).lines[declared[0].span.line - 1].strip()
        return f"**flow value** `{name}` in topology `{occurrence.scope}`\n\n```bam\n{line}\n```"
    if kind == "topology" and name in program.topologies:
        users = [s for s in program.systems.values() if name in s.topologies]
        return _topology(program.topologies[name]) + "\n\n" + _bound_section(bound_state, users, name)
    if kind == "system" and name in program.systems:
        system = program.systems[name]
        return _system(system) + "\n\n" + _bound_section(bound_state, [system], None)
    return None


def _model(model) -> str:
    rows = [
        f"**model** `{model.name}`: {model.provider} `{model.model_id}`",
        "",
        f"- price: ${model.price_input:g} input, ${model.price_output:g} output per million tokens",
        f"- tier: {model.tier}" + (" (the strongest)" if model.tier == 1 else ""),
    ]
    caps = [f"max_output {model.max_output}" if model.max_output else "", f"context {model.context}" if model.context else ""]
    rows.append("- caps: " + (", ".join(c for c in caps if c) or "none declared"))
    if model.base_url:
        rows.append(f"- base_url: `{model.base_url}`")
    if model.api_key_env:
        rows.append(f"- key from `${model.api_key_env}`")
    return "\n".join(rows)


def _role(role) -> str:
    lines = role.prompt.strip("\n").split("\n")
    excerpt = "\n".join(lines[:PROMPT_LINES]) + ("\n…" if len(lines) > PROMPT_LINES else "")
    cap = role.max_output if role.max_output is not None else "the model's"
    if role.min_output is not None:  # a range: the binder picks each seat's cap in it
        cap = f"{role.min_output}..{role.max_output} (the compiler picks each seat's cap)"
    return (
        f"**role** `{role.name}`: max_output {cap}, reads `{role.reads}`"
        + (f", weight {role.weight:g}" if role.weight is not None else "") + "\n\n"
        f"```text\n{excerpt.replace('```', '` ` `')}\n```"
    )


def _tool(tool) -> str:
    what = f"python `{tool.target}`" if tool.kind == "python" else f"MCP server `{tool.target}`, allows {', '.join(tool.allow)}"
    rows = [f"**tool** `{tool.name}`: {what}", ""]
    if tool.description:
        rows.append(f"- {tool.description}")
    rows.append(f"- results cut to {tool.max_result} tokens; timeout {tool.timeout_s:g} s; {tool.price:g} µ$ per call")
    return "\n".join(rows)


def _key(key) -> str:
    rows = [f"**key** `{key.name}` of `bamasc proxy`: its secret from `${key.secret_env}`", ""]
    if key.team is not None:
        rows.append(f"- team: `{key.team}`")
    if key.scope_budget is not None:
        rows.append(f"- per scope: {_dollars(key.scope_budget)}")
    rows.append(f"- budgets: {_windows(key.budgets)}")
    rows.append(f"- models: {', '.join(f'`{m}`' for m in key.models) or 'every model'}")
    rows.append(f"- when a budget is spent: {key.on_exhausted}")
    return "\n".join(rows)


def _team(team, keys: list[str]) -> str:
    return "\n".join([
        f"**team** `{team.name}` of `bamasc proxy`",
        "",
        f"- budgets: {_windows(team.budgets)}",
        f"- keys: {', '.join(f'`{k}`' for k in keys) or 'none'}",
    ])


def _windows(budgets) -> str:
    return ", ".join(f"{_dollars(budget.amount)} per {budget.per}" for budget in budgets) or "none"


def _dollars(micro_usd: float) -> str:
    return f"${micro_usd / 1_000_000:,.6g}"


def _topology(topology) -> str:
    rows = [f"**topology** `{topology.name}`", ""]
    rows += [f"- slot `{s.name}` : `{s.role}` [{s.lo}..{s.hi}]" for s in topology.slots]
    if topology.requires:
        rows.append(f"- {len(topology.requires)} require row(s)")
    return "\n".join(rows)


def _system(system) -> str:
    budget = f"{system.budget:g} µ$ per task" if system.budget is not None else "none declared"
    return "\n".join([
        f"**system** `{system.name}`",
        "",
        f"- models: {', '.join(f'`{m}`' for m in system.models) or 'none'}",
        f"- templates: {', '.join(f'`{t}`' for t in system.topologies) or 'none'}",
        f"- budget: {budget}; task_tokens {system.task_tokens}; select {system.select.kind}",
        f"- objective: {system.objective}",
    ])


def _bound_section(bound_state, systems, template: str | None) -> str:
    status, value = bound_state
    if not systems:
        return "_Worst-case cost: no system uses this topology._"
    if status == ERRORS:
        return "_Worst-case cost: fix the errors first._"
    if status == COMPUTING:
        return "_Worst-case cost: computing…_"
    if status != DONE:
        return f"_Worst-case cost: the compiler failed ({value})._"
    return "\n\n".join(bound_lines(value[s.name], template) for s in systems if s.name in value)


def bound_lines(bound: SystemBound, template: str | None) -> str:
    """The proven bounds of one system (or of one of its templates) as Markdown: a table per length class."""
    if bound.budget is None:
        return f"System `{bound.system}` declares no budget: nothing to bind."
    budget = f"{bound.budget:g} µ$"
    rows = [f"**Worst case in `{bound.system}` at its budget of {budget}** (proven by the binder):"]
    for length in bound.classes:
        if len(bound.classes) > 1:
            rows += ["", f"Tasks up to {length.task_tokens} tokens:"]
        rows += ["", "| template | worst case | fits | binding |", "|---|---|---|---|"]
        for found in length.templates:
            if template is not None and found.template != template:
                continue
            fits = "yes" if found.feasible else "no"
            rows.append(f"| `{found.template}` | {cost_text(found)} | {fits} | {', '.join(found.seats) or '-'} |")
        if template is None:
            rows.append("")
            rows.append(f"Selected template: `{length.selected}`." if length.selected else f"No template fits {budget}.")
    return "\n".join(rows)


def cost_text(found) -> str:
    if found.problem:
        return f"not bound: {found.problem}"
    if found.feasible:
        return f"{found.worst_case_cost:.1f} µ$"  # as `bamasc compile` prints it
    if found.cheapest_cost is None:
        return "no binding (its rules conflict)"
    return f"needs {rounded_up(found.cheapest_cost)} µ$"
