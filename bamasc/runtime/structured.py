"""Structured outputs: a role's `output = json(...)` schema sent with each of its calls, reserved for, and its
answers checked against it.

`structured(provider, schema)` wraps the provider of one call of such a role:
it sends the schema (`complete(..., output_schema=)`, which each provider sends
its own way: docs/tools.md), adds the tokens the bound assumes for it to the
prompt's count (`output_schema_tokens`, in every prompt bound of the role), and
checks each answer (a completion that asks for no tools) with `check_output`. A
reply that is not JSON, or not held to the schema, is a malformed reply: a
failed attempt under the retry rules, charged its whole reservation as any
malformed reply is. jsonschema (the `mcp` extra) is imported at the first
check, never by lint.
"""

from __future__ import annotations

import functools
import inspect
import json

from bamasc.combinators.tools import canonical_json, output_schema_tokens
from bamasc.runtime.providers.base import ProviderError
from bamasc.runtime.tokens import safe_prompt_bound

_DETAIL_BYTES = 300  # of a validation message, in the error


def structured(provider, schema: dict | None):
    """`provider` as a call of a role with `output = json(schema)` uses it; itself when there is no schema."""
    return provider if schema is None else Structured(provider, schema)


class Structured:
    """One provider, for the calls of one role with a structured output (this module's docstring)."""

    def __init__(self, inner, schema: dict) -> None:
        self.inner = inner
        self.schema = schema
        self.name = inner.name
        self._sends_schema = takes_schema(inner)

    def __repr__(self) -> str:
        return f"Structured({self.inner!r})"

    def __getattr__(self, name: str):  # what else the caller reads of the provider (its model id, its counters)
        return getattr(self.inner, name)

    def count_prompt_tokens(self, messages) -> int:
        counted = self.inner.count_prompt_tokens(messages)
        return (safe_prompt_bound(messages) if counted is None else counted) + output_schema_tokens(self.schema)

    async def complete(self, messages, max_tokens: int, **options):
        validator(canonical_json(self.schema))  # before anything is sent: jsonschema missing, or a schema it refuses
        if self._sends_schema:
            options["output_schema"] = self.schema
        completion = await self.inner.complete(messages, max_tokens, **options)
        if not completion.tool_calls:
            check_output(self.schema, completion.text)
        return completion

    async def aclose(self) -> None:
        """Nothing: the provider it wraps is closed by whoever made it."""


def takes_schema(provider) -> bool:
    """Whether `provider.complete` takes `output_schema` (the built-in providers do; one of your own may not,
    and then its record says it holds no reply to a schema, BAM609)."""
    try:
        parameters = inspect.signature(provider.complete).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(p.name == "output_schema" or p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters)


def check_output(schema: dict, text: str) -> str:
    """`text` when it is JSON held to `schema`; else a malformed ProviderError saying where it is not."""
    check = validator(canonical_json(schema))
    try:
        value = json.loads(text)
    except (ValueError, RecursionError) as problem:
        reason = problem.msg if isinstance(problem, json.JSONDecodeError) else type(problem).__name__
        raise _malformed(f"the reply is not JSON ({reason})") from None
    try:
        error = _best_match(check, value)
    except RecursionError:
        raise _malformed("the reply is nested too deeply to check") from None
    if error is not None:
        where = "/".join(str(part) for part in error.absolute_path) or "the top"
        raise _malformed(f"the reply does not match its schema at {where}: {error.message[:_DETAIL_BYTES]}")
    return text


@functools.lru_cache(maxsize=64)
def validator(schema_json: str):
    """A checker of the schema (by its canonical JSON), built once; a client ProviderError when jsonschema is
    not installed or refuses the schema, raised before a call is sent."""
    try:
        import jsonschema
    except ImportError:
        raise ProviderError("structured outputs need jsonschema to check replies: pip install 'bamasc[mcp]'",
                            kind="client") from None
    schema = json.loads(schema_json)
    checker = jsonschema.validators.validator_for(schema)
    try:
        checker.check_schema(schema)
    except jsonschema.SchemaError as problem:
        raise ProviderError(f"the role's output schema is not a valid JSON Schema: {problem.message}",
                            kind="client") from None
    return checker(schema)


