"""The ASGI app of `bamasc serve`: its routes, each a thin user of the Python API's Session.

Every route but `/healthz` needs the bearer token (unless the server runs
without one). No request reaches a handler's exception: a refused request is
a JSON error naming the field, and a defect is a 500 logged in one line, so
the log holds no traceback and the server keeps serving.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections import Counter, OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from starlette.applications import Starlette
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from bamasc.api.errors import BamError, UsageError
from bamasc.api.records import CallSettled, CallStarted, TaskDone
from bamasc.metering.refusals import Refused
from bamasc.serve.lookup import task_from_trace
from bamasc.serve.keys import sender
from bamasc.http.metrics import BUSY, CONTENT_TYPE
from bamasc.serve.metrics import scrape, serve_metrics
from bamasc.serve.openapi import openapi_document
from bamasc.http.requests import Problem, authorized, read_body, routing_headers, task_fields, thread_fields
from bamasc.http.requests import wants_stream
from bamasc.http.ui import LiveSpend, ui_routes

log = logging.getLogger("bamasc.serve")
# 401 says how to authenticate; 408 closes the connection, whose body may still be arriving.
HEADERS = {401: {"WWW-Authenticate": "Bearer"}, 408: {"Connection": "close"}}


@dataclass(frozen=True)
class Limits:
    """What one request may ask of the server."""

    max_body: int = 1 << 20  # bytes of a request body
    max_task: int = 200_000  # characters of a task's text
    max_pending: int = 1024  # tasks running or waiting at once; more are refused with 429
    keep: int = 1_000  # recent tasks GET /v1/tasks/{id} shows from memory (older ones are read from the trace)
    spare: int = 256  # requests in progress beyond max_pending (health, metrics, refusals) before all get 429
    request_s: float = 30.0  # seconds a request's head may take to arrive, then its body; a slower one gets 408
    max_head: int = 16 << 10  # bytes of a request's line and headers (h11's own default); more get 431
    keep_alive_s: float = 15.0  # seconds a stream of events may stay silent before a comment line keeps it open

    @property
    def max_requests(self) -> int:
        """Requests in progress at once, any route: with max_body, what bounds the memory bodies take."""
        return self.max_pending + self.spare


class Tasks:
    """The outcomes of recent tasks, the oldest forgotten past `keep` (the trace holds every one)."""

    def __init__(self, keep: int) -> None:
        self.keep = keep
        self.items: OrderedDict[str, dict[str, Any]] = OrderedDict()

    def put(self, task_id: str, value: dict[str, Any]) -> None:
        self.items[task_id] = value
        self.items.move_to_end(task_id)
        while len(self.items) > self.keep:
            self.items.popitem(last=False)


async def _key(request: Request, gate: Any):
    """The client key a request is sent with, and its team; a Problem (401) without a valid one."""
    scheme, _, given = request.headers.get("authorization", "").partition(" ")
    try:
        found = await gate.who(given.strip()) if gate is not None and scheme.lower() == "bearer" and given.strip() \
            else None
    except Refused as refused:  # the fleet's ledger is lost or out of reach: nothing is run until it is back
        raise Problem(503, refused.error or refused.limit) from None
    if found is None:
        raise Problem(401, "a bearer token or client key is needed: Authorization: Bearer <token or key>")
    return found


def result_body(result: Any) -> dict[str, Any]:
    return {"task_id": result.task_id, "answer": result.answer, "cost": round(result.cost, 6),
            "bound": result.bound, "status": result.status, "template": result.template,
            "budget": result.budget, "error": result.error, "task_tokens": result.task_tokens,
            "length_class": result.length_class, "fits_up_to": result.fits_up_to,
            **({"thread_id": result.thread_id, "turn": result.turn} if result.thread_id is not None else {})}


def thread_body(state: Any) -> dict[str, Any]:
    """`GET /v1/threads/{id}`: the thread's turns (status, answer, charge), its budget, charged, held and left."""
    return {"thread_id": state.thread_id, "budget": state.budget, "charged": round(state.charged, 6),
            "held": round(state.held, 6), "left": None if state.left is None else round(state.left, 6),
            "turns": [{"turn": turn.turn, "task_id": turn.task_id, "status": turn.status, "answer": turn.answer,
                       "charged": round(turn.charged, 6)} for turn in state.turns]}


