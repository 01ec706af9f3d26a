"""Flow forms added beside the grammar's own: a combinator that ships outside `grammars/bam.lark`.

`add_form` extends the flow expressions by one grammar rule (Lark syntax, its
`-> alias` naming the tree node), rebuilds this process's parse tables with Lark
(syntax/tables.py), and says how the rule's tree becomes an AST node (`build`,
called as a transformer method) and how `bamasc fmt` lays it out (`layout`,
given the tree's children and the layout of a nested flow expression). What
the node means is its combinator's unit (bamasc/combinators/). The shipped
grammar's own forms are built by syntax/transform.py and laid out by fmt.py.
"""

from __future__ import annotations

from typing import Callable

from bamasc.records import record
from bamasc.syntax import lalr


@record
class Form:
    alias: str  # the tree node's name, the rule's `-> alias`
    rule: str  # one alternative of `flow_expr`, in Lark syntax
    build: Callable  # (transformer, tree node, children) -> AST node
    layout: Callable  # (children, flow) -> text; flow(child) lays out a nested flow expression


_FORMS: dict[str, Form] = {}


def add_form(form: Form) -> None:
    """Parse `form.rule` as a flow expression from now on, in this process."""
    _FORMS[form.alias] = form
    _rebuild()


def remove_form(alias: str) -> None:
    """Forget the form `alias`: the parser is the shipped grammar's again (plus any other forms)."""
    _FORMS.pop(alias, None)
    _rebuild()


def form(alias: str) -> Form | None:
    """The added form whose tree nodes are named `alias`, or None."""
    return _FORMS.get(alias)


def _rebuild() -> None:
    if not _FORMS:
        lalr.use_tables(None)
        return
    from bamasc.syntax.tables import build_tables

    extra = "".join(f"\n%extend flow_expr: {f.rule} -> {f.alias}\n" for f in _FORMS.values())
    lalr.use_tables(lalr.Tables(build_tables(extra)))