def _best_match(check, value):
    from jsonschema.exceptions import best_match

    return best_match(check.iter_errors(value))


def _malformed(detail: str) -> ProviderError:
    # The call was made and may be billed: the reservation is kept, as for any malformed reply.
    return ProviderError(f"structured output: {detail}", kind="malformed", outcome_unknown=True)


# ------------------------------------------------------------ offline answers

def example_answer(schema: dict, size: int = 0, prefer=None, word: str = "") -> str | None:
    """A small JSON value held to `schema`, padded with trailing spaces to `size` UTF-8 bytes (JSON allows
    them), for offline providers: the fake's verbose mode fills the cap with it. None when no value this
    simple fits (a `pattern`, `format` or `not` it cannot meet). `prefer` (a test of a part's JSON text)
    picks among the schema's choices: the enum value, `anyOf` branch or optional property it accepts,
    where one does; a free string is `word` (padded to its minLength). A router's fake reply names the
    branch it is asked to take this way, whatever values its schema lists."""
    choose = _Choice(prefer, word)
    try:
        value = choose.simplest(schema, 0)
        if any(True for _ in validator(canonical_json(schema)).iter_errors(value)):
            value = _Choice(None, "").simplest(schema, 0) if prefer is not None else None
            if value is None or any(True for _ in validator(canonical_json(schema)).iter_errors(value)):
                return None
    except (ProviderError, TypeError, ValueError, AttributeError, RecursionError):  # a schema it cannot read
        return None
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return text + " " * max(size - len(text.encode("utf-8")), 0)


class _Choice:
    """The simplest value of a JSON Schema: its const or first enum, else the least its type allows;
    among choices, the first `prefer` accepts."""

    def __init__(self, prefer, word: str) -> None:
        self.prefer = prefer
        self.word = word

    def _accepts(self, value) -> bool:
        return self.prefer is not None and self.prefer(json.dumps(value, ensure_ascii=False))

    def _first(self, values):
        return next((value for value in values if self._accepts(value)), values[0])

    def simplest(self, schema, depth: int):
        if not isinstance(schema, dict) or depth > 32:
            return None
        if "const" in schema:
            return schema["const"]
        if schema.get("enum"):
            return self._first(schema["enum"])
        for key in ("anyOf", "oneOf"):
            if schema.get(key):
                return self._first([self.simplest(option, depth + 1) for option in schema[key]])
        if schema.get("allOf"):
            merged = {key: value for part in schema["allOf"] if isinstance(part, dict) for key, value in part.items()}
            return self.simplest({**merged, **{k: v for k, v in schema.items() if k != "allOf"}}, depth + 1)
        kind = schema.get("type", "object" if "properties" in schema else "null")
        if isinstance(kind, list):
            kind = kind[0] if kind else "null"
        if kind == "object":
            properties = schema.get("properties", {})
            required = set(schema.get("required", ()))
            found = {name: self.simplest(properties.get(name, {}), depth + 1) for name in properties if name not in required}
            value = {name: self.simplest(properties.get(name, {}), depth + 1) for name in schema.get("required", ())}
            value.update({name: part for name, part in found.items() if self._accepts(part)})
            return value
        if kind == "array":
            return [self.simplest(schema.get("items", {}), depth + 1)] * int(schema.get("minItems", 0))
        if kind == "string":
            least = int(schema.get("minLength", 0))
            text = self.word + " " * max(least - len(self.word), 0) if self.word else "x" * least
            maximum = schema.get("maxLength")
            return text if maximum is None or len(text) <= int(maximum) else "x" * least
        if kind in ("integer", "number"):
            low = schema.get("minimum", schema.get("exclusiveMinimum", 0) + (1 if "exclusiveMinimum" in schema else 0))
            high = schema.get("maximum")
            value = low if high is None or low <= high else high
            return int(value) if kind == "integer" else value
        return False if kind == "boolean" else None
