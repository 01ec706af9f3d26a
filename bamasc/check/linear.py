"""Linear forms of `require` rows: Σ coef·count(slot[, tier]) (<=|>=|==) constant."""

from __future__ import annotations

from bamasc.records import record
from bamasc.syntax import ast


@record
class LinearRow:
    """`terms` maps (slot, tier or None) to an integer coefficient; the row reads Σ terms `sense` rhs."""

    terms: tuple[tuple[str, int | None, int], ...]
    sense: str  # "<=", ">=" or "=="
    rhs: int


class NotLinear(Exception):
    def __init__(self, node, reason: str):
        super().__init__(reason)
        self.node = node
        self.reason = reason


def linear_row(require: ast.RequireDecl) -> LinearRow:
    """The row in normal form, all counts on the left; raises NotLinear."""
    left = _form(require.left)
    right = _form(require.right)
    terms: dict[tuple[str, int | None], int] = {}
    for key, coef in left.items():
        terms[key] = terms.get(key, 0) + coef
    for key, coef in right.items():
        terms[key] = terms.get(key, 0) - coef
    constant = -terms.pop((None, None), 0)
    sense = require.op
    # Counts are integers, so strict comparisons tighten by one.
    if sense == "<":
        sense, constant = "<=", constant - 1
    elif sense == ">":
        sense, constant = ">=", constant + 1
    ordered = tuple((slot, tier, coef) for (slot, tier), coef in sorted(terms.items(), key=str) if coef)
    return LinearRow(ordered, sense, constant)


def _form(node) -> dict[tuple[str | None, int | None], int]:
    if isinstance(node, ast.Const):
        if not node.value.is_integer:
            raise NotLinear(node, f"constants in require rows are whole numbers, not {node.value.text}")
        return {(None, None): int(node.value.value)}
    if isinstance(node, ast.Count):
        tier = None
        if node.tier is not None:
            if not node.tier.is_integer or node.tier.value < 1:
                raise NotLinear(node.tier, f"tier must be a positive whole number, not {node.tier.text}")
            tier = int(node.tier.value)
        return {(node.slot, tier): 1}
    left = _form(node.left)
    right = _form(node.right)
    if node.op in "+-":
        sign = 1 if node.op == "+" else -1
        result = dict(left)
        for key, coef in right.items():
            result[key] = result.get(key, 0) + sign * coef
        return result
    # Multiplication stays linear only when one side is a constant.
    for constant, other in ((left, right), (right, left)):
        if set(constant) <= {(None, None)}:
            factor = constant.get((None, None), 0)
            return {key: factor * coef for key, coef in other.items()}
    raise NotLinear(node, "a product of two counts is not linear")
