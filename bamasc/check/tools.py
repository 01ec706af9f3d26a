"""Reads and checks `tool` declarations and what a role says of its tools (docs/language.md, "Tools").

All offline: a `python` target is checked for its shape, never imported, and
an MCP server's command is never run. `exec` imports and starts them, and
checks that each tool a role names exists with a compatible schema.
"""

from __future__ import annotations

from bamasc.check.attributes import LIMITS_HINT, Attributes, declares, did_you_mean, out_of_range, shown
from bamasc.check.latency import seconds_value
from bamasc.combinators.tools import build_loop
from bamasc.diagnostics import Diagnostic, Note, error, warning
from bamasc.limits import MAX_BUDGET, MAX_TOOL_CALLS, MAX_TOOL_ROUNDS, MAX_TOOLS, written
from bamasc.program import DEFAULT_MAX_SPEC_TOKENS, DEFAULT_MAX_TOOL_CALLS, DEFAULT_TOOL_TIMEOUT_S, TOOL_KINDS
from bamasc.program import Program, Role, Tool
from bamasc.provider_registry import lookup
from bamasc.records import replace
from bamasc.syntax import ast

COMMON_ATTRIBUTES = ("python", "mcp", "max_result", "timeout", "price", "max_spec")
KIND_ATTRIBUTES = {"python": ("description", "parameters"), "mcp": ("allow",)}
TOOL_ATTRIBUTES = declares("a tool", COMMON_ATTRIBUTES + KIND_ATTRIBUTES["python"] + KIND_ATTRIBUTES["mcp"])
ROLE_TOOL_ATTRIBUTES = ("tools", "max_tool_rounds", "max_tool_calls", "output")


def _name(text: str) -> bool:
    """An ASCII name: a letter or `_`, then letters, digits and `_`."""
    return text.isascii() and text.isidentifier()


def _target(text: str) -> bool:
    """`module:name`: dotted names on both sides of one colon (`shop.orders:Lookup.run`)."""
    parts = text.split(":")
    return len(parts) == 2 and all(_name(word) for part in parts for word in part.split("."))


# ---------------------------------------------------------------- tool declarations


def read_tool(decl: ast.ToolDecl, diagnostics: list[Diagnostic]) -> Tool:
    kinds = [item for item in decl.attrs if item.name in TOOL_KINDS]
    kind = kinds[0].name if kinds else "python"
    if len({item.name for item in kinds}) != 1:
        diagnostics.append(error(
            "BAM604", f"tool '{decl.name}' must say what it is: exactly one of `python` or `mcp`"
            + (", not both" if kinds else ""), decl.name_span,
            hint='a Python callable: `python = "package.module:function"`; '
                 'an MCP server over stdio: `mcp = "python -m my_server"`',
        ))
    allowed = COMMON_ATTRIBUTES + KIND_ATTRIBUTES[kind]
    attrs = Attributes(f"{kind} tool '{decl.name}'", decl.attrs, allowed, diagnostics, decl.name_span)
    target = _read_target(attrs, kind, diagnostics)
    description = attrs.string("description", 'description = "What it does, for the model"') if kind == "python" else None
    parameters = None
    value = attrs.value("parameters")
    if isinstance(value, ast.String):
        from bamasc.check.schemas import read_schema  # only a file that writes a schema needs it

        parameters = read_schema(value.value, value.span, f"`parameters` of tool '{decl.name}'", diagnostics)
    elif value is not None:
        attrs.string("parameters")  # reports the wrong type
    if "max_result" not in attrs.items:
        diagnostics.append(error(
            "BAM607", f"tool '{decl.name}' has no max_result, so what its results add to a prompt has no bound",
            decl.name_span, hint="add `max_result = 300 tokens`: longer results are cut to it, with a marker",
        ))
    timeout = attrs.value("timeout")
    if timeout is not None:
        timeout = seconds_value(timeout, "timeout", f"the timeout of tool '{decl.name}'", "BAM610", diagnostics)
    return Tool(
        name=decl.name,
        kind=kind,
        target=target,
        description=description,
        parameters=parameters,
        allow=_allow(attrs, decl, kind, diagnostics),
        max_result=attrs.token_count("max_result") or 1,
        timeout_s=timeout if timeout is not None else DEFAULT_TOOL_TIMEOUT_S,
        price=_price(attrs, decl.name, diagnostics),
        span=decl.name_span,
        spans=attrs.spans(),
        max_spec=attrs.token_count("max_spec") or DEFAULT_MAX_SPEC_TOKENS,
    )


