"""Explains a binding: each call's bound split into input and output, why each seat has its model,
which rules are tight, and (when the binding was made now, not read from a plan) the binder's path."""

from __future__ import annotations

import os

from bamasc.check.linear import linear_row
from bamasc.combinators import combinator_of
from bamasc.combinators.dynamic import seat_step
from bamasc.ir.bounds import call_bounds, worst_case_cost
from bamasc.ir.graph import critical_path
from bamasc.ir.tokens import seat_model, seat_models
from bamasc.ir.unroll import unroll
from bamasc.ir.latency import worst_case_latency
from bamasc.optimize.strategy import BindPath
from bamasc.optimize.value import SeatWorth
from bamasc.plan.build import DEADLINE_ROW, source_label
from bamasc.plan.render import binding_text, pick_template, text_table
from bamasc.plan.schema import Plan, SystemPlan, TemplatePlan
from bamasc.words import counted


def _strength(model, role: str) -> tuple:
    return (model.tier, -model.quality_for(role))


def seat_alternatives(program, system: SystemPlan, template: TemplatePlan) -> list[dict]:
    """For every seat and every other pool model: the bound with that one seat changed, and what breaks."""
    topology = program.topologies[template.name]
    # The flow's own unroll (a loaded plan's calls were checked to be these): it knows the
    # numbering each call's lists add, which the plan does not record.
    calls = unroll(topology, template.counts).calls
    pool = [program.models[name] for name in program.systems[system.name].models]
    chosen = seat_models(program.models, template.binding)
    rows = [linear_row(r) for r in topology.requires]
    deadline = program.systems[system.name].deadline
    worth = SeatWorth(program, topology, unroll(topology, {s.name: s.hi for s in topology.slots}).calls)
    by_value = program.systems[system.name].objective == "value"
    findings = []
    for seat in template.binding:
        role = topology.slot(seat.slot).role
        current = program.models[seat.model]
        for model in pool:
            if model.name == seat.model:
                continue
            trial = dict(chosen)
            # At the seat's chosen cap, or the alternative's own where it is smaller.
            cap = None if seat.cap is None else min(seat.cap, model.max_output or seat.cap)
            trial[(seat.slot, seat.instance)] = seat_model(model, cap)
            bound = worst_case_cost(calls, call_bounds(calls, trial, program.roles, system.task_tokens))
            broken = [i for i, row in enumerate(rows) if not _holds(row, trial)]
            seconds = worst_case_latency(calls, trial, program.roles).seconds if deadline is not None else None
            findings.append(
                {
                    "seat": f"{seat.slot}[{seat.instance}]",
                    "model": seat.model,
                    "alternative": model.name,
                    "stronger": _strength(model, role) < _strength(current, role),
                    "delta": bound - template.worst_case_cost,
                    "bound": bound,
                    "over_budget": bound > system.budget * (1 + 1e-9),
                    "broken_rows": broken,
                    "tier": model.tier,
                    "latency_s": seconds,
                    "over_deadline": seconds is not None and seconds > deadline * (1 + 1e-9),
                    # By value: what the seat's slot would be worth more (its best model's weight x
                    # quality, counted once), else None.
                    "worth": _slot_worth(worth, role, seat.slot, trial) - _slot_worth(worth, role, seat.slot, chosen)
                    if by_value else None,
                }
            )
    return findings


def _slot_worth(worth: SeatWorth, role: str, slot: str, model_of) -> float:
    return worth.worth(role, [model for (name, _), model in model_of.items() if name == slot])


def _holds(row, model_of) -> bool:
    total = 0
    for slot, tier, coef in row.terms:
        total += coef * sum(1 for (s, _), m in model_of.items() if s == slot and (tier is None or m.tier == tier))
    return {"<=": total <= row.rhs, ">=": total >= row.rhs, "==": total == row.rhs}[row.sense]


def _reason(finding: dict) -> str:
    change = f"{finding['delta']:+.1f} µ$ -> {finding['bound']:.1f} µ$"
    if finding["broken_rows"]:
        rows = ", ".join(f"require #{i + 1}" for i in finding["broken_rows"])
        return f"{finding['alternative']}: {change}; breaks {rows}"
    if finding.get("worth") is not None:
        return _value_reason(finding, change)
    if finding["stronger"]:
        return _better_but(f"stronger {finding['alternative']}: {change}", finding)
    return f"weaker {finding['alternative']} (tier {finding['tier']}): {change}; the objective prefers stronger seats"


