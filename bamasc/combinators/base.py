"""The base of a combinator, and the registry that finds the combinator of a flow expression.

A combinator owns what the language knows about one flow form (an AST class): what
the checks say of it, which slots it calls and with which inputs (`walk`),
which placeholders its calls fill (`sites`), which names the editor's index
shows (`occurrences`), which decisions its outputs answer (`decisions`) and
whether the binder may price it from its largest unroll (`padded`). Every
other stage asks the combinator through `combinator_of(node)`; none tests a combinator's
AST class. A new combinator is one class, registered with `register`, plus its
grammar rule (syntax/forms.py takes the rule's builder and layout).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from bamasc.diagnostics import Diagnostic
from bamasc.records import record
from bamasc.source import Span
from bamasc.syntax import ast

from bamasc.combinators.requests import Decision, Walk


@record
class CallSite:
    """One slot a flow statement calls, and the placeholder names its calls fill.

    `always` is what every call of the slot there receives; `sometimes` adds
    what only later calls receive (the `previous` of a chain's second call on).
    """

    slot: str
    call: ast.SlotCall
    span: Span
    always: frozenset[str]
    sometimes: frozenset[str]


@record
class Name:
    """A name a flow expression writes: a slot it calls or names, or a flow value it reads."""

    kind: str  # "slot" | "flow"
    name: str
    span: Span


class FlowCheck:
    """What the flow check (check/topologies.py) offers a combinator while it checks one expression
    (a protocol, written as a class: `typing` is not imported on lint's path)."""

    diagnostics: list[Diagnostic]

    def call(self, node: ast.SlotCall) -> None:
        """Check a slot call: its slot exists, its arguments are defined."""

    def slot_ref(self, name: str, span: Span) -> None:
        """Check that `name` is a slot of the topology (and count it as used)."""

    def value_ref(self, name: str, span: Span) -> str | None:
        """Check that `name` is a defined flow value; its kind ("single", "list"), None when unknown."""

    def expression(self, node) -> str:
        """Check a nested flow expression; its kind."""

    def slot(self, name: str):
        """The topology's slot `name` (with `lo`, `hi`), or None."""


class Combinator:
    """The base of every combinator: a form that calls one slot (`node.call`) and passes its arguments."""

    node: type = type(None)  # the AST class the combinator owns (its exact class)
    name = ""  # what plans and traces call it (`CallRequest.combinator`)
    padded = False  # see ir/walk.py: calls at a smaller count are the largest count's, less the missing
    decisions: dict[str, Callable] = {}  # decision kind -> answer(decision, run); run: runtime/answers.Answers

    def check(self, node, flow: FlowCheck) -> str:
        """Diagnostics for `node` (appended to `flow.diagnostics`); the kind of value it yields."""
        flow.call(node.call)
        return "single"

    def walk(self, walker, node) -> Walk:
        """The calls and decisions of `node` (ir/walk.py drives it); returns its FlowValue."""
        raise NotImplementedError

    def calls(self, node) -> list[ast.SlotCall]:
        """The slot calls written in `node` whose arguments it passes."""
        return [node.call]

    def sites(self, node, optional: frozenset[str]) -> list[CallSite]:
        """The slots `node` calls, with the placeholders each call fills (check/prompts.py).
        `optional` names the slots that may have no instance."""
        call = node.call
        return [site(call, call.slot, call.span)]

    def parts(self, node) -> list:
        """`node` as the expressions that each pass their own arguments (a route splits)."""
        return [node]

    def occurrences(self, node) -> list[Name]:
        """Every slot and flow name written in `node`, in source order (the editor's index)."""
        return call_names(node.call)

    def lint(self, node, roles: dict) -> list[Diagnostic]:
        """Checks that need the roles of the topology's slots (`roles`: slot name -> Role or None)."""
        return []

    def explain(self, node, statement: int, nodes) -> list[str]:
        """Lines `bamasc explain` adds for `node`, the flow's statement `statement`, given the
        bound template's call nodes (plan records with `id`, `slot`, `combinator`)."""
        return []


def site(call: ast.SlotCall, slot: str, span: Span, always: Iterable[str] = (), sometimes: Iterable[str] = ()) -> CallSite:
    """The call site of `slot`, reached by `call`: its arguments plus what the combinator adds."""
    args = frozenset(arg.name for arg in call.args)
    return CallSite(slot, call, span, args | set(always), args | set(always) | set(sometimes))


def call_names(call: ast.SlotCall) -> list[Name]:
    return [Name("slot", call.slot, call.slot_span), *(Name("flow", arg.name, arg.span) for arg in call.args)]


def slot_name(ident: ast.Ident) -> Name:
    return Name("slot", ident.name, ident.span)


# ---------------------------------------------------------------- the registry

_COMBINATORS: dict[type, Combinator] = {}
_DECISIONS: dict[str, Callable] = {}


class UnknownForm(TypeError):
    """A flow expression no combinator owns (a grammar rule added without its combinator)."""


def register(combinator: Combinator) -> Combinator:
    """Make `combinator` the owner of its AST class and of its decision kinds; returns it."""
    _COMBINATORS[combinator.node] = combinator
    for kind, answer in combinator.decisions.items():
        owner = _DECISIONS.get(kind)
        if owner is not None and owner is not answer:
            raise ValueError(f"decision kind {kind!r} is already answered by another combinator")
        _DECISIONS[kind] = answer
    return combinator


def unregister(combinator: Combinator) -> None:
    """Forget `combinator` (a test's toy combinator)."""
    _COMBINATORS.pop(combinator.node, None)
    for kind in combinator.decisions:
        _DECISIONS.pop(kind, None)


def combinator_of(node) -> Combinator:
    """The combinator that owns the flow expression `node`."""
    try:
        return _COMBINATORS[type(node)]
    except KeyError:
        raise UnknownForm(f"no combinator owns the flow form {type(node).__name__}") from None


def answer(decision: Decision, run):
    """The answer of a run (runtime/interpreter.TaskRun) to `decision`, by the combinator that asks it."""
    try:
        answering = _DECISIONS[decision.kind]
    except KeyError:
        raise UnknownForm(f"no combinator answers the decision {decision.kind!r}") from None
    return answering(decision, run)


# ---------------------------------------------------------------- answers shared by several combinators


def verdict(decision: Decision, run):
    """"approved": did the verdict `of` approve (runtime/extract.approved)?"""
    return run.verdict(decision.of)


def read_cards(decision: Decision, run):
    """"steps", "seat", "reads": what the plan `of` says (its step cards, a step's seat, its reads)."""
    return run.cards(decision)
