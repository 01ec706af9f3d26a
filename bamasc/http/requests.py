"""What a request may carry: its bearer token, a body read up to a cap, and a task's fields checked one by one.

Everything here turns a hostile request into a `Problem` (an HTTP status and
a message naming the field) and never into an exception the server would log.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import math
from typing import Any

from starlette.requests import ClientDisconnect

FIELDS = ("task", "budget", "deadline_s", "thread_id", "thread_budget", "stream")
BODY_SECONDS = 30.0  # a body that takes longer to arrive is refused (408): a slow sender holds no task


class Problem(Exception):
    """A request refused: the HTTP status, the field at fault (or None) and why."""

    def __init__(self, status: int, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.field = field

    def body(self) -> dict[str, Any]:
        return {"error": {"status": self.status, "field": self.field, "message": self.message}}


def authorized(header: str | None, token: bytes | None) -> bool:
    """Whether an Authorization header carries the token (compared in constant time); any, without a token."""
    if token is None:
        return True
    if not header:
        return False
    scheme, _, given = header.partition(" ")
    if scheme.lower() != "bearer":
        return False
    return hmac.compare_digest(given.strip().encode("utf-8", "surrogateescape"), token)


async def read_body(request: Any, cap: int, seconds: float = BODY_SECONDS) -> bytes:
    """The body, refused with 413 past `cap` bytes (by its Content-Length, or as it arrives) and 408 when it takes
    over `seconds` to arrive."""
    length = request.headers.get("content-length")
    if length is not None:
        if not length.isdigit():
            raise Problem(400, "Content-Length is not a number of bytes")
        if int(length) > cap:
            raise Problem(413, f"the body is {length} bytes; at most {cap} are read")

    async def gather() -> bytes:
        chunks, size = [], 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > cap:
                raise Problem(413, f"the body is over {cap} bytes; at most {cap} are read")
            chunks.append(chunk)
        return b"".join(chunks)

    try:
        async with asyncio.timeout(seconds):  # no task of its own, unlike wait_for
            return await gather()
    except TimeoutError:
        raise Problem(408, f"the body did not arrive within {seconds:g} s") from None
    except ClientDisconnect:
        raise Problem(400, "the connection closed before the body arrived") from None


def routing_headers(problem: Exception) -> dict[str, str]:
    """The headers of Starlette's 404 or 405, a 405's `Allow` in one order (the route keeps its methods in a set)."""
    headers = dict(getattr(problem, "headers", None) or {})
    for name in [name for name in headers if name.lower() == "allow"]:
        headers[name] = ", ".join(sorted(method.strip() for method in headers[name].split(",")))
    return headers


def json_body(raw: bytes) -> Any:
    """The JSON value of a request's body; a Problem (400) says why it has none."""
    try:
        return json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise Problem(400, "the body is not UTF-8") from None
    except RecursionError:
        raise Problem(400, "the body is nested too deeply") from None
    except ValueError as problem:  # JSONDecodeError, and an integer of too many digits
        raise Problem(400, f"the body is not JSON: {str(problem)[:200]}") from None


def task_fields(raw: bytes, plan_budget: float, plan_deadline: float | None, max_task: int) -> tuple[str, Any, Any]:
    """(task, budget or None, deadline_s or None) of a POST /v1/tasks body; a Problem names what is wrong."""
    data = json_body(raw)
    if not isinstance(data, dict):
        raise Problem(400, f"the body must be a JSON object, not {_kind(data)}")
    for key in data:
        if key not in FIELDS:
            raise Problem(422, f"unknown field {key[:80]!r}; a task takes {', '.join(FIELDS)}", key[:80])
    task = data.get("task")
    if not isinstance(task, str) or not task.strip():
        raise Problem(422, f"task must be a non-empty string, not {_kind(task)}", "task")
    if len(task) > max_task:
        raise Problem(422, f"task is {len(task)} characters; at most {max_task} are taken", "task")
    for field in ("budget", "deadline_s"):  # a field given is a number, as the OpenAPI document says; null is not
        if field in data and data[field] is None:
            raise Problem(422, f"{field} must be a number, not null (leave it out for the plan's)", field)
    budget = data.get("budget")
    if budget is not None:
        _number(budget, "budget", "µ$")
        if not 0 < budget <= plan_budget * (1 + 1e-12):
            raise Problem(422, f"budget must be above 0 and at most the plan's {plan_budget:g} µ$, not {budget!r}", "budget")
    deadline = data.get("deadline_s")
    if deadline is not None:
        _number(deadline, "deadline_s", "seconds")
        limit = math.inf if plan_deadline is None else plan_deadline
        if not 0 < deadline <= limit * (1 + 1e-12):
            later = "" if plan_deadline is None else f" and at most the plan's {plan_deadline:g} s"
            raise Problem(422, f"deadline_s must be above 0{later}, not {deadline!r}", "deadline_s")
    return task, budget, deadline


def thread_fields(raw: bytes) -> tuple[str | None, float | None]:
    """(thread_id, thread_budget) of a POST /v1/tasks body `task_fields` took: (None, None) for a task of no
    thread. Any text up to 256 characters names a thread (it is a key, never a path)."""
    from bamasc.metering.threads import thread_budget_problem, thread_id_problem

    if b'"thread_' not in raw:
        return None, None
    data = json_body(raw)
    thread_id, budget = data.get("thread_id"), data.get("thread_budget")
    if thread_id is None:
        if "thread_budget" in data:
            raise Problem(422, "thread_budget needs a thread_id", "thread_budget")
        return None, None
    problem = thread_id_problem(thread_id)
    if problem is not None:
        raise Problem(422, problem, "thread_id")
    if "thread_budget" in data and budget is None:
        raise Problem(422, "thread_budget must be a number, not null (leave it out for the thread's)", "thread_budget")
    problem = thread_budget_problem(budget)
    if problem is not None:
        raise Problem(422, problem, "thread_budget")
    return thread_id, budget


def wants_stream(raw: bytes, accept: str | None) -> bool:
    """Whether a POST /v1/tasks body `task_fields` took asks for server-sent events: its `stream` when given
    (true or false), else whether the Accept header lists text/event-stream (a wildcard does not)."""
    data = json_body(raw) if b'"stream"' in raw or b"\\u" in raw else {}  # the key, written plainly or escaped
    if "stream" in data:
        if not isinstance(data["stream"], bool):
            raise Problem(422, f"stream must be true or false, not {_kind(data['stream'])}", "stream")
        return bool(data["stream"])
    for media_range in (accept or "").split(","):
        kind, *parameters = (part.strip().lower() for part in media_range.split(";"))
        if kind == "text/event-stream" and not any(p.replace(" ", "") in ("q=0", "q=0.0", "q=0.00", "q=0.000")
                                                    for p in parameters):
            return True
    return False


def _number(value: object, field: str, unit: str) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise Problem(422, f"{field} must be a number of {unit}, not {_kind(value)}", field)
    try:
        finite = math.isfinite(value)
    except OverflowError:  # an integer too large for a float
        finite = False
    if not finite:
        raise Problem(422, f"{field} must be a finite number of {unit}, not {_shown(value)}", field)


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _kind(value: object) -> str:
    if value is None:
        return "null"
    return {bool: "a boolean", int: "a number", float: "a number", str: "a string", list: "an array",
            dict: "an object"}.get(type(value), type(value).__name__)
