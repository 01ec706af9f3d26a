"""Reads and checks `system` declarations: pool, templates, budget and run-time choices."""

from __future__ import annotations

from bamasc.check.attributes import LIMITS_HINT, Attributes, declares, out_of_range, shown
from bamasc.check.latency import read_deadline
from bamasc.program import (
    ANSWER_KINDS,
    BUDGET_CHECKS,
    DEFAULT_MIN_AGENTS,
    DEFAULT_REWARD,
    DEFAULT_TASK_TOKENS,
    OBJECTIVES,
    ON_EXHAUSTED,
    RewardConstants,
    Selection,
    System,
)
from bamasc.diagnostics import Diagnostic, error
from bamasc.limits import MAX_BUDGET, MAX_LENGTH_CLASSES, MAX_MIN_AGENTS, MAX_REWARD, written
from bamasc.records import as_dict
from bamasc.source import Span
from bamasc.syntax import ast

SYSTEM_ATTRIBUTES = declares("a system", (
    "models", "topologies", "budget", "budgets", "task_tokens",
    "min_agents", "answer", "select", "on_exhausted", "reward", "deadline", "budget_check",
    "objective",
))
REWARD_ATTRIBUTES = ("success", "failure", "overflow", "efficiency", "infeasible", "task_weight", "budget_weight")
REWARD_WEIGHTS = ("task_weight", "budget_weight")


def read_system(decl: ast.SystemDecl, diagnostics: list[Diagnostic]) -> System:
    attrs = Attributes(f"system '{decl.name}'", decl.attrs, SYSTEM_ATTRIBUTES, diagnostics, decl.name_span)
    models = attrs.names("models")
    topologies = attrs.names("topologies")
    # A list whose items all had the wrong type already has its error.
    if not models and _lists_nothing(attrs, "models"):
        diagnostics.append(
            error("BAM401", f"system '{decl.name}' has no models", attrs.span_of("models"), hint="add `models = [a, b]`")
        )
    if not topologies and _lists_nothing(attrs, "topologies"):
        diagnostics.append(
            error(
                "BAM402",
                f"system '{decl.name}' has no topologies",
                attrs.span_of("topologies"),
                hint="add `topologies = [linear, star]` (import them with `import \"std/linear\"`)",
            )
        )
    budget_value = attrs.value("budget", "budget = 1625")
    budget = _money("budget", budget_value, diagnostics) if budget_value is not None else None
    listed = _budgets(attrs, diagnostics)
    classes = _length_classes(attrs, diagnostics)
    return System(
        name=decl.name,
        models=tuple(name for name, _ in models),
        topologies=tuple(name for name, _ in topologies),
        budget=budget,
        budgets=tuple(amount for amount, _ in listed),
        task_tokens=classes[0] if classes else DEFAULT_TASK_TOKENS,
        length_classes=classes if len(classes) > 1 else (),
        min_agents=_min_agents(attrs, diagnostics),
        answer=attrs.choice("answer", ANSWER_KINDS, "text"),
        select=_selection(attrs, diagnostics),
        on_exhausted=attrs.choice("on_exhausted", ON_EXHAUSTED, "best_so_far"),
        span=decl.name_span,
        spans=attrs.spans(),
        item_spans={
            "models": tuple(s for _, s in models),
            "topologies": tuple(s for _, s in topologies),
            "budgets": tuple(s for _, s in listed),
        },
        reward=_reward(attrs, decl.name, diagnostics),
        deadline=read_deadline(attrs, diagnostics),
        budget_check=attrs.choice("budget_check", BUDGET_CHECKS, "before"),
        objective=attrs.choice("objective", OBJECTIVES, "tiers"),
    )


def _lists_nothing(attrs: Attributes, name: str) -> bool:
    item = attrs.items.get(name)
    return item is None or (isinstance(item, ast.Attr) and isinstance(item.value, ast.ListValue) and not item.value.items)


def _money(name: str, value, diagnostics) -> float | None:
    """µ$ from `1625`, `1625 µ$` or `$0.001625`; None (and a diagnostic) otherwise."""
    if isinstance(value, ast.Money):
        amount = value.micro_usd
    elif isinstance(value, ast.Number):
        if value.unit not in (None, "µ$"):
            diagnostics.append(
                error(
                    "BAM208",
                    f"{name} is an amount of money (µ$, or $ written before the number), not a rate in {value.unit}",
                    value.span,
                    hint=f"write `{value.text}` (µ$) or `${value.value / 1_000_000:g}`",
                )
            )
            return None
        amount = value.value
    else:
        diagnostics.append(error("BAM108", f"{name} must be an amount of money", value.span))
        return None
    if amount <= 0:
        diagnostics.append(
            error("BAM403", f"{name} must be above zero, not {amount:g} µ$", value.span, hint="budgets are µ$ per task")
        )
        return None
    if amount > MAX_BUDGET:
        diagnostics.append(
            error(
                "BAM210",
                f"{name} is {shown(value.text)}{'' if isinstance(value, ast.Money) else ' µ$'}, "
                f"above the limit of {written(MAX_BUDGET)} µ$ (${MAX_BUDGET / 1_000_000:,.0f}) per task",
                value.span,
                hint=LIMITS_HINT,
            )
        )
        return None
    return amount


