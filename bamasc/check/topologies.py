"""Reads and checks `topology` declarations: slot ranges, require rows, and the flow."""

from __future__ import annotations

from bamasc.check.attributes import LIMITS_HINT, did_you_mean, out_of_range, shown
from bamasc.check.linear import NotLinear, linear_row
from bamasc.combinators import FlowCheck, combinator_of
from bamasc.program import Slot, Topology
from bamasc.diagnostics import Diagnostic, Note, error, warning
from bamasc.limits import MAX_REQUIRE_CONSTANT, MAX_TIER, written
from bamasc.syntax import ast

# Names every flow may read without defining them.
FLOW_INPUTS = ("task",)
# Upper limits that keep every unrolled call graph small enough to bound and to bind (and
# limits.MAX_STEPS, MAX_ROUNDS, MAX_TURNS, which the combinators check).
MAX_INSTANCES = 64


def read_topology(decl: ast.TopologyDecl, diagnostics: list[Diagnostic]) -> Topology:
    slots = _slots(decl, diagnostics)
    names = {slot.name for slot in slots}
    for require in decl.requires:
        _check_require(require, names, diagnostics)
    flow: tuple = ()
    if not decl.flows:
        diagnostics.append(
            error("BAM308", f"topology '{decl.name}' has no flow", decl.name_span, hint="add `flow { answer ... }`")
        )
    else:
        for extra in decl.flows[1:]:
            diagnostics.append(error("BAM307", f"topology '{decl.name}' has more than one flow", extra.span))
        flow = decl.flows[0].statements
        _check_flow(decl, slots, flow, diagnostics)
    return Topology(decl.name, slots, decl.requires, flow, decl.name_span, decl.span.file)


def _slots(decl: ast.TopologyDecl, diagnostics) -> tuple[Slot, ...]:
    seen: dict[str, ast.SlotDecl] = {}
    slots = []
    for slot in decl.slots:
        if slot.name in seen:
            diagnostics.append(
                error(
                    "BAM101",
                    f"slot '{slot.name}' is declared twice in topology '{decl.name}'",
                    slot.name_span,
                    Note("first declared here", seen[slot.name].name_span),
                )
            )
            continue
        seen[slot.name] = slot
        bounds = []
        for bound in (slot.lo, slot.hi):
            if not bound.is_integer or bound.value < 0:
                diagnostics.append(
                    error("BAM207", f"slot bounds are whole numbers of instances, not {bound.text}", bound.span)
                )
                bounds.append(None)
            elif bound.value > MAX_INSTANCES:
                diagnostics.append(
                    error("BAM207", f"a slot may have at most {MAX_INSTANCES} instances, not {bound.text}", bound.span)
                )
                bounds.append(None)
            else:
                bounds.append(int(bound.value))
        lo, hi = bounds
        if lo is not None and hi is not None:
            if lo > hi:
                diagnostics.append(
                    error(
                        "BAM301",
                        f"slot '{slot.name}' has range [{lo}..{hi}]: the lower bound is above the upper bound",
                        slot.lo.span.to(slot.hi.span),
                        hint=f"write [{hi}..{lo}]",
                    )
                )
            elif hi == 0:
                diagnostics.append(
                    error(
                        "BAM302",
                        f"slot '{slot.name}' has range [{lo}..0]: it can never have an instance",
                        slot.hi.span,
                        hint="remove the slot or allow at least one instance",
                    )
                )
        slots.append(Slot(slot.name, slot.role, lo or 0, hi or 0, slot.name_span, slot.role_span))
    return tuple(slots)


def _check_require(require: ast.RequireDecl, slot_names: set[str], diagnostics) -> None:
    bad_number = False
    for count in _counts(require.left) + _counts(require.right):
        if count.slot not in slot_names:
            diagnostics.append(_unknown_slot(count.slot, count.slot_span, slot_names))
        tier = count.tier
        if tier is not None and (not tier.is_integer or tier.value < 1):
            diagnostics.append(
                error(
                    "BAM204",
                    f"tier must be a positive whole number (1 is the strongest), not {shown(tier.text)}",
                    tier.span,
                )
            )
            bad_number = True
        elif tier is not None and tier.value > MAX_TIER:
            diagnostics.append(out_of_range("tier", tier, MAX_TIER))
            bad_number = True
    for constant in _constants(require.left) + _constants(require.right):
        if abs(constant.value) > MAX_REQUIRE_CONSTANT:
            diagnostics.append(_constant_too_large(shown(constant.text), constant.span))
            bad_number = True
    if bad_number:
        return
    try:
        row = linear_row(require)
    except NotLinear as problem:
        diagnostics.append(
            error(
                "BAM303",
                f"require row is not linear in slot counts: {problem.reason}",
                problem.node.span,
                hint="require rows take count(slot), count(slot, tier = k), whole numbers, '+', '-' and constant factors",
            )
        )
        return
    # Each constant may be small and their products still large: `1000 * 1000 * count(a)`.
    largest = max([abs(row.rhs), *(abs(coef) for _, _, coef in row.terms)])
    if largest > MAX_REQUIRE_CONSTANT:
        diagnostics.append(_constant_too_large(f"{largest} once multiplied out", require.span))


