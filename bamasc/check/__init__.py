"""Semantic checks: resolve declarations into a typed Program, then run each pass over it."""

from __future__ import annotations

from bamasc.check.caps import check_caps
from bamasc.check.latency import check_deadlines
from bamasc.check.catalog_prices import check_catalog_prices
from bamasc.check.flow_roles import check_flow_roles
from bamasc.check.keys import check_keys, read_key, read_team
from bamasc.check.models import read_model
from bamasc.program import Program
from bamasc.check.prompts import check_prompts
from bamasc.check.references import check_references
from bamasc.check.roles import read_role
from bamasc.check.sizes import check_sizes
from bamasc.check.systems import read_system
from bamasc.check.tools import check_tool_providers, read_tool, resolve_tools
from bamasc.check.topologies import read_topology
from bamasc.diagnostics import Diagnostic, Note, error, has_errors
from bamasc.loader import Loaded
from bamasc.syntax import ast

_READERS = {
    ast.ModelDecl: ("model", "models", read_model),
    ast.RoleDecl: ("role", "roles", read_role),
    ast.TopologyDecl: ("topology", "topologies", read_topology),
    ast.SystemDecl: ("system", "systems", read_system),
    ast.ToolDecl: ("tool", "tools", read_tool),
    ast.TeamDecl: ("team", "teams", read_team),
    ast.KeyDecl: ("key", "keys", read_key),
}

# Passes over a program whose declarations all resolved; each returns diagnostics.
PASSES = (
    check_references, check_sizes, check_deadlines, check_catalog_prices, check_flow_roles, check_tool_providers,
    check_keys,
)
# Passes that need a program free of errors (they compute with its values).
COMPUTING_PASSES = (check_caps,)


def check(loaded: Loaded) -> tuple[Program, list[Diagnostic]]:
    """The typed program and every problem found in it (all of them, not the first)."""
    diagnostics: list[Diagnostic] = []
    tables: dict[str, dict] = {table: {} for _, table, _ in _READERS.values()}
    first_spans: dict[tuple[str, str], ast.Declaration] = {}
    for module in loaded.modules.values():
        for decl in module.declarations:
            kind, table, reader = _READERS[type(decl)]
            previous = first_spans.get((kind, decl.name))
            if previous is not None:
                diagnostics.append(
                    error(
                        "BAM101",
                        f"{kind} '{decl.name}' is declared twice",
                        decl.name_span,
                        Note("first declared here", previous.name_span),
                        hint=f"rename one of them; {kind} names are shared across imported files",
                    )
                )
                continue
            first_spans[(kind, decl.name)] = decl
            tables[table][decl.name] = reader(decl, diagnostics)
    diagnostics.extend(check_prompts(loaded.modules))
    program = Program(
        models=tables["models"],
        roles=resolve_tools(tables["roles"], tables["tools"], diagnostics),
        topologies=tables["topologies"],
        systems=tables["systems"],
        root_files=tuple(loaded.roots),
        source_texts=dict(loaded.texts),
        tools=tables["tools"],
        teams=tables["teams"],
        keys=tables["keys"],
    )
    for run in PASSES:
        diagnostics.extend(run(program))
    # Each computing pass relies on the ones before it having found nothing,
    # so stop at the first error (the budget check in ir needs every call capped).
    for run in COMPUTING_PASSES:
        if has_errors(diagnostics) or has_errors(loaded.diagnostics):
            break
        diagnostics.extend(run(program))
    return program, diagnostics