def call_body(call: Any) -> dict[str, Any]:
    return {name: getattr(call, name) for name in (
        "node", "role", "model", "attempt", "prompt_tokens", "completion_tokens", "reserved", "charged",
        "latency_ms", "clamped", "skipped", "error", "rate_wait_s")}


def event_frame(event: Any) -> tuple[str, dict[str, Any]]:
    """(kind, data) of a server-sent event for one event of a task's stream (the API's records, as JSON)."""
    if isinstance(event, CallStarted):
        return "call_started", {"task_id": event.task_id, "node": event.node, "model": event.model,
                                "attempt": event.attempt, "reserved": event.reserved}
    if isinstance(event, CallSettled):
        return "call_settled", {"task_id": event.task_id, **call_body(event.call)}
    return "tool", {"task_id": event.task_id, "node": event.node, "name": event.name, "round": event.round,
                    "reserved": event.reserved, "charged": event.charged, "error": event.error}


def sse(kind: str, data: dict[str, Any]) -> bytes:
    """One server-sent event: JSON holds no raw newline, so its data is one line."""
    return f"event: {kind}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n".encode("utf-8")


async def frames(opened: dict[str, Any], queue: asyncio.Queue[tuple[str, dict[str, Any]]],
                 keep_alive_s: float) -> AsyncIterator[bytes]:
    """`task` (its id) first, then each event as it comes, to the final `result` or `error`; a comment line
    whenever `keep_alive_s` pass without one, so proxies keep a long call's connection open."""
    yield sse("task", opened)
    while True:
        try:
            async with asyncio.timeout(keep_alive_s):
                kind, data = await queue.get()
        except TimeoutError:
            yield b": keep-alive\n\n"
            continue
        yield sse(kind, data)
        if kind in ("result", "error"):
            return


class EventStream(StreamingResponse):
    """A stream of server-sent events whose client may go away: the task it follows runs on, so that is no error."""

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        try:
            await super().__call__(scope, receive, send)
        except (ClientDisconnect, OSError):
            pass


def refusal(problem: Exception, request: Request) -> tuple[int, dict[str, Any]]:
    """The status and JSON body answering a request that raised `problem`: a Problem as it says, a BamError 422,
    anything else a defect (500, one line in the log, never a traceback)."""
    if isinstance(problem, Problem):
        return problem.status, problem.body()
    if isinstance(problem, BamError):
        return 422, Problem(422, problem.message).body()
    log.error("internal error on %s %s: %s: %s", request.method, request.url.path, type(problem).__name__,
              str(problem)[:300])
    return 500, Problem(500, "internal error").body()


