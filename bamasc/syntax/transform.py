"""Turns parse trees (from the table-driven parser or from Lark) into AST nodes."""

from __future__ import annotations

import re

from bamasc.source import Span
from bamasc.syntax import ast, forms
from bamasc.syntax.lalr import Node, Token
from bamasc.syntax.reference_forms import as_reference

_ESCAPES = {'"': '"', "\\": "\\", "n": "\n", "t": "\t", "r": "\r", "/": "/"}
_ESCAPE = re.compile(r"\\(.)", re.DOTALL)


def unescape(body: str) -> str:
    return _ESCAPE.sub(lambda m: _ESCAPES.get(m.group(1), m.group(0)), body)


def dedent_block(body: str) -> str:
    """Text of a `\"\"\"...\"\"\"` string: leading newline dropped, common indent removed."""
    if body.startswith("\r\n"):
        body = body[2:]
    elif body.startswith("\n"):
        body = body[1:]
    lines = body.split("\n")
    if lines and not lines[-1].strip():
        lines[-1] = ""
    indents = [len(line) - len(line.lstrip(" \t")) for line in lines if line.strip()]
    cut = min(indents, default=0)
    return "\n".join(line[cut:] if line.strip() else "" for line in lines)


class Transformer:
    """One method per tree node name; each returns the matching AST node."""

    def __init__(self, path: str):
        self.path = path

    # ------------------------------------------------------------ helpers

    def span(self, item) -> Span:
        if isinstance(item, Token):
            return Span(self.path, item.line, item.col, item.end_line, item.end_col)
        line, col, end_line, end_col = item.meta
        return Span(self.path, line, col, end_line, end_col)

    def visit(self, item):
        if isinstance(item, Token):
            return item
        method = getattr(self, item.data, None)
        if method is None:  # a form added beside the grammar's own
            return forms.form(item.data).build(self, item, item.children)
        return method(item, item.children)

    def module(self, tree: Node) -> ast.Module:
        imports = []
        declarations = []
        for child in tree.children:
            node = self.visit(child)
            if isinstance(node, list):
                imports.extend(node)
            else:
                declarations.append(node)
        return ast.Module(self.path, tuple(imports), tuple(declarations))

    # ------------------------------------------------------------ declarations

    def import_decl(self, node, children):
        return [ast.Import(unescape(path.children[0].value[1:-1]), self.span(path)) for path in children]

    def _attributed(self, cls, node, children):
        name, *attrs = children
        return cls(name.value, tuple(self.visit(a) for a in attrs), self.span(node), self.span(name))

    def model_decl(self, node, children):
        return self._attributed(ast.ModelDecl, node, children)

    def role_decl(self, node, children):
        return self._attributed(ast.RoleDecl, node, children)

    def system_decl(self, node, children):
        return self._attributed(ast.SystemDecl, node, children)

    def tool_decl(self, node, children):
        return self._attributed(ast.ToolDecl, node, children)

    def key_decl(self, node, children):
        return self._attributed(ast.KeyDecl, node, children)

    def team_decl(self, node, children):
        return self._attributed(ast.TeamDecl, node, children)

    def block(self, node, children):
        return self._attributed(ast.Block, node, children)

    def assign(self, node, children):
        name, value = children
        return ast.Attr(name.value, self.value(value), self.span(node), self.span(name))

    # ------------------------------------------------------------ values

    def value(self, item):
        if isinstance(item, Token):  # a bare NAME collapsed out of `?value`
            return ast.Ident(item.value, self.span(item))
        return self.visit(item)

    def number(self, node, children):
        token = children[0]
        unit = children[1].value if len(children) > 1 else None
        return ast.Number(float(token.value.replace("_", "")), token.value, unit, self.span(node))

    def money(self, node, children):
        token = children[0]
        return ast.Money(float(token.value.replace("_", "")), "$" + token.value, self.span(node))

    def string(self, node, children):
        token = children[0]
        if token.type == "LONG_STRING":
            return ast.String(dedent_block(token.value[3:-3]), self.span(node), True, token.value)
        return ast.String(unescape(token.value[1:-1]), self.span(node), False, token.value)

    def ident(self, node, children):
        return ast.Ident(children[0].value, self.span(node))

    def member(self, node, children):
        return ast.Ident(children[0].value, self.span(node))

    def list(self, node, children):
        return ast.ListValue(tuple(self.value(c) for c in children), self.span(node))

    def range(self, node, children):
        lo, hi = (self.value(c) for c in children)
        return ast.RangeValue(lo, hi, self.span(node))

    def call(self, node, children):
        func, *args = children
        return ast.Call(func.value, tuple(self.value(a) for a in args), self.span(node), self.span(func))

    # ------------------------------------------------------------ topologies

    def topology_decl(self, node, children):
        name, *items = children
        slots, requires, flows = [], [], []
        for item in items:
            part = self.visit(item)
            {ast.SlotDecl: slots, ast.RequireDecl: requires, ast.FlowDecl: flows}[type(part)].append(part)
        return ast.TopologyDecl(
            name.value, tuple(slots), tuple(requires), tuple(flows), self.span(node), self.span(name)
        )

    def slot_decl(self, node, children):
        name, role, lo, hi = children
        return ast.SlotDecl(
            name.value,
            role.value,
            self._number(lo),
            self._number(hi),
            self.span(node),
            self.span(name),
            self.span(role),
        )

    def _number(self, token: Token) -> ast.Number:
        return ast.Number(float(token.value.replace("_", "")), token.value, None, self.span(token))

    def require_decl(self, node, children):
        left, op, right = children
        return ast.RequireDecl(self.count_expr(left), op.value, self.count_expr(right), self.span(node))

    def count_expr(self, item):
        return self.visit(item)

    def binary(self, node, children):
        left, op, right = children
        return ast.BinaryOp(op.value, self.count_expr(left), self.count_expr(right), self.span(node))

    def const(self, node, children):
        return ast.Const(self._number(children[0]), self.span(node))

    def count(self, node, children):
        slot = children[0]
        tier = self._number(children[1]) if len(children) > 1 else None
        return ast.Count(slot.value, tier, self.span(node), self.span(slot))

    # ------------------------------------------------------------ flows

    def flow_decl(self, node, children):
        return ast.FlowDecl(tuple(self.visit(c) for c in children), self.span(node))

    def bind_stmt(self, node, children):
        name, expr = children
        return ast.Bind(name.value, self.visit(expr), self.span(node), self.span(name))

    def answer_stmt(self, node, children):
        return ast.AnswerStmt(self.visit(children[0]), self.span(node))

    def _ident(self, token: Token) -> ast.Ident:
        return ast.Ident(token.value, self.span(token))

    def slot_call(self, node, children):
        slot, *args = children
        return ast.SlotCall(slot.value, tuple(self._ident(a) for a in args), self.span(node), self.span(slot))

    def ref(self, node, children):
        return ast.Ref(children[0].value, self.span(node))

    def chain(self, node, children):
        return ast.Chain(self.visit(children[0]), self.span(node))

    def parallel(self, node, children):
        return ast.Parallel(self.visit(children[0]), self.span(node))

    def vote(self, node, children):
        return ast.Vote(self._ident(children[0]), self.span(node))

    def refine(self, node, children):
        call, critic = children
        return ast.Refine(self.visit(call), self._ident(critic), self.span(node))

    def plan(self, node, children):
        call, executor, *rest = children
        critic = self._ident(rest[0]) if len(rest) == 2 else None
        return ast.Plan(self.visit(call), self._ident(executor), critic, self._number(rest[-1]), self.span(node))

    def dynamic(self, node, children):
        call, *rest = children
        seats = [self._ident(c) for c in rest if isinstance(c, Token)]
        clauses = {c.data: c.children[0] for c in rest if not isinstance(c, Token)}
        limit, formatter = clauses.get("plan_limit"), clauses.get("plan_format")
        return ast.Dynamic(
            self.visit(call),
            tuple(seats),
            self._number(limit) if limit is not None else None,
            self._ident(formatter) if formatter is not None else None,
            self.span(node),
        )

    def reference(self, node, children):
        # `reference chain ...` is the inner combinator, run as the reference's engine runs it.
        return as_reference(self.visit(children[0]), self.span(node))

    def converse(self, node, children):
        calls = [self.visit(c) for c in children if c.data == "slot_call"]
        clauses = {c.data: c.children[0] for c in children if c.data != "slot_call"}
        approver = clauses.get("until_approves")
        marker = clauses.get("until_marker")
        limit = clauses.get("converse_limit")
        return ast.Converse(
            tuple(calls),
            self._ident(approver) if approver is not None else None,
            ast.String(unescape(marker.value[1:-1]), self.span(marker), False, marker.value) if marker is not None else None,
            self._number(limit) if limit is not None else None,
            self.span(node),
        )
    # ---- route

    def route(self, node, children):
        call, *branches = children
        return ast.Route(self.visit(call), tuple(self.visit(b) for b in branches), self.span(node))

    def route_branch(self, node, children):
        name, expr = children
        return ast.Branch(name.value, self.visit(expr), self.span(node), self.span(name))

    def route_fallback(self, node, children):
        (expr,) = children
        # The keyword is filtered out of the tree: the branch's name spans the start of the branch.
        line, col, _, _ = node.meta
        start = Span(self.path, line, col, line, col + len("otherwise"))
        return ast.Branch("otherwise", self.visit(expr), self.span(node), start, fallback=True)