def _constant_too_large(text: str, span) -> Diagnostic:
    return error(
        "BAM210",
        f"a require row's constant is {text}, beyond the limit of ±{written(MAX_REQUIRE_CONSTANT)}",
        span,
        hint=LIMITS_HINT,
    )


def _counts(node) -> list[ast.Count]:
    if isinstance(node, ast.Count):
        return [node]
    if isinstance(node, ast.BinaryOp):
        return _counts(node.left) + _counts(node.right)
    return []


def _constants(node) -> list[ast.Number]:
    if isinstance(node, ast.Const):
        return [node.value]
    if isinstance(node, ast.BinaryOp):
        return _constants(node.left) + _constants(node.right)
    return []


def _unknown_slot(name: str, span, slot_names) -> Diagnostic:
    return error("BAM105", f"unknown slot '{name}'", span, hint=did_you_mean(name, slot_names))


# ---------------------------------------------------------------- flow


def _check_flow(decl: ast.TopologyDecl, slots, statements, diagnostics) -> None:
    slot_by_name = {slot.name: slot for slot in slots}
    defined: dict[str, str] = {name: "input" for name in FLOW_INPUTS}  # name -> kind of value
    used_slots: set[str] = set()
    unknown_slots: list[str] = []
    answers = [s for s in statements if isinstance(s, ast.AnswerStmt)]

    def slot_ref(name: str, span) -> None:
        if name not in slot_by_name:
            diagnostics.append(_unknown_slot(name, span, slot_by_name))
            unknown_slots.append(name)
        else:
            used_slots.add(name)

    def value_ref(ident_name: str, span) -> str | None:
        if ident_name not in defined:
            hint = did_you_mean(ident_name, defined)
            if ident_name in slot_by_name:
                hint = f"'{ident_name}' is a slot; call it, as in `{ident_name}(task)`"
            diagnostics.append(
                error("BAM305", f"'{ident_name}' is not defined in this flow", span, hint=hint)
            )
            return None
        return defined[ident_name]

    def call(node: ast.SlotCall) -> None:
        slot_ref(node.slot, node.slot_span)
        for arg in node.args:
            value_ref(arg.name, arg.span)

    flow = _FlowCheck(diagnostics, call, slot_ref, value_ref, slot_by_name.get)
    for statement in statements:
        kind = flow.expression(statement.expr)
        if isinstance(statement, ast.Bind):
            if statement.name in defined:
                diagnostics.append(
                    error("BAM101", f"'{statement.name}' is defined twice in this flow", statement.name_span)
                )
            defined[statement.name] = kind

    if len(answers) != 1:
        where = answers[1].span if answers else decl.flows[0].span
        message = "flow has more than one 'answer'" if answers else f"flow of topology '{decl.name}' has no 'answer'"
        hint = "keep one 'answer' and bind the other value to a name" if answers else "end the flow with `answer <value>`"
        diagnostics.append(error("BAM306", message, where, hint=hint))
    # A misspelt slot in the flow already has its error; the slot it meant is not unused.
    for slot in slots if not unknown_slots else ():
        if slot.name not in used_slots:
            diagnostics.append(
                warning(
                    "BAM304",
                    f"slot '{slot.name}' is never called by the flow; its seats would cost nothing and do nothing",
                    slot.span,
                )
            )


class _FlowCheck(FlowCheck):
    """What a combinator may ask while the flow is checked (combinators.FlowCheck)."""

    def __init__(self, diagnostics, call, slot_ref, value_ref, slot):
        self.diagnostics = diagnostics
        self.call, self.slot_ref, self.value_ref, self.slot = call, slot_ref, value_ref, slot

    def expression(self, node) -> str:
        return combinator_of(node).check(node, self)
