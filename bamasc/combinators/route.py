"""`route R(args) { name: flow ... otherwise: flow }`: the router once, then the branch it names.

The router (instance 0) is called once; its output names the branch that runs
(matched as a word, any case; the first written wins), `otherwise` when it names
none. The unroller walks every branch, each under its own alternative, and the
value is one of the branches' values.
"""

from __future__ import annotations

from bamasc.combinators.requests import EVERY, Decision, FlowValue, Walk
from bamasc.combinators.base import Combinator, call_names, register, combinator_of
from bamasc.combinators.route_names import check_route_names
from bamasc.diagnostics import Diagnostic, Note, error, warning
from bamasc.syntax import ast


def _branch(decision: Decision, run):
    """"branch": which of the branches `among` the router's output `of` names."""
    return run.branch(decision)


class Route(Combinator):
    node = ast.Route
    name = "route"
    decisions = {"branch": _branch}

    def check(self, node: ast.Route, flow) -> str:
        return check_route(node, flow, flow.diagnostics)

    def walk(self, walker, node: ast.Route) -> Walk:
        """Without a router instance (a count the binder tries when it relaxes rules) it calls nothing."""
        if not walker.count(node.call.slot):
            return FlowValue()
        router = walker.call(node.call.slot, 0, "route", walker.args(node.call), None, "route")
        yield router
        fallback = node.fallback.name if node.fallback else None
        names = tuple(branch.name for branch in node.branches)
        chosen = yield Decision("branch", of=router.id, among=names, fallback=fallback, within=walker.alternative)
        values, options = [], []
        for branch in node.branches:
            if chosen is not EVERY and chosen != branch.name:
                continue
            with walker.within(router.id, branch.name):
                values.append((yield from walker.expression(branch.expr)))
                options.append((walker.alternative, values[-1]))
        if chosen is not EVERY:
            return values[0] if values else FlowValue()
        nodes = tuple(dict.fromkeys(n for value in values for n in value.nodes))
        return FlowValue(
            task=any(v.task for v in values), nodes=nodes, one_of=True, many=any(v.many for v in values),
            options=tuple(options),
        )

    def calls(self, node: ast.Route) -> list[ast.SlotCall]:
        return [node.call, *(call for branch in node.branches for call in combinator_of(branch.expr).calls(branch.expr))]

    def sites(self, node: ast.Route, optional):
        return [found for part in self.parts(node) for found in combinator_of(part).sites(part, optional)]

    def parts(self, node: ast.Route) -> list:
        """The router's call and the parts of each branch."""
        return [node.call, *(part for branch in node.branches for part in combinator_of(branch.expr).parts(branch.expr))]

    def lint(self, node: ast.Route, roles: dict) -> list[Diagnostic]:
        """Branches the router will never name and values of its output enum no branch takes
        (combinators/route_names.py); then the routes inside the branches."""
        found = check_route_names(node, roles.get(node.call.slot))
        for branch in node.branches:
            found += combinator_of(branch.expr).lint(branch.expr, roles)
        return found

    def occurrences(self, node: ast.Route):
        return [*call_names(node.call), *(name for branch in node.branches for name in combinator_of(branch.expr).occurrences(branch.expr))]


def check_route(node: ast.Route, flow, diagnostics: list[Diagnostic]) -> str:
    """The router makes one call; branch names once each (without regard to case); one fallback,
    else a warning. The route's kind is "list" when every branch is one."""
    flow.call(node.call)
    router = flow.slot(node.call.slot)
    if router is not None and (router.lo < 1 or router.hi > 1):
        diagnostics.append(
            error(
                "BAM307",
                f"the router '{node.call.slot}' of a route makes exactly one call, but its slot has range [{router.lo}..{router.hi}]",
                node.call.span,
                hint=f"give slot '{node.call.slot}' the range [1..1]",
            )
        )
    seen: dict[str, ast.Branch] = {}
    fallbacks = [branch for branch in node.branches if branch.fallback]
    for extra in fallbacks[1:]:
        diagnostics.append(
            error("BAM101", "a route has more than one 'otherwise' branch", extra.name_span, Note("the first", fallbacks[0].name_span))
        )
    for branch in node.branches:
        if branch.fallback:
            continue
        first = seen.get(branch.name.lower())
        if first is not None and first.name == branch.name:
            diagnostics.append(
                error("BAM101", f"branch '{branch.name}' is declared twice in this route", branch.name_span,
                      Note("first declared here", first.name_span))
            )
        elif first is not None:
            diagnostics.append(
                warning(
                    "BAM309",
                    f"branch '{branch.name}' can never run: the router's output is matched without regard to case, "
                    f"and '{first.name}' comes first",
                    branch.name_span,
                    Note("this branch takes every output naming either", first.name_span),
                    hint=f"rename '{branch.name}' or merge it into '{first.name}'",
                )
            )
        else:
            seen[branch.name.lower()] = branch
    if not fallbacks:
        diagnostics.append(
            warning(
                "BAM310",
                f"route on '{node.call.slot}' has no 'otherwise' branch: a router output that names no branch fails the task",
                node.call.span,
                hint="add `otherwise: <flow>` as the last branch",
            )
        )
    kinds = [flow.expression(branch.expr) for branch in node.branches]
    return "list" if kinds and all(kind == "list" for kind in kinds) else "single"


register(Route())