def _read_target(attrs: Attributes, kind: str, diagnostics) -> str:
    value = attrs.string(kind)
    if value is None:
        return ""
    span = attrs.span_of(kind)
    if kind == "python" and not _target(value):
        diagnostics.append(error(
            "BAM605", f"python = {shown(repr(value))} is not `module:name`", span,
            hint='name an importable module and a callable in it: `python = "shop.orders:lookup"`',
        ))
    if kind == "mcp":
        import shlex

        try:
            words = shlex.split(value)
        except ValueError as problem:
            words = []
            reason = f": {problem}"
        else:
            reason = ": it is empty"
        if not words:
            diagnostics.append(error(
                "BAM605", f"mcp = {shown(repr(value))} is not a command line{reason}", span,
                hint='write the command that starts the server over stdio: `mcp = "python -m my_server"`',
            ))
    return value


def _allow(attrs: Attributes, decl: ast.ToolDecl, kind: str, diagnostics) -> tuple[str, ...]:
    if kind != "mcp":
        return ()
    value = attrs.value("allow")
    items = value.items if isinstance(value, ast.ListValue) else ()
    if value is not None and not isinstance(value, ast.ListValue):
        diagnostics.append(error("BAM108", f"'allow' in mcp tool '{decl.name}' must be a list of tool names, "
                                 'such as ["read_file"]', value.span))
        return ()
    names = []
    for item in items:
        if isinstance(item, ast.String) and _name(item.value):
            names.append(item.value)
        else:
            diagnostics.append(error(
                "BAM108", f"each tool that 'allow' names in mcp tool '{decl.name}' is a string holding a name "
                "(letters, digits, _), which a role writes after the dot", item.span,
                hint=f'write `allow = ["read_file"]` and name it in a role as `{decl.name}.read_file`',
            ))
    if value is None or not items:
        diagnostics.append(error(
            "BAM603", f"mcp tool '{decl.name}' allows none of its server's tools, so no role can use it",
            attrs.span_of("allow"),
            hint=f'list the tools roles may call: `allow = ["read_file", "list_dir"]`, named `{decl.name}.read_file`',
        ))
    return tuple(names)


def _price(attrs: Attributes, name: str, diagnostics) -> float:
    """µ$ per call: `50`, `50 µ$` or `$0.00005`; 0 when not given."""
    value = attrs.value("price")
    if value is None:
        return 0.0
    if isinstance(value, ast.Money):
        amount = value.micro_usd
    elif isinstance(value, ast.Number) and value.unit in (None, "µ$"):
        amount = value.value
    elif isinstance(value, ast.Number):
        diagnostics.append(error("BAM208", f"the price of tool '{name}' is µ$ per call, not {value.unit}", value.span,
                                 hint=f"write `price = {shown(value.text)}` (µ$ per call)"))
        return 0.0
    else:
        attrs.number("price")  # reports the wrong type
        return 0.0
    if amount < 0:
        diagnostics.append(error("BAM202", f"the price of tool '{name}' is below zero", value.span))
        return 0.0
    if amount > MAX_BUDGET:
        diagnostics.append(error("BAM210", f"the price of tool '{name}' is above the limit of {written(MAX_BUDGET)} µ$",
                                 value.span, hint=LIMITS_HINT))
        return 0.0
    return float(amount)


# ---------------------------------------------------------------- what a role says of its tools


def read_tool_use(attrs: Attributes, role: str, diagnostics: list[Diagnostic]) -> dict:
    """The Role fields for `tools`, `max_tool_rounds`, `max_tool_calls` and `output` (names not resolved yet)."""
    named = attrs.names("tools")
    rounds = _count(attrs, "max_tool_rounds", MAX_TOOL_ROUNDS, diagnostics)
    calls = _count(attrs, "max_tool_calls", MAX_TOOL_CALLS, diagnostics)
    if len(named) > MAX_TOOLS:
        diagnostics.append(error("BAM210", f"role '{role}' names {len(named)} tools, above the limit of {MAX_TOOLS}",
                                 attrs.span_of("tools"), hint=LIMITS_HINT))
    if named and "max_tool_rounds" not in attrs.items:
        diagnostics.append(error(
            "BAM607", f"role '{role}' has tools but no max_tool_rounds, so its tool loop has no bound",
            attrs.span_of("tools"),
            hint="add `max_tool_rounds = 3`: model calls that may ask for tools, then one final call without them",
        ))
    if not named:
        for name in ("max_tool_rounds", "max_tool_calls"):
            if name in attrs.items:
                diagnostics.append(warning(
                    "BAM608", f"role '{role}' has no tools, so '{name}' changes nothing", attrs.span_of(name),
                    hint="name its tools (`tools = [lookup_order]`) or drop the limit",
                ))
    return {
        "tools": tuple(name for name, _ in named),
        "max_tool_rounds": (rounds or 1) if named else 0,
        "max_tool_calls": calls or DEFAULT_MAX_TOOL_CALLS,
        "output_schema": _output(attrs, role, diagnostics),
        "item_spans": {"tools": tuple(span for _, span in named)} if named else {},
    }