def _value_reason(finding: dict, change: str) -> str:
    """Why an alternative lost by value: it is worth less, the same for no less cost, or does not fit."""
    worth = finding["worth"]
    if abs(worth) <= 1e-9:
        return f"{finding['alternative']}: {change}; worth the same, so the cheaper binding wins"
    if worth < 0:
        return f"{finding['alternative']}: {change}; worth {-worth:.3g} less (weight x quality)"
    return _better_but(f"{finding['alternative']} worth {worth:.3g} more: {change}", finding)


def _better_but(gain: str, finding: dict) -> str:
    """Why an alternative the objective would prefer (`gain` says how) was not taken: budget, deadline, or the rest."""
    late = f"{finding['latency_s']:.3f} s, over the deadline" if finding.get("over_deadline") else None
    if finding["over_budget"]:
        return f"{gain}, over the budget" + (f" and {late}" if late else "")
    if late:
        return f"{gain}, fits the budget but takes {late}"
    return f"{gain}, fits alone, but the instance order or another seat's model would have to give way"


def objective_lines(program, system: SystemPlan, template: TemplatePlan) -> list[str]:
    """Which objective chose the binding, and by value what each slot's seats weigh and the binding is worth."""
    declared = program.systems[system.name]
    if declared.objective != "value":
        return ["Objective: tiers (most seats of the strongest tier, then of the next, ...; then quality; then cost)"]
    topology = program.topologies[template.name]
    worth = SeatWorth(program, topology, unroll(topology, {s.name: s.hi for s in topology.slots}).calls)
    role = {slot.name: slot.role for slot in topology.slots}
    total = sum(
        worth.worth(role[slot.name], [program.models[seat.model] for seat in template.binding if seat.slot == slot.name])
        for slot in topology.slots
    )
    weights = ", ".join(f"{slot.name} {worth.weight(slot.role):g}" for slot in topology.slots)
    return [f"Objective: value (the sum over slots of weight x their best model's quality, then the lowest cost): {total:.4g}; "
            f"weights: {weights}"]


def tight_rows(program, system: SystemPlan, template: TemplatePlan) -> list[str]:
    topology = program.topologies[template.name]
    declared = program.systems[system.name]
    notes = [f"budget: {template.worst_case_cost:.1f} of {system.budget:g} µ$ (slack {system.budget - template.worst_case_cost:.1f})"]
    if system.deadline_s is not None:
        slack = system.deadline_s - template.worst_case_latency_s
        # Tight: within 5% of the deadline, where a slightly slower model on the path would break it.
        state = "tight, " if slack <= 0.05 * system.deadline_s else ""
        notes.append(f"deadline: {template.worst_case_latency_s:.3f} of {system.deadline_s:g} s ({state}slack {slack:.3f} s)")
    for slot in topology.slots:
        count = template.counts.get(slot.name, 0)
        if count == slot.hi:
            notes.append(f"slot {slot.name}: {counted(count, 'instance')}, at its upper bound")
        elif count == slot.lo:
            notes.append(f"slot {slot.name}: {counted(count, 'instance')}, at its lower bound")
        role = program.roles[slot.role]
        caps = sorted({seat.cap for seat in template.binding if seat.slot == slot.name and seat.cap is not None})
        if caps and role.min_output is not None:  # chosen by the binder (optimize/caps.py)
            where = "at the top of" if caps[-1] == role.max_output else "in"
            notes.append(f"slot {slot.name}: output cap {', '.join(map(str, caps))}, {where} {role.min_output}..{role.max_output}")
    seats = len(template.binding)
    if seats == declared.min_agents:
        notes.append(f"min_agents: {counted(seats, 'seat')}, exactly the minimum")
    chosen = {(seat.slot, seat.instance): program.models[seat.model] for seat in template.binding}
    for i, require in enumerate(topology.requires):
        row = linear_row(require)
        total = sum(
            coef * sum(1 for (s, _), m in chosen.items() if s == slot and (tier is None or m.tier == tier))
            for slot, tier, coef in row.terms
        )
        state = "tight" if total == row.rhs else "slack"
        # Named as a plan names its sources (std/NAME.bam, else relative), wherever the program was read from.
        where = f"{source_label(require.span.file, os.getcwd())}:{require.span.line}:{require.span.col}"
        notes.append(f"require #{i + 1} ({where}): {state}")
    return notes


def infeasible_text(system: SystemPlan, template: TemplatePlan) -> str:
    """Why an infeasible template has no binding, from what its plan records."""
    rows = ", ".join(template.binding_rows) or "budget"
    if template.binding_rows == (DEADLINE_ROW,) and template.worst_case_latency_s is not None:
        # Bound within the budget, and its binding's critical path passes the deadline.
        return (
            f"template {template.name} misses the deadline: its binding may take {template.worst_case_latency_s:.3f} s, "
            f"above the deadline of {system.deadline_s:g} s (within the budget of {system.budget:g} µ$)"
        )
    if DEADLINE_ROW in template.binding_rows and template.cheapest_cost is None:
        # The binder found none within the deadline at any budget: there is no binding to time.
        return (
            f"template {template.name} misses the deadline: every binding its rules allow may take longer than "
            f"{system.deadline_s:g} s; binding rows: {rows}"
        )
    needs = f"{template.cheapest_cost:.1f} µ$" if template.cheapest_cost is not None else "no budget (rules conflict)"
    return f"template {template.name} has no binding within {system.budget:g} µ$: needs {needs}; binding rows: {rows}"


