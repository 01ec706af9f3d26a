"""Python tools: import `module:name`, derive its JSON Schema from type hints, and call it under its timeout.

A tool is the user's own code and runs in this process. A synchronous one runs
in a thread of its own, so a slow one cannot block the event loop; an async
one runs on the loop. Python cannot stop a thread, and an async tool that
ignores its cancellation keeps running: after its timeout the call returns an
error result at once and whatever the tool later returns is dropped. Such a
thread is a daemon, so it does not keep the process from exiting.
"""

from __future__ import annotations

import asyncio
import importlib
import inspect
import json
import sys
import threading
import types
import typing
from collections.abc import Callable

from bamasc.runtime.tool_text import Cutter, describe_exception

_SCALARS = {str: "string", int: "integer", float: "number", bool: "boolean"}
_UNIONS = (typing.Union, types.UnionType)


class ToolDefinitionError(Exception):
    """A python tool that cannot be used: its target does not import, is not callable, or has untyped parameters."""


def load_callable(target: str, base_dir: str | None = None) -> Callable:
    """The callable `module:name` names (`name` may be dotted: `module:Class.method`).

    `base_dir` (the folder of the .bam file) is searched first while the module is imported.
    """
    module_name, colon, attribute = target.partition(":")
    if not colon or not module_name or not attribute:
        raise ToolDefinitionError(f"python = {target!r} is not 'module:name'")
    added = base_dir is not None and base_dir not in sys.path
    if added:
        sys.path.insert(0, base_dir)
    try:
        value = importlib.import_module(module_name)
    except BaseException as exc:  # the module's own code runs here: anything may come out of it
        if isinstance(exc, KeyboardInterrupt):
            raise
        raise ToolDefinitionError(f"cannot import {module_name}: {describe_exception(exc, 400)}") from None
    finally:
        if added and base_dir in sys.path:
            sys.path.remove(base_dir)
    for part in attribute.split("."):
        try:
            value = getattr(value, part)
        except AttributeError:
            raise ToolDefinitionError(f"{module_name} has no attribute {attribute!r}") from None
    if not callable(value):
        raise ToolDefinitionError(f"{target} is a {type(value).__name__}, not a function")
    return value


def is_async(function: Callable) -> bool:
    """Whether calling `function` gives a coroutine to await (an async def, or an object whose __call__ is one)."""
    return inspect.iscoroutinefunction(function) or inspect.iscoroutinefunction(getattr(function, "__call__", None))


def derive_parameters(function: Callable) -> dict:
    """The JSON Schema of `function`'s keyword arguments, from its type hints.

    str, int, float, bool, list[X], dict[str, X], X | None (Optional) and
    Literal[...] are understood; a parameter without a hint or with any other
    type is an error (give `parameters` in the .bam file instead).
    """
    try:
        signature = inspect.signature(function)
        hints = typing.get_type_hints(function)
    except Exception as exc:  # a hint naming what does not exist, a builtin without a signature
        raise ToolDefinitionError(f"cannot read its type hints ({describe_exception(exc, 200)})") from None
    properties, required = {}, []
    for name, parameter in signature.parameters.items():
        if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD, parameter.POSITIONAL_ONLY):
            raise ToolDefinitionError(
                f"parameter {name!r} is not a plain keyword parameter, so its schema cannot be derived: "
                "give `parameters`"
            )
        if name not in hints:
            raise ToolDefinitionError(f"parameter {name!r} has no type hint: add one, or give `parameters`")
        properties[name] = _schema_of(hints[name], name)
        if parameter.default is parameter.empty:
            required.append(name)
    schema = {"type": "object", "properties": properties, "additionalProperties": False}
    if required:
        schema["required"] = required
    return schema


def _schema_of(hint, name: str) -> dict:
    if hint in _SCALARS:
        return {"type": _SCALARS[hint]}
    origin, arguments = typing.get_origin(hint), typing.get_args(hint)
    if hint is list or origin is list:
        return {"type": "array", "items": _schema_of(arguments[0], name)} if arguments else {"type": "array"}
    if hint is dict or origin is dict:
        if arguments and arguments[0] is not str:
            raise ToolDefinitionError(f"parameter {name!r}: JSON object keys are strings, not {arguments[0]!r}")
        return {"type": "object", "additionalProperties": _schema_of(arguments[1], name)} if arguments else {
            "type": "object"
        }
    if origin is typing.Literal and all(isinstance(value, (str, int, float, bool)) for value in arguments):
        return {"enum": list(arguments)}
    if origin in _UNIONS and type(None) in arguments:
        rest = [argument for argument in arguments if argument is not type(None)]
        if len(rest) == 1:
            return {"anyOf": [_schema_of(rest[0], name), {"type": "null"}]}
    raise ToolDefinitionError(
        f"parameter {name!r} has type {hint!r}, which has no derived schema "
        "(str, int, float, bool, list, dict, Optional and Literal do): give `parameters`"
    )