def _count(attrs: Attributes, name: str, limit: int, diagnostics) -> int | None:
    number = attrs.number(name)
    if number is None:
        return None
    if number.unit or not number.is_integer or number.value < 1:
        diagnostics.append(error("BAM207", f"'{name}' must be a positive whole number, not {shown(number.text)}",
                                 number.span))
        return None
    if number.value > limit:
        diagnostics.append(out_of_range(f"'{name}'", number, limit))
        return None
    return int(number.value)


def _output(attrs: Attributes, role: str, diagnostics) -> dict | None:
    value = attrs.value("output")
    if value is None:
        return None
    if not (isinstance(value, ast.Call) and value.func == "json" and len(value.args) == 1
            and isinstance(value.args[0], ast.String)):
        diagnostics.append(error("BAM108", f"'output' in role '{role}' must be json(\"\"\"{{a JSON Schema}}\"\"\")",
                                 value.span, hint='output = json("""{"type": "object", "properties": {...}}""")'))
        return None
    from bamasc.check.schemas import read_schema

    text = value.args[0]
    return read_schema(text.value, text.span, f"`output` of role '{role}'", diagnostics)


# ---------------------------------------------------------------- resolving the names, once every tool is read


def resolve_tools(roles: dict[str, Role], tools: dict[str, Tool], diagnostics: list[Diagnostic]) -> dict[str, Role]:
    """The roles with their tool loops (`Role.loop`), every tool name they give checked."""
    resolved = {}
    for name, role in roles.items():
        found = [tool for entry, span in zip(role.tools, role.item_spans.get("tools", ()))
                 if (tool := _tool(role, entry, span, tools, diagnostics)) is not None]
        if found and len(found) == len(role.tools):
            role = replace(role, loop=build_loop(role, found))
        resolved[name] = role
    return resolved


def _tool(role: Role, entry: str, span, tools: dict[str, Tool], diagnostics) -> Tool | None:
    owner, _, member = entry.partition(".")
    tool = tools.get(owner)
    if tool is None:
        diagnostics.append(error(
            "BAM601", f"role '{role.name}' names the tool '{owner}', which is not declared", span,
            hint=did_you_mean(owner, tools) or "declare it: `tool NAME { python = \"module:name\" ... }`",
        ))
        return None
    if tool.kind == "python" and member:
        diagnostics.append(error(
            "BAM601", f"role '{role.name}' names '{entry}', but '{owner}' is a python tool, which has no tools of its own",
            span, Note(f"tool '{owner}' is declared here", tool.span), hint=f"write `{owner}`",
        ))
        return None
    if tool.kind == "mcp" and member not in tool.allow:
        allowed = ", ".join(f"{owner}.{name}" for name in tool.allow) or "none"
        message = (f"role '{role.name}' names the MCP server '{owner}', not one of its tools" if not member else
                   f"role '{role.name}' names '{entry}', which tool '{owner}' does not allow")
        hint = (f"add \"{member}\" to the `allow` list of tool '{owner}'" if member else f"name one of its tools: {allowed}")
        diagnostics.append(error("BAM602", message, span, Note(f"it allows: {allowed}", tool.spans.get("allow", tool.span)),
                                 hint=hint))
        return None
    return tool


def check_tool_providers(program: Program) -> list[Diagnostic]:
    """A system may not seat a model whose provider's API cannot call tools (or hold a reply to a schema)
    in a slot whose role needs that: the run would have to refuse the task."""
    diagnostics = []
    for system in program.systems.values():
        roles = {}
        for name in system.topologies:
            topology = program.topologies.get(name)
            for slot in topology.slots if topology else ():
                role = program.roles.get(slot.role)
                if role is not None and (role.tools or role.output_schema is not None):
                    roles.setdefault(role.name, role)
        for name, span in zip(system.models, system.item_spans.get("models", ())):
            model = program.models.get(name)
            provider = lookup(model.provider) if model is not None else None
            if provider is None:
                continue  # unknown model or provider: its own error
            for role in roles.values():
                lacking = [what for what, needed, able in (
                    ("call tools", bool(role.tools), provider.tools),
                    ("hold its reply to a JSON Schema", role.output_schema is not None, provider.structured_output),
                ) if needed and not able]
                if lacking:
                    diagnostics.append(error(
                        "BAM609", f"system '{system.name}' may seat model '{name}' as role '{role.name}', but the "
                        f"{model.provider} API cannot {' or '.join(lacking)}", span,
                        Note(f"role '{role.name}' is declared here", role.span),
                        hint=f"drop '{name}' from the models of system '{system.name}', or use a provider that can",
                    ))
    return diagnostics