def explain_text(plan: Plan, system: SystemPlan, program, template_name: str | None,
                 paths: dict[str, BindPath] | None = None) -> str:
    """The explanation of a template (default: the selected one); `paths`, by template name, are the
    binder's paths when the plan was compiled now (a plan file does not record them)."""
    template = pick_template(system, template_name)
    path = (paths or {}).get(template.name)
    if not template.feasible:
        return "\n".join([infeasible_text(system, template), *binder_lines(path)])
    prices = plan.prices
    call_rows = []
    for node in template.nodes:
        price = prices[node.model]
        # A tool-using call's every round: the prompts of all, and the output cap once each.
        tokens_in = node.input_tokens if node.rounds is None else sum(node.round_input_tokens)
        tokens_out = node.output_tokens if node.rounds is None else node.output_tokens * (node.rounds + 1)
        call_rows.append(
            [
                node.id,
                f"{node.role}@{node.model}",
                f"{tokens_in} x {price['input']:g} = {node.input_cost:.1f}",
                f"{tokens_out} x {price['output']:g} = {node.output_cost:.1f}",
                f"{node.cost:.1f}",
                node.condition or "always",
            ]
        )
    lines = [
        f"system {system.name}, template {template.name}: worst case {template.worst_case_cost:.1f} µ$ "
        f"of a {system.budget:g} µ$ budget" + _latency_note(system, template),
        *objective_lines(program, system, template),
        "",
        "Calls (tokens x USD/Mtok = µ$):",
        text_table(["call", "role@model", "input", "output", "bound µ$", "runs when"], call_rows),
        *route_lines(template),
        *tool_lines(template),
        *latency_lines(template),
        *flow_lines(program, template),
        *length_lines(program, system, template),
        "",
        "Seats (what each alternative model would do to the bound):",
    ]
    by_seat: dict[str, list[str]] = {}
    for finding in seat_alternatives(program, system, template):
        by_seat.setdefault(f"{finding['seat']} = {finding['model']}", []).append(_reason(finding))
    for seat, reasons in by_seat.items():
        lines.append(f"  {seat}")
        lines.extend(f"    {reason}" for reason in reasons)
    lines += fallback_lines(program, template)
    lines += ["", "Rules:"] + [f"  {note}" for note in tight_rows(program, system, template)]
    lines += binder_lines(path)
    return "\n".join(lines)


def length_lines(program, system: SystemPlan, template: TemplatePlan) -> list[str]:
    """The bound at other task lengths (docs/language.md, "Task length"), and the template's binding in each
    length class: the bound is taken at each task's own length at run time."""
    from bamasc.plan.lengths import LengthFit

    fit = LengthFit(program, system)
    lengths = sorted({1, system.task_tokens // 2 or 1, system.task_tokens, 2 * system.task_tokens,
                      *(c.task_tokens for c in system.length_classes or ())})
    shown = ", ".join(f"{tokens}: {fit.bound_at(template, tokens):.1f}" for tokens in lengths)
    lines = ["", f"Bound at a task's length (tokens: µ$; a task's bound is taken at its own length): {shown}"]
    for length in system.length_classes or ():
        bound = next((t for t in length.templates if t.name == template.name), None)
        if bound is None or not bound.feasible:
            lines.append(f"  tasks up to {length.task_tokens} tokens: no binding within {system.budget:g} µ$")
        else:
            lines.append(f"  tasks up to {length.task_tokens} tokens: worst case {bound.worst_case_cost:.1f} µ$, "
                         f"{binding_text(bound)}")
    return lines


def binder_lines(path: BindPath | None) -> list[str]:
    """How the binder found the binding (optimize/strategy.py): its path in short, then a line on each step."""
    if path is None:
        return []
    first, *rest = path.lines()
    return ["", f"Binder path: {first}", *(f"  {line}" for line in rest)]


def _latency_note(system: SystemPlan, template: TemplatePlan) -> str:
    if template.worst_case_latency_s is None:
        return ""
    deadline = f" of a {system.deadline_s:g} s deadline" if system.deadline_s is not None else ""
    return f", {template.worst_case_latency_s:.3f} s{deadline}"


