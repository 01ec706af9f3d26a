"""Frozen AST records for `.bam` modules; every node carries its span."""

from __future__ import annotations

from bamasc.records import record
from bamasc.source import Span

# ---------------------------------------------------------------- values


@record
class Number:
    """A numeric literal, with the unit written after it (`µ$`, `$/Mtok`, `tokens`, `s`) if any."""

    value: float
    text: str
    unit: str | None
    span: Span

    @property
    def is_integer(self) -> bool:
        return float(self.value).is_integer() and "." not in self.text and "e" not in self.text.lower()


@record
class Money:
    """A dollar amount written `$0.0016`; `micro_usd` is the value in µ$."""

    dollars: float
    text: str
    span: Span

    @property
    def micro_usd(self) -> float:
        return self.dollars * 1_000_000


@record
class String:
    """A string literal, unescaped (and dedented for triple-quoted strings)."""

    value: str
    span: Span
    triple: bool
    raw: str  # the literal as written, quotes included, for locating text inside it


@record
class Ident:
    name: str  # `server.tool` (an MCP server's tool, in a role's `tools`) is one name with a dot
    span: Span


@record
class ListValue:
    items: tuple[Value, ...]
    span: Span


@record
class RangeValue:
    """`128..384`: a range the compiler picks a value in (a role's `max_output`)."""
    lo: Number
    hi: Number
    span: Span


@record
class Call:
    """`env("VAR")`, `policy("path")`: a name applied to literal arguments."""

    func: str
    args: tuple[Value, ...]
    span: Span
    func_span: Span


Value = Number | Money | String | Ident | ListValue | RangeValue | Call


# ---------------------------------------------------------------- attributes


@record
class Attr:
    """`name = value` inside a model, role, system or nested block."""

    name: str
    value: Value
    span: Span
    name_span: Span


@record
class Block:
    """`name { ... }`: a nested attribute block, such as `price { input = ... }`."""

    name: str
    attrs: tuple[Attr | Block, ...]
    span: Span
    name_span: Span


# ---------------------------------------------------------------- declarations


@record
class Import:
    path: str
    span: Span


@record
class AttributedDecl:
    """A declaration written `WORD NAME { attributes }`; each kind is a subclass, told apart by its exact class."""

    name: str
    attrs: tuple[Attr | Block, ...]
    span: Span
    name_span: Span


class ModelDecl(AttributedDecl):
    __slots__ = ()


class RoleDecl(AttributedDecl):
    __slots__ = ()


class SystemDecl(AttributedDecl):
    __slots__ = ()


class ToolDecl(AttributedDecl):
    """`tool NAME { python = "module:name" ... }` or `tool NAME { mcp = "command" ... }`."""
    __slots__ = ()


class KeyDecl(AttributedDecl):
    """`key NAME { secret = env("VAR") ... }`: a client key of `bamasc proxy` and its budgets."""
    __slots__ = ()


class TeamDecl(AttributedDecl):
    """`team NAME { budgets = [...] }`: budgets that the keys naming the team share."""
    __slots__ = ()


# ---------------------------------------------------------------- topologies


@record
class SlotDecl:
    """`slot executor : Executor [1..5]`."""

    name: str
    role: str
    lo: Number
    hi: Number
    span: Span
    name_span: Span
    role_span: Span


@record
class Const:
    value: Number
    span: Span


@record
class Count:
    """`count(slot)` or `count(slot, tier = k)`."""

    slot: str
    tier: Number | None
    span: Span
    slot_span: Span


@record
class BinaryOp:
    op: str
    left: CountExpr
    right: CountExpr
    span: Span


CountExpr = Const | Count | BinaryOp


@record
class RequireDecl:
    left: CountExpr
    op: str
    right: CountExpr
    span: Span


@record
class SlotCall:
    """`executor(task, steps)`: a slot called with named inputs."""

    slot: str
    args: tuple[Ident, ...]
    span: Span
    slot_span: Span


@record
class Ref:
    name: str
    span: Span


@record
class Chain:
    call: SlotCall
    span: Span
    reference = False  # a class attribute, not a field: True on the `reference` forms (syntax/reference_forms.py)


@record
class Parallel:
    call: SlotCall
    span: Span
    reference = False  # a class attribute, not a field: True on the `reference` forms (syntax/reference_forms.py)


@record
class Vote:
    drafts: Ident
    span: Span
    reference = False  # a class attribute, not a field: True on the `reference` forms (syntax/reference_forms.py)


@record
class Refine:
    """`refine executor(task) with critic until approved`."""

    call: SlotCall
    critic: Ident
    span: Span
    reference = False


@record
class Plan:
    """`plan planner(task) using executor [review critic] max_steps n`."""

    call: SlotCall
    executor: Ident
    critic: Ident | None
    max_steps: Number
    span: Span


@record
class Dynamic:
    """`plan planner(task) using a, b max_steps n dynamic [format f]`: the planner's step cards
    name which of the `seats` slots does each step and which earlier steps it reads. A
    missing step limit is None here and an error in the checker (BAM313)."""

    call: SlotCall
    seats: tuple[Ident, ...]
    max_steps: Number | None
    formatter: Ident | None
    span: Span
    reference = False


@record
class Converse:
    """`converse coder(task), reviewer(task) until reviewer approves max_rounds 3`.

    The speakers take turns in the order written; the conversation stops when
    `approver` approves or a turn's output holds `marker` (at most one of the
    two is set), or after `max_rounds` rounds. A missing round limit is None
    here and an error in the checker, so it is reported at the conversation.
    """

    calls: tuple[SlotCall, ...]
    approver: Ident | None
    marker: String | None
    max_rounds: Number | None
    span: Span


# ---- route: a router call's output picks exactly one branch (docs/language.md, "route")


@record
class Branch:
    """`name: expr` inside a route; `fallback` for `otherwise: expr`."""

    name: str
    expr: FlowExpr
    span: Span
    name_span: Span
    fallback: bool = False


@record
class Route:
    """`route router(task) { a: ...  b: ...  otherwise: ... }`."""

    call: SlotCall
    branches: tuple[Branch, ...]
    span: Span

    @property
    def fallback(self) -> Branch | None:
        return next((branch for branch in self.branches if branch.fallback), None)


FlowExpr = SlotCall | Ref | Chain | Parallel | Vote | Refine | Plan | Dynamic | Converse | Route


@record
class Bind:
    """`name = expr` inside a flow."""

    name: str
    expr: FlowExpr
    span: Span
    name_span: Span


@record
class AnswerStmt:
    expr: FlowExpr
    span: Span


@record
class FlowDecl:
    statements: tuple[Bind | AnswerStmt, ...]
    span: Span


@record
class TopologyDecl:
    name: str
    slots: tuple[SlotDecl, ...]
    requires: tuple[RequireDecl, ...]
    flows: tuple[FlowDecl, ...]
    span: Span
    name_span: Span


Declaration = ModelDecl | RoleDecl | TopologyDecl | SystemDecl | ToolDecl | KeyDecl | TeamDecl


@record
class Module:
    """One parsed `.bam` file."""

    path: str
    imports: tuple[Import, ...]
    declarations: tuple[Declaration, ...]
