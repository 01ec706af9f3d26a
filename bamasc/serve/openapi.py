"""`GET /openapi.json`: the server's OpenAPI 3.1 document, written out as data."""

from __future__ import annotations

from typing import Any

from bamasc.version import __version__


def _error(description: str = "refused") -> dict[str, Any]:
    return {"description": description,
            "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}}


# What any route may get before the app sees its request (http/connections.py), and the connection then closes.
CONNECTION_REFUSALS = {
    "408": "the request's line and headers (or its body) did not arrive within --request-timeout",
    "431": "the request's line and headers are over 16 KiB",
    "503": "as many connections are open as the server holds; refused as this one opened",
}


# What a stream of server-sent events holds (docs/python.md, "Streaming").
EVENTS = (
    "each is `event: <kind>` and one `data:` line of JSON. `task` ({task_id, thread_id?}) first; then, as they "
    "happen, `call_started` ({task_id, node, model, attempt, reserved}), `call_settled` ({task_id} and a Call's "
    "fields, `charged` included) and `tool` ({task_id, node, name, round, reserved, charged, error}); last, `result` "
    "(the 200 reply's Result and `http_status`: 200) or `error` (the body the plain reply would have, a Result with "
    "status skipped_total or thread_exhausted or an Error, and its `http_status`: 402, 422 or 500). Lines starting "
    "with ':' keep a silent stream open. A refusal before the task starts (400, 401, 409, 413, 422, 429) is plain "
    "JSON. A client that goes away leaves the task running to its end, settled and traced: GET /v1/tasks/{id}."
)


def openapi_document(system: str, budget: float, deadline_s: float | None, auth: bool) -> dict[str, Any]:
    """The document for a server of `system` (its budget and deadline in the descriptions)."""
    number = {"type": "number"}
    nullable_number = {"type": ["number", "null"]}
    nullable_string = {"type": ["string", "null"]}
    nullable_integer = {"type": ["integer", "null"]}
    result = {
        "type": "object",
        "required": ["task_id", "answer", "cost", "bound", "status", "template"],
        "properties": {
            "task_id": {"type": "string"}, "answer": nullable_string, "cost": number, "bound": nullable_number,
            "status": {"type": "string", "enum": ["ok", "exhausted", "failed", "error", "overbilled", "skipped_total",
                                                 "skipped_budget", "too_long", "interrupted", "thread_exhausted"]},
            "template": nullable_string, "budget": nullable_number, "error": nullable_string,
            "task_tokens": nullable_integer, "length_class": nullable_integer, "fits_up_to": nullable_integer,
            "thread_id": {"type": "string", "description": "a thread's turn only: its thread"},
            "turn": {"type": "integer", "minimum": 1, "description": "a thread's turn only: its number"},
        },
    }
    thread = {
        "type": "object",
        "required": ["thread_id", "budget", "charged", "held", "left", "turns"],
        "properties": {
            "thread_id": {"type": "string"}, "budget": nullable_number, "charged": number, "held": number,
            "left": nullable_number,
            "turns": {"type": "array", "items": {"type": "object", "properties": {
                "turn": {"type": "integer"}, "task_id": {"type": "string"}, "status": {"type": "string"},
                "answer": nullable_string, "charged": number}}},
        },
    }
    call = {
        "type": "object",
        "properties": {
            "node": {"type": "string"}, "role": nullable_string, "model": {"type": "string"}, "attempt": {"type": "integer"},
            "prompt_tokens": {"type": "integer"}, "completion_tokens": {"type": "integer"}, "reserved": number,
            "charged": number, "latency_ms": nullable_number, "clamped": {"type": "boolean"},
            "skipped": {"type": "boolean"}, "error": nullable_string, "rate_wait_s": nullable_number,
        },
    }
    security: list[dict[str, list[str]]] = [{"bearer": []}] if auth else []
    deadline = "" if deadline_s is None else f"; at most the plan's deadline of {deadline_s:g} s"
    document: dict[str, Any] = {
        "openapi": "3.1.0",
        "info": {"title": f"bamasc serve: system {system}", "version": __version__,
                 "description": f"Tasks run on a compiled plan, each within {budget:g} µ$ (its proven budget)."},
        "paths": {
            "/v1/tasks": {"post": {
                "summary": "Run a task and wait for its answer",
                "security": security,
                "requestBody": {"required": True, "content": {"application/json": {"schema": {
                    "type": "object", "required": ["task"], "additionalProperties": False,
                    "properties": {
                        "task": {"type": "string", "minLength": 1},
                        "budget": {"type": "number", "exclusiveMinimum": 0, "maximum": budget,
                                   "description": "µ$ for this task, at most the plan's"},
                        "deadline_s": {"type": "number", "exclusiveMinimum": 0,
                                       "description": f"seconds for this task{deadline}"},
                        "thread_id": {"type": "string", "minLength": 1, "maxLength": 256,
                                      "description": "run the task as the next turn of this thread (a conversation): "
                                                     "it waits for the thread's turn before it and sees the earlier "
                                                     "turns through {{history}}"},
                        "thread_budget": {"type": "number", "exclusiveMinimum": 0,
                                          "description": "µ$ for the whole thread, given with its first turn; a later "
                                                         "turn may leave it out, and another value is refused (409)"},
                        "stream": {"type": "boolean",
                                   "description": "true: the reply is server-sent events (text/event-stream); false: "
                                                  "JSON. Left out, the Accept header decides (text/event-stream)"},
                    }}}}},
                "responses": {
                    "200": {"description": "the task ended (see status); asked to stream, its events as they happen: "
                                           + EVENTS,
                            "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Result"}},
                                        "text/event-stream": {"schema": {"type": "string"}}}},
                    "402": {"description": "the total budget (status skipped_total) or the thread's (status "
                                           "thread_exhausted) had no room for the task's worst case; nothing was spent",
                            "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Result"}}}},
                    "409": _error("thread_budget differs from the budget the thread already has"),
                    **{code: _error() for code in ("400", "401", "408", "413", "422", "429")},
                },
            }},
            "/v1/tasks/{task_id}": {"get": {
                "summary": "A task's outcome and calls (recent ones from memory, others from the trace)",
                "security": security,
                "parameters": [{"name": "task_id", "in": "path", "required": True, "schema": {"type": "string"}}],
                "responses": {
                    "200": {"description": "the task, `running` until it ends", "content": {"application/json": {"schema": {
                        "allOf": [{"$ref": "#/components/schemas/Result"}, {"type": "object", "properties": {
                            "calls": {"type": "array", "items": {"$ref": "#/components/schemas/Call"}}}}]}}}},
                    "404": _error(), "401": _error(),
                },
            }},
            "/v1/threads/{thread_id}": {"get": {
                "summary": "A thread's turns (status, answer, charge), its budget, what it charged and what is left",
                "security": security,
                "parameters": [{"name": "thread_id", "in": "path", "required": True, "schema": {"type": "string"}}],
                "responses": {
                    "200": {"description": "the thread", "content": {"application/json": {"schema": {
                        "$ref": "#/components/schemas/Thread"}}}},
                    "404": _error(), "401": _error(),
                },
            }},
            "/v1/budget": {"get": {
                "summary": "What is left of the total budget", "security": security,
                "responses": {"200": {"description": "µ$", "content": {"application/json": {"schema": {
                    "type": "object", "properties": {"total": nullable_number, "spent": number, "held": number,
                                                     "left": nullable_number, "per_task": number}}}}}, "401": _error()},
            }},
            "/healthz": {"get": {"summary": "The server is up (no token needed)",
                                 "responses": {"200": {"description": "ok"}}}},
            "/metrics": {"get": {"summary": "Prometheus text format", "security": security,
                                 "responses": {"200": {"description": "metrics"}, "401": _error()}}},
            "/openapi.json": {"get": {"summary": "This document", "security": security,
                                      "responses": {"200": {"description": "OpenAPI 3.1"}, "401": _error()}}},
        },
        "components": {"schemas": {
            "Result": result,
            "Call": call,
            "Thread": thread,
            "Error": {"type": "object", "properties": {"error": {"type": "object", "properties": {
                "status": {"type": "integer"}, "field": nullable_string, "message": {"type": "string"}}}}},
        }},
    }
    for operations in document["paths"].values():
        for operation in operations.values():
            for code, description in CONNECTION_REFUSALS.items():
                operation["responses"].setdefault(code, _error(description))
    if auth:
        document["components"]["securitySchemes"] = {"bearer": {"type": "http", "scheme": "bearer"}}
    return document