def route_lines(template: TemplatePlan) -> list[str]:
    """Each route's branches, and each dynamic plan step's seats: exactly one runs, so the bound
    counts the costliest (marked)."""
    lines = []
    for decision in template.decisions:
        fallback = f"'{decision.fallback}'" if decision.fallback else "none: a reply naming no branch fails the task"
        title = f"Route {decision.id} (one branch runs; the bound takes the costliest; fallback {fallback}):"
        step = seat_step(decision.id)
        if step:
            title = (
                f"Step {step[1] + 1} of the dynamic plan {step[0]} (its card names one seat; each seat's bound counts"
                " what later steps pay to read it, their seats as in the costliest cards, which the bound takes):"
            )
        lines += ["", title]
        rows = [
            [("* " if b.name == decision.worst_case_branch else "  ") + b.name, str(len(b.nodes)), f"{b.cost:.1f}",
             "-" if b.latency_s is None else f"{b.latency_s:.3f}"]
            for b in decision.branches
        ]
        lines.append(text_table(["seat" if step else "branch", "calls", "bound µ$", "worst case s"], rows))
    return lines


def fallback_lines(program, template: TemplatePlan) -> list[str]:
    """Each seat whose model names fallbacks: them in the order they are tried, and how many of the seat's calls
    each could take at the plan's prompt bounds (runtime/fallbacks.py: a fallback takes a call only where its
    worst case fits the call's reservation, which at run time is the seat model's last hold)."""
    lines = []
    chosen = seat_models(program.models, template.binding)
    for seat in template.binding:
        model = chosen[(seat.slot, seat.instance)]
        if not model.fallbacks:
            continue
        if not lines:
            lines = ["", "Fallbacks (tried in order when a seat's provider keeps failing, each only for a call whose "
                         "reservation its worst case fits):"]
        nodes = [n for n in template.nodes if (n.slot, n.instance) == (seat.slot, seat.instance)]
        taken = []
        for name in model.fallbacks:
            fits = sum(_fallback_fits(node, model, program.models[name]) for node in nodes)
            taken.append(f"{name} (fits {fits} of {counted(len(nodes), 'call')})")
        lines.append(f"  {seat.slot}[{seat.instance}] = {model.name}: then {', then '.join(taken)}")
    return lines


def _fallback_fits(node, seat_model_, fallback) -> bool:
    """Whether every model call of `node` costs no more on `fallback` than on the seat's model, at the plan's prompt
    bounds and the call's output cap (the fallback's own, where smaller)."""
    prompts = node.round_input_tokens if node.rounds is not None else (node.input_tokens,)
    cap = node.output_tokens if fallback.max_output is None else min(node.output_tokens, fallback.max_output)
    return all(sum(fallback.prices().worst_cost(tokens, cap))
               <= sum(seat_model_.prices().worst_cost(tokens, node.output_tokens)) * (1 + 1e-9) + 1e-9
               for tokens in prompts)


def tool_lines(template: TemplatePlan) -> list[str]:
    """Each tool-using call's loop (combinators/tools.py): its rounds, each round's prompt bound, its tool calls."""
    lines = []
    for node in template.nodes:
        if node.rounds is None:
            continue
        if not lines:
            lines = ["", "Tool loops (a round re-sends the prompt and every earlier round; the last has no tools):"]
        lines.append(f"  {node.id}: up to {node.rounds} rounds of {counted(node.tool_calls, 'tool call')} "
                     f"({', '.join(node.tools)}), then a final round; prompts of rounds 0..{node.rounds}: "
                     f"{', '.join(str(tokens) for tokens in node.round_input_tokens)} tokens; "
                     f"tool calls {node.tool_cost:.1f} µ$")
    return lines


def latency_lines(template: TemplatePlan) -> list[str]:
    """The critical path: the slowest call of each step, with its worst case; nothing when the bound is unknown."""
    if template.worst_case_latency_s is None:
        return []
    bound = critical_path(template.graph())
    seconds = {node.id: node.latency_s for node in template.nodes}
    steps = {node.id: node.step for node in template.nodes}
    rows = [[str(steps[node]), node, f"{seconds[node]:.3f}"] for node in bound.path]
    return [
        "",
        f"Critical path (the slowest call of each step; calls of one step run together): {bound.seconds:.3f} s",
        text_table(["step", "call", "worst case s"], rows),
    ]


def flow_lines(program, template: TemplatePlan) -> list[str]:
    """What each flow statement's combinator adds (a conversation: its turns and where it may stop)."""
    topology = program.topologies.get(template.name)
    lines = []
    for index, statement in enumerate(topology.flow if topology else ()):
        lines += combinator_of(statement.expr).explain(statement.expr, index, template.nodes)
    return lines
