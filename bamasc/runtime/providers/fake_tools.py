"""The offline fake's tool calls: what it asks for in a round sent with tools, in each of its modes.

A round of a tool loop (runtime/tool_loop.py) tells the fake, through its
`expect`, how many tool calls a round may make and which of the role's tools
costs the most per call (the largest `max_result`, then the dearest price):
`tools_expect`. No real model is told it, as no real model is told a router's
costliest branch.

- verbose: a round sent with tools asks for that many calls of the costliest
  tool, with arguments that hold to its schema, padded so that the reply (its
  text and every call's arguments) is exactly `max_tokens` tokens, one a
  byte: the worst case the bound prices. Where the schema has no string to
  pad, the text is padded instead.
- echo: the first round asks for the first tool once, with the smallest
  arguments its schema allows; every later round answers.
- random: drawn from the seed: whether to ask at all, how many calls, which
  tools, and how long their arguments are, always within `max_tokens`.
"""

from __future__ import annotations

import json
import random

from bamasc.runtime.providers.base import ToolCall

TOOLS_EXPECT = "tools:"
PAD = "x"  # one byte a token, and nothing JSON escapes


def tools_expect(calls: int, costliest: str, expect: str) -> str:
    """What a round sent with tools expects: the calls a round may make, the name of the tool whose calls cost the
    most, and what the caller reads of an answer (`expect`)."""
    return f"{TOOLS_EXPECT}{calls},{costliest}:{expect}"


def expected_tools(expect: str) -> tuple[int, str, str] | None:
    """(calls, costliest tool, the caller's own expect) of a `tools_expect` string; None for any other expect."""
    if not expect.startswith(TOOLS_EXPECT):
        return None
    head, _, inner = expect[len(TOOLS_EXPECT):].partition(":")
    calls, _, costliest = head.partition(",")
    return (int(calls) if calls.isdigit() else 1), costliest, inner


def plain_expect(expect: str) -> str:
    """The caller's own expect, without the tools hint."""
    found = expected_tools(expect)
    return expect if found is None else found[2]


def tool_reply(mode: str, messages, specs, max_tokens: int, expect: str, rng: random.Random):
    """(text, tool calls) of a round sent with `specs`; None when the fake answers instead."""
    hint = expected_tools(expect)
    calls, costliest = (hint[0], hint[1]) if hint is not None else (1, specs[0].name)
    asked = sum(1 for message in messages if getattr(message, "tool_calls", ()))  # rounds that asked before
    if mode == "verbose":
        chosen = next((spec for spec in specs if spec.name == costliest), specs[0])
        return _fill([chosen] * max(1, calls), max_tokens, asked, pad=True, pad_text=True)
    if mode == "random":
        if rng.random() < 0.3:
            return None
        chosen = [rng.choice(specs) for _ in range(rng.randint(1, max(1, calls)))]
        return _fill(chosen, rng.randint(0, max_tokens), asked, pad=True, pad_text=False)
    return None if asked else _fill(specs[:1], max_tokens, asked, pad=False, pad_text=False)


def _fill(specs, size: int, round_: int, pad: bool, pad_text: bool):
    """Calls of `specs`, as many as fit in `size` bytes with their smallest arguments; with `pad`, the arguments
    padded together to `size` bytes where their schemas allow, and with `pad_text` the text takes what is left.
    None when not one call fits."""
    kept, used = [], 0
    for spec in specs:
        arguments = _compact(smallest_instance(spec.parameters))
        if used + _bytes(arguments) > size:
            break
        kept.append([spec, arguments])
        used += _bytes(arguments)
    if not kept:
        return None
    left = size - used
    for index, entry in enumerate(kept if pad else ()):  # an equal share each; one that cannot grow passes it on
        padded = _padded(entry[0].parameters, entry[1], left // (len(kept) - index))
        left -= _bytes(padded) - _bytes(entry[1])
        entry[1] = padded
    calls = tuple(ToolCall(f"call_{round_}_{i}", spec.name, arguments) for i, (spec, arguments) in enumerate(kept))
    return (PAD * left if pad_text else ""), calls


def smallest_instance(schema):
    """A small value that holds to `schema` for the schemas tools are declared with (objects of strings, numbers,
    booleans, arrays, enums; `anyOf`/`oneOf` take their first choice)."""
    if not isinstance(schema, dict):
        return {}
    if "const" in schema:
        return schema["const"]
    if schema.get("enum"):
        return schema["enum"][0]
    for choices in ("anyOf", "oneOf"):
        if schema.get(choices):
            return smallest_instance(schema[choices][0])
    kind = schema.get("type", "object")
    if isinstance(kind, list):
        kind = kind[0] if kind else "object"
    if kind == "object":
        properties = schema.get("properties", {})
        return {name: smallest_instance(properties.get(name, {})) for name in schema.get("required", [])}
    if kind == "string":
        return PAD * int(schema.get("minLength", 0))
    if kind in ("integer", "number"):
        return schema.get("minimum", 0)
    if kind == "boolean":
        return False
    if kind == "array":
        return [smallest_instance(schema.get("items", {})) for _ in range(int(schema.get("minItems", 0)))]
    return None


def pad_key(schema) -> str | None:
    """The key of an object's arguments a padding string may go under: a plain string property, or else a new key
    where the schema allows others; None where neither is allowed."""
    if not isinstance(schema, dict):
        return None
    properties = schema.get("properties", {})
    for name, field in properties.items():
        if isinstance(field, dict) and set(field) <= {"type", "description", "title"} and field.get("type") == "string":
            return name
    limits = ("propertyNames", "maxProperties", "patternProperties", "unevaluatedProperties")
    if schema.get("additionalProperties", True) is not False and not any(key in schema for key in limits):
        return "pad" if "pad" not in properties else None
    return None


def _padded(schema, arguments: str, extra: int) -> str:
    """`arguments` (an object's smallest instance) `extra` bytes longer, in its padding string; as they are when the
    schema leaves no room, or the padding key alone would take more than `extra`."""
    key = pad_key(schema)
    value = json.loads(arguments)
    if key is None or extra <= 0 or not isinstance(value, dict):
        return arguments
    start = value.setdefault(key, "")
    framing = _bytes(_compact(value)) - _bytes(arguments)  # a new key's name and quotes
    if framing > extra:
        return arguments
    value[key] = start + PAD * (extra - framing)
    return _compact(value)


def _bytes(text: str) -> int:
    return len(text.encode("utf-8"))


def _compact(value) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)