def build_app(plan: Any, session: Any, token: bytes | None, limits: Limits = Limits(),
              responses: Counter[int] | None = None, gate: Any = None) -> Starlette:
    """The app serving `session` (open, on `plan`); `token` None serves without authentication, unless `gate`
    (serve/keys.py) takes the proxy fleet's client keys, which are then needed (or the token).
    `responses` counts answers by status for /metrics (the connections' refusals may add to it)."""
    tasks = Tasks(limits.keep)
    responses = Counter() if responses is None else responses
    active = [0]  # requests in progress
    document = openapi_document(plan.system, plan.budget, plan.deadline_s, token is not None)
    counted = serve_metrics(session, responses)
    owners: dict[str, str] = {}  # task id -> the client key that sent it (what that key's /ui shows)
    spend = LiveSpend(session.trace)
    jobs: set[asyncio.Future[None]] = set()  # streamed tasks still running, their clients gone or not

    def guarded(handler: Callable[[Request], Awaitable[Response]], open_route: bool = False
                ) -> Callable[[Request], Awaitable[Response]]:
        async def endpoint(request: Request) -> Response:
            active[0] += 1
            try:
                if active[0] > limits.max_requests:
                    counted.refused(BUSY)
                    raise Problem(429, f"{limits.max_requests} requests are in progress; try again later")
                request.state.key = None
                if not open_route and not (token is None and gate is None) \
                        and not (token is not None and authorized(request.headers.get("authorization"), token)):
                    request.state.key = await _key(request, gate)
                response = await handler(request)
            except Exception as problem:
                status, body = refusal(problem, request)
                response = JSONResponse(body, status_code=status, headers=HEADERS.get(status))
            finally:
                active[0] -= 1
            responses[response.status_code] += 1
            return response

        return endpoint

    async def post_task(request: Request) -> Response:
        if session.in_flight >= limits.max_pending:
            counted.refused(BUSY)
            raise Problem(429, f"{limits.max_pending} tasks are already running or waiting; try again later")
        raw = await read_body(request, limits.max_body, limits.request_s)
        text, budget, deadline = task_fields(raw, plan.budget, plan.deadline_s, limits.max_task)
        thread_id, thread_budget = thread_fields(raw)
        streamed = wants_stream(raw, request.headers.get("accept"))  # every field checked before a stream starts
        runner = session
        if thread_id is not None:
            try:
                runner = session.thread(thread_id, thread_budget)
            except UsageError as problem:  # a thread the server knows with another budget
                raise Problem(409, problem.message, "thread_budget") from None
        task_id = session.new_task_id()
        hold = None
        if request.state.key is not None:
            key, team = request.state.key
            owners[task_id] = key.name
            ceiling = min(budget or plan.budget, key.scope_budget or plan.budget)
            budget = ceiling
            try:
                hold = await gate.hold(key, team, task_id, ceiling)
            except Refused as refused:
                counted.refused(refused.limit)
                raise Problem(503 if refused.limit == "ledger" else 402, refused.error or refused.limit) from None
        tasks.put(task_id, {"task_id": task_id, "status": "running"})
        key = None if hold is None else request.state.key[0].name

        async def ended(result: Any) -> tuple[int, dict[str, Any]]:
            """The task's record kept, its key's hold closed; the status and body of its reply."""
            if hold is not None:
                counted.charged_to_key(key, await gate.close(hold, result.cost))
            if result.status == "skipped_total":  # the total had no room for the task's worst case
                counted.refused("total")
            body = result_body(result)
            tasks.put(task_id, {**body, "calls": [call_body(call) for call in result.calls]})
            refused = result.status in ("skipped_total", "thread_exhausted")  # a total or a thread had no room: 402
            return 402 if refused else 200, body

        async def failed() -> None:
            tasks.items.pop(task_id, None)
            if hold is not None:
                counted.charged_to_key(key, await gate.close(hold, None))

        if streamed:
            return event_stream(runner, text, budget, deadline, task_id, thread_id, ended, failed, request)
        try:
            result = await runner.run(text, budget=budget, deadline=deadline, task_id=task_id,
                                      **sender(request.state.key))
        except BaseException:
            await failed()
            raise
        status, body = await ended(result)
        return JSONResponse(body, status_code=status)

    def event_stream(runner: Any, text: str, budget: Any, deadline: Any, task_id: str, thread_id: str | None,
                     ended: Any, failed: Any, request: Request) -> Response:
        """The task's events as server-sent events. The task runs in a job of its own, so a client that goes away
        leaves it running to its end: settled, traced and kept for GET /v1/tasks/{id} as a plain request's."""
        queue: asyncio.Queue[tuple[str, dict[str, Any]]] = asyncio.Queue()

        async def drive() -> None:
            result: Any = None  # the stream's last event, TaskDone, holds it
            try:
                async for event in runner.stream(text, budget=budget, deadline=deadline, task_id=task_id,
                                                 **sender(request.state.key)):
                    if isinstance(event, TaskDone):
                        result = event.result
                    else:
                        queue.put_nowait(event_frame(event))
            except BaseException as problem:
                await failed()
                if not isinstance(problem, Exception):
                    raise
                status, body = refusal(problem, request)
            else:
                try:
                    status, body = await ended(result)
                except Exception as problem:
                    status, body = refusal(problem, request)
            # The final event: the body and status the plain reply would have had.
            queue.put_nowait(("result" if status == 200 else "error", {**body, "http_status": status}))

        job = asyncio.ensure_future(drive())
        jobs.add(job)
        job.add_done_callback(jobs.discard)
        opened = {"task_id": task_id, **({"thread_id": thread_id} if thread_id is not None else {})}
        return EventStream(frames(opened, queue, limits.keep_alive_s), media_type="text/event-stream",
                           headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"})

    async def get_thread(request: Request) -> Response:
        thread_id = request.path_params["thread_id"]
        state = session.thread_state(thread_id)
        if state is None:
            raise Problem(404, f"no thread {thread_id[:80]!r} in this server's memory or trace", "thread_id")
        return JSONResponse(thread_body(state))

    async def get_task(request: Request) -> Response:
        task_id = request.path_params["task_id"]
        found = tasks.items.get(task_id)
        if found is None and session.trace:
            found = await asyncio.to_thread(task_from_trace, session.trace, task_id)  # one read of the trace
        if found is None:
            raise Problem(404, f"no task {task_id[:80]!r} in this server's memory or trace", "task_id")
        return JSONResponse(found)

    async def get_budget(request: Request) -> Response:
        state = session.budget
        return JSONResponse({"total": state.total, "spent": round(state.spent, 6), "held": round(state.held, 6),
                             "left": None if state.left is None else round(state.left, 6), "per_task": plan.budget})

    async def healthz(request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    async def metrics(request: Request) -> Response:
        return Response(scrape(counted, session), media_type=CONTENT_TYPE)

    async def spend_view(request: Request) -> dict:
        """/ui's summary: everything for the token's holder, a client key's own tasks for a key."""
        key = None
        if not (token is None and gate is None) and not (token is not None and authorized(
                request.headers.get("authorization"), token)):
            key, _ = await _key(request, gate)
        state = session.budget
        live = {"total": state.total, "left": None if state.left is None else round(state.left, 6)}
        if key is None:
            return await spend.summary(None, live)
        # A task is the key's before its first trace line (`owners`), and from its task line (which names its key)
        # on, also after a restart; a view kept until the trace grows is still the key's.
        return await spend.summary(lambda task: owners.get(task.task_id, task.key) == key.name, {"key": key.name},
                                   view=f"key {key.name}")

    async def openapi(request: Request) -> Response:
        return JSONResponse(document)

    async def not_found(request: Request, problem: Exception) -> Response:
        status = getattr(problem, "status_code", 404)
        responses[status] += 1
        message = "no such route" if status == 404 else "method not allowed on this route"
        # A 405 says which methods the route takes (Starlette's exception carries the `Allow` header).
        return JSONResponse(Problem(status, message).body(), status_code=status, headers=routing_headers(problem))

    routes = [
        Route("/v1/tasks", guarded(post_task), methods=["POST"]),
        Route("/v1/tasks/{task_id}", guarded(get_task), methods=["GET"]),
        # `:path`: a thread id may hold '/', as any text may (it is a key, never a path)
        Route("/v1/threads/{thread_id:path}", guarded(get_thread), methods=["GET"]),
        Route("/v1/budget", guarded(get_budget), methods=["GET"]),
        Route("/healthz", guarded(healthz, open_route=True), methods=["GET"]),
        Route("/metrics", guarded(metrics), methods=["GET"]),
        Route("/openapi.json", guarded(openapi), methods=["GET"]),
        # /ui's summary checks its caller itself (a key sees its own tasks); the page and its scripts hold no data.
        *(Route(route.path, guarded(route.endpoint, open_route=True), methods=["GET"])
          for route in ui_routes(spend_view, f"bamasc serve: {plan.system}")),
    ]
    app = Starlette(routes=routes, exception_handlers={404: not_found, 405: not_found})
    app.state.streamed = jobs  # what a graceful stop waits for (serve/main.py)
    return app
