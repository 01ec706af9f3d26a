"""Tool arguments and their JSON Schemas: reading the model's arguments, checking a schema, matching one to the other.

`jsonschema` is imported at first use, by a run that has tools.
"""

from __future__ import annotations

import json

from bamasc.runtime.tool_text import cut_text, describe_exception

_MESSAGE_BYTES = 2000


def schema_validator(schema):
    """(a validator for arguments, None) or (None, why the schema is unusable)."""
    import jsonschema

    if not isinstance(schema, dict):
        return None, f"its parameters schema is a {type(schema).__name__}, not a JSON object"
    if schema.get("type") != "object":
        return None, "its parameters schema does not describe an object (function calling passes named arguments)"
    try:
        cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
        cls.check_schema(schema)
    except jsonschema.SchemaError as exc:
        return None, f"its parameters are not a valid JSON Schema: {cut_text(exc.message, 300)[0]}"
    except Exception as exc:  # an unknown $schema, a cycle: still not a schema to check arguments with
        return None, f"its parameters cannot be read as a JSON Schema: {describe_exception(exc, 300)}"
    return cls(schema), None


def parse_arguments(arguments: str):
    """The arguments as a dict, or why they are not a JSON object."""
    if not arguments.strip():
        return {}
    try:
        value = json.loads(arguments)
    except (ValueError, RecursionError) as exc:
        return f"the arguments are not JSON ({describe_exception(exc, 200)})"
    if not isinstance(value, dict):
        return f"the arguments must be a JSON object, not {type(value).__name__}"
    return value


def schema_mismatch(validator, arguments: dict) -> str | None:
    import jsonschema

    try:
        error = jsonschema.exceptions.best_match(validator.iter_errors(arguments))
    except Exception as exc:  # a schema whose $ref cannot be resolved, nesting too deep
        return f"the arguments could not be checked against the schema ({describe_exception(exc, 200)})"
    if error is None:
        return None
    where = "/".join(str(part) for part in error.absolute_path) or "the top level"
    return f"the arguments do not match the schema at {where}: {cut_text(error.message, _MESSAGE_BYTES)[0]}"