def signature_problem(function: Callable, schema: dict) -> str | None:
    """Why `function` cannot take the arguments `schema` describes as keywords, or None when it can."""
    try:
        parameters = inspect.signature(function).parameters
    except (TypeError, ValueError):
        return None  # a callable without a readable signature: its calls will tell
    takes_any = any(p.kind is p.VAR_KEYWORD for p in parameters.values())
    named = {name for name, p in parameters.items() if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    properties = schema.get("properties", {}) if isinstance(schema.get("properties"), dict) else {}
    unknown = sorted(set(properties) - named) if not takes_any else []
    if unknown:
        return f"the schema names arguments the function does not take: {', '.join(unknown)}"
    required = set(schema.get("required", ())) if isinstance(schema.get("required"), list) else set()
    needed = sorted(
        name
        for name, p in parameters.items()
        if p.default is p.empty and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and name not in required
    )
    if needed:
        return f"the function needs arguments the schema does not require: {', '.join(needed)}"
    return None


async def run_python(function: Callable, asynchronous: bool, arguments: dict, timeout_s: float, shape: Callable):
    """Call `function(**arguments)` and return `("ok", shape(value))` or `("error", message)`, within `timeout_s`.

    `shape` turns the returned value into the call's result; it runs in the
    tool's thread, so a huge value is cut there and never reaches the loop.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    if not asynchronous:
        return await _in_thread(lambda: _sync_call(function, arguments, shape), timeout_s, timeout_s, loop)
    try:
        task = asyncio.ensure_future(function(**arguments))
    except Exception as exc:  # raised before its first await, or returned no awaitable
        return ("error", f"raised {describe_exception(exc)}")
    try:
        done, _ = await asyncio.wait({task}, timeout=timeout_s)
    except asyncio.CancelledError:
        task.cancel()
        raise
    if not done:
        task.cancel()
        task.add_done_callback(_forget)
        return ("error", f"timed out after {timeout_s:g} s")
    if task.cancelled():
        return ("error", "was cancelled")
    if task.exception() is not None:
        return ("error", f"raised {describe_exception(task.exception())}")
    value = task.result()
    del task
    # Turning the value into text runs the value's own code (__str__): under the same deadline.
    return await _in_thread(lambda: shape(value), max(deadline - loop.time(), 0.0), timeout_s, loop)


def _sync_call(function: Callable, arguments: dict, shape: Callable):
    value = function(**arguments)
    if inspect.isawaitable(value):
        if inspect.iscoroutine(value):
            value.close()
        raise ToolDefinitionError("returned an awaitable from a plain def: declare it async def")
    return shape(value)


async def _in_thread(work: Callable, wait_s: float, timeout_s: float, loop: asyncio.AbstractEventLoop):
    """Run `work` in a daemon thread: ("ok", its value) or ("error", why); after `wait_s` stop waiting for it."""
    future = loop.create_future()

    def settle(outcome) -> None:
        if not future.done():  # not given up on by a timeout or a cancellation
            future.set_result(outcome)

    def target() -> None:
        try:
            outcome = ("ok", work())
        except ToolDefinitionError as exc:
            outcome = ("error", str(exc))
        except BaseException as exc:  # SystemExit included: a tool must not end the run
            outcome = ("error", f"raised {describe_exception(exc)}")
        try:
            loop.call_soon_threadsafe(settle, outcome)
        except RuntimeError:  # the loop has closed: the run is over and nobody waits for this
            pass

    threading.Thread(target=target, name="bamasc-tool", daemon=True).start()
    try:
        done, _ = await asyncio.wait({future}, timeout=wait_s)
    finally:
        future.cancel()  # a no-op once settled; otherwise the thread's late result is dropped
    if not done:
        return ("error", f"timed out after {timeout_s:g} s")
    return future.result()


def _forget(task: asyncio.Future) -> None:
    """Retrieve an abandoned task's outcome, so asyncio does not log it as never retrieved."""
    if not task.cancelled():
        task.exception()


def shape_result(value, limit: int) -> Cutter:
    """A tool's return value as its result text: a str as it is, anything else as JSON; cut as it is read."""
    cutter = Cutter(limit)
    if isinstance(value, str):
        cutter.feed(value)
        return cutter
    if isinstance(value, (bytes, bytearray)):
        value = bytes(value).decode("utf-8", "replace")
    else:
        try:
            value = json.dumps(value, ensure_ascii=False, default=str)
        except (TypeError, ValueError, RecursionError) as exc:
            raise ToolDefinitionError(f"returned a value that cannot be written as JSON: {describe_exception(exc)}") \
                from None
    cutter.feed(value)
    return cutter
