"""The AST of the `reference` combinators (combinators/reference.py): subclasses of the plain forms, so a
pass reads them as the plain ones."""

from __future__ import annotations

from bamasc.source import Span
from bamasc.syntax.ast import Chain, Dynamic, Parallel, Refine, Vote


class ReferenceChain(Chain):
    """`reference chain executor(task)`: the reference's linear template."""
    __slots__ = ()
    reference = True


class ReferenceParallel(Parallel):
    """`reference parallel executor(task)`: the reference's star, one part per call."""
    __slots__ = ()
    reference = True


class ReferenceVote(Vote):
    """`reference vote(parts)`: the reference's aggregation."""
    __slots__ = ()
    reference = True


class ReferenceRefine(Refine):
    """`reference refine executor(task) with critic until approved`: the reference's feedback loop."""
    __slots__ = ()
    reference = True


class ReferenceDynamic(Dynamic):
    """`reference plan planner(task) using executor max_steps n dynamic`: the reference's planner."""
    __slots__ = ()
    reference = True


REFERENCE_FORMS = {
    c.__base__: c for c in (ReferenceChain, ReferenceParallel, ReferenceVote, ReferenceRefine, ReferenceDynamic)
}


def as_reference(node, span: Span):
    """`node`, a combinator the grammar allows after `reference`, as its reference form spanning `span`."""
    fields = {name: getattr(node, name) for name in type(node).__record_fields__}
    return REFERENCE_FORMS[type(node)](**{**fields, "span": span})
