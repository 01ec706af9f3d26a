"""Which branch a router's reply names, and what lint can tell of the replies a router can give.

One rule decides the branch at run time and in lint: a reply names a branch
when it holds the branch's name as a word, in any case (`chosen_branch`). A
router whose role has an `output` schema can only give replies the schema
allows; when every string the schema allows is written out (`enum`, `const`,
property names), lint knows every word a reply can hold, so a branch no such
word names can never run, and an enum value that names no branch always takes
`otherwise` (BAM314, BAM315). A router without a schema is only asked: when
its prompt names some branches but not one of them, that one is most likely a
typo the model will never write.
"""

from __future__ import annotations

import difflib
import json
import re

from bamasc.diagnostics import Diagnostic, Note, warning
from bamasc.syntax import ast

_WORD = re.compile(r"[A-Za-z0-9_]+")
_MAX_DEPTH = 32


def names(text: str, branch: str) -> re.Match | None:
    """Where `text` holds `branch` as a word (any case), or None."""
    return re.search(rf"(?<![A-Za-z0-9_]){re.escape(branch)}(?![A-Za-z0-9_])", text, re.IGNORECASE)


def chosen_branch(text: str, branches: tuple[str, ...], fallback: str | None) -> str | None:
    """The branch a router's output names: of the branch names it holds as words (any case),
    the one it writes first (the first declared on a tie); `fallback` when it names none."""
    first: tuple[int, str] | None = None
    for name in branches:
        if name == fallback:
            continue
        found = names(text, name)
        if found and (first is None or found.start() < first[0]):
            first = (found.start(), name)
    return first[1] if first else fallback


class ReplyStrings:
    """The strings a reply held to a schema can hold: the property names and enums of strings the schema
    writes out, and whether it also allows strings no list holds (`open`: a free `string`, an object
    whose properties may have any name)."""

    def __init__(self, schema) -> None:
        self.keys: list[str] = []
        self.enums: list[list[str]] = []
        self.open = False
        self._walk(schema, 0)

    def _walk(self, schema, depth: int) -> None:
        if schema is True or schema == {} or depth > _MAX_DEPTH:
            self.open = True  # anything at all, strings included
            return
        if not isinstance(schema, dict):
            return
        if "const" in schema or "enum" in schema:
            values = [schema["const"]] if "const" in schema else schema["enum"]
            if isinstance(values, list):
                self.enums.append([value if isinstance(value, str) else json.dumps(value) for value in values])
            return
        parts = [part for key in ("anyOf", "oneOf", "allOf") if isinstance(schema.get(key), list) for part in schema[key]]
        for part in parts:
            self._walk(part, depth + 1)
        kinds = schema.get("type", "object" if "properties" in schema else None if parts else "any")
        for kind in kinds if isinstance(kinds, list) else [kinds]:
            if kind in ("string", "any"):
                self.open = True
            elif kind == "object":
                self._object(schema, depth)
            elif kind == "array":
                self._walk(schema.get("items", True), depth + 1)

    def _object(self, schema: dict, depth: int) -> None:
        # Properties of any name come only where the schema says so: structured-output modes
        # (OpenAI's strict mode) write the listed properties alone.
        extra = schema.get("additionalProperties", False)
        if extra is not False or schema.get("patternProperties"):
            self.open = True
        properties = schema.get("properties", {})
        for name, part in properties.items() if isinstance(properties, dict) else ():
            self.keys.append(name)
            self._walk(part, depth + 1)


def check_route_names(node: ast.Route, role) -> list[Diagnostic]:
    """BAM314 and BAM315 for one route whose router's role is `role` (None: unknown, nothing to say)."""
    if role is None:
        return []
    named = [branch for branch in node.branches if not branch.fallback]
    if role.output_schema is not None:
        return _against_schema(node, named, role)
    return _against_prompt(node, named, role)


def _against_schema(node: ast.Route, named, role) -> list[Diagnostic]:
    reply = ReplyStrings(role.output_schema)
    names_of = tuple(branch.name for branch in named)
    routing = [enum for enum in reply.enums if any(chosen_branch(value, names_of, None) for value in enum)]
    if reply.open and not routing:
        return []  # a router that answers in free text, wrapped in JSON: its prompt decides
    # Closed, every string a reply holds is listed; open, the routing enums are what it is asked to name.
    words = [*reply.keys, *(value for enum in reply.enums for value in enum)] if not reply.open else \
        [value for enum in routing for value in enum]
    why = "no reply the router's output schema allows names it" if not reply.open else \
        "no value of the router's output enum names it, only its free text could"
    schema_span = role.spans.get("output", role.span)
    values = [value for enum in (routing or reply.enums) for value in enum]
    diagnostics = [
        warning(
            "BAM314",
            f"branch '{branch.name}' {'can' if not reply.open else 'will likely'} never run: {why}",
            branch.name_span,
            Note(f"role '{role.name}' replies to this schema", schema_span),
            hint=_meant(branch.name, values) or "name it in the schema's enum, or remove the branch",
        )
        for branch in named
        if not any(names(word, branch.name) for word in words)
    ]
    for enum in routing:
        for value in enum:
            if chosen_branch(value, names_of, None) is None and value.lower() != "otherwise":
                diagnostics.append(_unrouted(node, named, role, value, schema_span))
    return diagnostics


def _unrouted(node: ast.Route, named, role, value: str, schema_span) -> Diagnostic:
    close = difflib.get_close_matches(value.lower(), [b.name.lower() for b in named], n=1, cutoff=0.6)
    at = next((b for b in named if close and b.name.lower() == close[0]), None) or node.fallback
    goes = "takes the 'otherwise' branch" if node.fallback else "fails the task (the route has no 'otherwise')"
    return warning(
        "BAM315",
        f"the router's output schema allows {value!r}, which names no branch: every such reply {goes}",
        at.name_span if at is not None else node.call.span,
        Note(f"role '{role.name}' may reply {value!r}", schema_span),
        hint=(f"rename branch '{at.name}' to '{value}'" if at is not None and not at.fallback
              else f"add a branch '{value}:', or name the value 'otherwise' if the fallback should take it"),
    )


def _against_prompt(node: ast.Route, named, role) -> list[Diagnostic]:
    text = "\n".join(part for part in (role.system, role.prompt) if part)
    asked = [branch for branch in named if names(text, branch.name)]
    if not asked:
        return []  # the prompt lists no choices: nothing to compare with
    prompt_span = role.spans.get("prompt", role.span)
    return [
        warning(
            "BAM314",
            f"branch '{branch.name}' will likely never run: the router's prompt names "
            f"{_listed([b.name for b in asked])} but never '{branch.name}'",
            branch.name_span,
            Note(f"the prompt of role '{role.name}'", prompt_span),
            hint=_meant(branch.name, _WORD.findall(text)) or f"name '{branch.name}' in the router's prompt",
        )
        for branch in named
        if branch not in asked
    ]


def _listed(names: list[str]) -> str:
    quoted = [f"'{name}'" for name in names]
    return ", ".join(quoted[:-1]) + " and " + quoted[-1] if len(quoted) > 1 else quoted[0]


def _meant(name: str, words) -> str | None:
    """A did-you-mean among `words` (case ignored)."""
    by_lower = {word.lower(): word for word in words if word.lower() != name.lower()}
    close = difflib.get_close_matches(name.lower(), list(by_lower), n=1, cutoff=0.6)
    return f"did you mean '{by_lower[close[0]]}'?" if close else None