def _budgets(attrs: Attributes, diagnostics) -> tuple[tuple[float, Span], ...]:
    """Each valid amount of the `budgets` list (µ$) with the span of its item."""
    value = attrs.value("budgets")
    if value is None:
        return ()
    if not isinstance(value, ast.ListValue) or not value.items:
        diagnostics.append(error("BAM108", "budgets must be a list of amounts, such as [500, 1000]", value.span))
        return ()
    amounts = ((_money("each budget", item, diagnostics), item.span) for item in value.items)
    return tuple((amount, span) for amount, span in amounts if amount is not None)


def _length_classes(attrs: Attributes, diagnostics) -> tuple[int, ...]:
    """`task_tokens`: one length or a list of length classes, ascending; () when absent or invalid."""
    classes = attrs.token_counts("task_tokens") or ()
    if len(classes) > MAX_LENGTH_CLASSES:
        diagnostics.append(error("BAM210", f"task_tokens lists {len(classes)} length classes, above the limit of "
                                 f"{MAX_LENGTH_CLASSES} (each binds every template once more)",
                                 attrs.span_of("task_tokens"), hint=LIMITS_HINT))
        return classes[:MAX_LENGTH_CLASSES]
    return classes


def _min_agents(attrs: Attributes, diagnostics) -> int:
    number = attrs.number("min_agents")
    if number is None:
        return DEFAULT_MIN_AGENTS
    if number.unit or not number.is_integer or number.value < 0:
        diagnostics.append(
            error("BAM207", f"min_agents must be a whole number of seats, not {shown(number.text)}", number.span)
        )
        return DEFAULT_MIN_AGENTS
    if number.value > MAX_MIN_AGENTS:
        diagnostics.append(out_of_range("min_agents", number, MAX_MIN_AGENTS, " seats"))
        return DEFAULT_MIN_AGENTS
    return int(number.value)


def _reward(attrs: Attributes, system: str, diagnostics) -> RewardConstants:
    """The optional `reward { success = 1  failure = -1  overflow = 2  efficiency = 0.5 ... }` block: plain numbers."""
    block = attrs.block("reward")
    if block is None:
        return DEFAULT_REWARD
    fields = Attributes(f"reward of system '{system}'", block.attrs, REWARD_ATTRIBUTES, diagnostics, block.name_span)
    values = {}
    for name in REWARD_ATTRIBUTES:
        number = fields.number(name)
        if number is None:
            continue
        if number.unit:
            diagnostics.append(
                error("BAM208", f"reward '{name}' is a plain number and takes no unit, not {number.unit}", number.span)
            )
            continue
        if abs(number.value) > MAX_REWARD:
            diagnostics.append(
                error(
                    "BAM210",
                    f"reward '{name}' is {shown(number.text)}, beyond the limit of ±{written(MAX_REWARD)}",
                    number.span,
                    hint=LIMITS_HINT,
                )
            )
            continue
        if name in REWARD_WEIGHTS and number.value < 0:
            diagnostics.append(
                error("BAM224", f"reward '{name}' is {shown(number.text)}: a weight multiplies its term and may not "
                      "be negative", number.span, hint=f"write {name} = 0 to leave the term out")
            )
            continue
        values[name] = float(number.value)
    return RewardConstants(**{**as_dict(DEFAULT_REWARD), **values})


def _selection(attrs: Attributes, diagnostics) -> Selection:
    value = attrs.value("select")
    if value is None:
        return Selection("strongest")
    if isinstance(value, ast.Ident) and value.name in ("strongest", "cheapest"):
        return Selection(value.name)
    if isinstance(value, ast.Call) and value.func == "policy":
        if len(value.args) == 1 and isinstance(value.args[0], ast.String):
            return Selection("policy", value.args[0].value)
        diagnostics.append(error("BAM108", 'policy takes one string: the checkpoint path, as in policy("p.msgpack")', value.span))
        return Selection("strongest")
    diagnostics.append(
        error(
            "BAM110",
            "select must be strongest, cheapest or policy(\"checkpoint.msgpack\")",
            value.span,
        )
    )
    return Selection("strongest")
