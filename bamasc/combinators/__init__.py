"""The combinators of the flow language, one class each (combinators/base.py says what one owns).

Importing the package registers every built-in combinator. The stages ask the combinators,
never a combinator's AST class: the checks (`check`, `sites`, `lint`), the
flow walker that the unroller and the interpreter drive (`walk`, `decisions`),
the binder (`padded`), `explain` and the editor's index (`occurrences`).
"""

from __future__ import annotations

from bamasc.combinators.base import (
    CallSite, Combinator, FlowCheck, Name, UnknownForm, answer, register, site, combinator_of, unregister,
)
from bamasc.combinators import calls, chain, converse, dynamic, parallel, plan, reference, refine, route, vote  # noqa: F401  (registers them)

__all__ = [
    "CallSite", "Combinator", "FlowCheck", "Name", "UnknownForm", "answer", "register", "site", "combinator_of", "unregister",
]
