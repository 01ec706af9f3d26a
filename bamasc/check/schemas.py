"""Reads a JSON Schema written in the source (a tool's `parameters`, a role's `output`) and checks its shape.

Lint stays offline and quick, so the check is structural rather than
jsonschema's own metaschema (whose import alone costs more than a lint): the
text is JSON, the top is an object schema (`"type": "object"`, which function
calling and structured outputs both require), and every keyword the JSON Schema
drafts define has a value of the type they give it, its subschemas checked the
same way. Keywords it does not know are allowed, as JSON Schema allows them.
`exec` checks each schema against the metaschema before it starts (BAM606 is
what lint can tell of the same mistakes).
"""

from __future__ import annotations

from bamasc.diagnostics import Diagnostic, error
from bamasc.source import Span

TYPES = ("array", "boolean", "integer", "null", "number", "object", "string")
# Deeper than any schema a tool needs; a deeper one is refused rather than checked by recursion.
MAX_DEPTH = 64

_SCHEMA = ("additionalProperties", "additionalItems", "unevaluatedProperties", "unevaluatedItems", "not", "if",
           "then", "else", "contains", "propertyNames")
_SCHEMA_MAPS = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")
_SCHEMA_LISTS = ("allOf", "anyOf", "oneOf")
_COUNTS = ("minLength", "maxLength", "minItems", "maxItems", "minProperties", "maxProperties", "minContains",
           "maxContains")
_NUMBERS = ("minimum", "maximum")
_STRINGS = ("title", "description", "$id", "$schema", "$ref", "$comment", "$anchor", "format", "pattern")


class SchemaError(ValueError):
    """The value is not a JSON Schema: `path` says where (`properties.id.type`)."""

    def __init__(self, path: str, message: str):
        super().__init__(message)
        self.path = path


def read_schema(text: str, span: Span, what: str, diagnostics: list[Diagnostic]) -> dict | None:
    """The schema `text` holds, or None after a BAM606 at `span`; `what` names it in the message."""
    import json

    try:
        schema = json.loads(text)
    except ValueError as problem:  # JSONDecodeError, or a number of thousands of digits
        where = f" (line {problem.lineno}, column {problem.colno})" if hasattr(problem, "lineno") else ""
        diagnostics.append(error("BAM606", f"{what} is not JSON: {getattr(problem, 'msg', problem)}{where}", span,
                                 hint='write a JSON Schema object, such as {"type": "object", "properties": {}}'))
        return None
    except RecursionError:
        diagnostics.append(error("BAM606", f"{what} nests too deeply to read", span))
        return None
    try:
        check_schema(schema)
        if not isinstance(schema, dict) or schema.get("type") != "object":
            raise SchemaError("", 'it must describe an object: its top needs "type": "object"')
    except SchemaError as problem:
        at = f" at {problem.path}" if problem.path else ""
        diagnostics.append(error("BAM606", f"{what} is not a JSON Schema{at}: {problem}", span,
                                 hint='for example {"type": "object", "properties": {"id": {"type": "string"}}} (json-schema.org)'))
        return None
    return schema


def check_schema(schema, path: str = "", depth: int = 0) -> None:
    """Raise SchemaError where `schema` (parsed JSON) breaks the shape JSON Schema gives its keywords."""
    if depth > MAX_DEPTH:
        raise SchemaError(path, f"it nests more than {MAX_DEPTH} schemas deep")
    if isinstance(schema, bool):
        return
    if not isinstance(schema, dict):
        raise SchemaError(path, f"a schema is an object or true/false, not {_kind(schema)}")
    for key, value in schema.items():
        where = f"{path}.{key}" if path else key
        if key == "type":
            _type(value, where)
        elif key in _SCHEMA:
            check_schema(value, where, depth + 1)
        elif key in _SCHEMA_MAPS:
            _object(value, where)
            for name, inner in value.items():
                check_schema(inner, f"{where}.{name}", depth + 1)
        elif key in _SCHEMA_LISTS or key == "prefixItems":
            if not isinstance(value, list) or (key != "prefixItems" and not value):
                raise SchemaError(where, f"{key} is a non-empty list of schemas, not {_kind(value)}")
            for index, inner in enumerate(value):
                check_schema(inner, f"{where}[{index}]", depth + 1)
        elif key == "items":
            for index, inner in enumerate(value) if isinstance(value, list) else ((None, value),):
                check_schema(inner, where if index is None else f"{where}[{index}]", depth + 1)
        elif key == "required":
            _names(value, where)
        elif key == "dependentRequired":
            _object(value, where)
            for name, names in value.items():
                _names(names, f"{where}.{name}")
        elif key in ("enum", "examples") and not isinstance(value, list):
            raise SchemaError(where, f"{key} is a list, not {_kind(value)}")
        elif key in _COUNTS and not (_is_number(value) and float(value).is_integer() and value >= 0):
            raise SchemaError(where, f"{key} is a whole number of at least 0, not {_shown(value)}")
        elif key in _NUMBERS and not _is_number(value):
            raise SchemaError(where, f"{key} is a number, not {_shown(value)}")
        elif key in ("exclusiveMinimum", "exclusiveMaximum") and not (_is_number(value) or isinstance(value, bool)):
            raise SchemaError(where, f"{key} is a number, not {_shown(value)}")
        elif key == "multipleOf" and not (_is_number(value) and value > 0):
            raise SchemaError(where, f"multipleOf is a number above 0, not {_shown(value)}")
        elif key == "uniqueItems" and not isinstance(value, bool):
            raise SchemaError(where, f"uniqueItems is true or false, not {_shown(value)}")
        elif key in _STRINGS and not isinstance(value, str):
            raise SchemaError(where, f"{key} is a string, not {_shown(value)}")


def _type(value, where: str) -> None:
    names = value if isinstance(value, list) else [value]
    if not names or any(not isinstance(name, str) or name not in TYPES for name in names):
        raise SchemaError(where, f"type is one of {', '.join(TYPES)} (or a list of them), not {_shown(value)}")
    if len(set(names)) != len(names):
        raise SchemaError(where, "type lists a type twice")


def _object(value, where: str) -> None:
    if not isinstance(value, dict):
        raise SchemaError(where, f"{where.rsplit('.', 1)[-1]} is an object, not {_kind(value)}")


def _names(value, where: str) -> None:
    if not isinstance(value, list) or any(not isinstance(name, str) for name in value):
        raise SchemaError(where, f"{where.rsplit('.', 1)[-1]} is a list of property names, not {_shown(value)}")
    if len(set(value)) != len(value):
        raise SchemaError(where, "it lists a property twice")


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _kind(value) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "true/false", type(None): "null"}.get(
        type(value), "a number")


def _shown(value) -> str:
    text = repr(value) if not isinstance(value, (dict, list)) else _kind(value)
    return text if len(text) <= 40 else text[:37] + "..."
