"""The ASGI app of `bamasc proxy`: requests of every registered wire protocol reserved, forwarded, settled.

The money is the metering core's: each call is admitted through the same
chain as `exec`'s calls (its scope's ledger, then its upstream key's pace),
and the protocol unit (metering/protocols/) reads and shapes what is on the
wire. This module is HTTP and translation. A request goes through four
steps, and money moves only in the last three:

1. Read: the body (capped), the model (one the config declares for this
   protocol's API), the scope (`X-Bamasc-Task`, else one scope per client key) and
   its budget (`X-Bamasc-Budget`, else the config's default). A request that
   fails here is a 4xx and nothing is reserved.
2. Reserve: the prompt bound at the dearest rate it could be billed, plus the
   output cap on every choice, in what is left of the scope and the total.
   The output cap sent upstream is the client's, lowered to what is left
   (and set to it when the client sent none). A request that cannot afford its
   prompt and a useful output is refused with 402, never forwarded.
3. Forward: to the model's upstream with its key from the environment.
4. Close: the reported usage is charged (beyond the reservation it is charged as
   billed and closes the scope as `overbilled`); a reply the upstream surely
   did not bill (metering/replies.py) releases the hold; anything else (a
   timeout, a dropped connection or stream, a 500, a reply without usage)
   keeps the whole hold.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging

import aiohttp
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from bamasc.encodings import counting_tokenizer
from bamasc.http.metrics import CONTENT_TYPE, CountResponses, Metrics
from bamasc.http.requests import Problem, json_body, read_body, routing_headers
from bamasc.metering.admission import Admissions, Attempt, PaceLink
from bamasc.metering.afford import Cost
from bamasc.metering.calibrate import Learn
from bamasc.metering.protocols import CHAT, MESSAGES, StreamReader, WireError, WireProtocol, check_betas, protocols
from bamasc.metering.refusals import Refused
from bamasc.metering.replies import surely_unbilled
from bamasc.metering.scopes import RefusalLines, ScopeLink
from bamasc.proxy.admin import admin_routes
from bamasc.proxy.config import Settings
from bamasc.proxy.access import caller, client_key, same, scope_and_budget
from bamasc.proxy.settle import Metered
from bamasc.proxy.spend import spend_routes

log = logging.getLogger("bamasc.proxy")

# Output cap sent when neither the client nor the model's `max_output` sets one.
DEFAULT_OUTPUT_CAP = 8192
def build_app(settings: Settings, ledger) -> Starlette:
    """The proxy's app; `app.state.metrics` holds its series, and their `responses` the connection layer's too."""
    sessions: list[aiohttp.ClientSession] = []
    metrics = Metrics({upstream.model.name for upstream in settings.upstreams.values()},
                      [key.name for key, _ in settings.declared_keys])

    def client() -> aiohttp.ClientSession:
        # Made on first use, inside the server's event loop.
        if not sessions:
            timeout = aiohttp.ClientTimeout(total=settings.timeout, connect=30.0)
            sessions.append(aiohttp.ClientSession(timeout=timeout, auto_decompress=False))
        return sessions[0]

    def serve(protocol: WireProtocol):
        async def forward(request: Request) -> Response:
            return await _guarded(request, protocol, settings, ledger, client(), metrics)
        return forward

    async def scope(request: Request) -> Response:
        try:
            who = await caller(request, settings)
            view = await ledger.view(who.scope(request.path_params["scope"]))  # a key sees its own scopes only
        except Problem as problem:
            return _error(CHAT, problem.status, problem.message, _KINDS[problem.status])
        except Refused as refused:
            return _error(CHAT, 503, f"bamasc proxy: {refused.error}", _KINDS[503])
        if view is None:
            return _error(CHAT, 404, "no such scope", "not_found_error")
        return JSONResponse(view)

    def operator(request: Request) -> bool:
        """Whether `request` comes from the holder of the proxy's token or its admin token (any, with --no-auth)."""
        return (settings.token is None and settings.keys is None) or same(client_key(request), settings.token) \
            or same(client_key(request), settings.admin_token)

    async def budget(request: Request) -> Response:
        if not operator(request):
            return _error(CHAT, 401, "the proxy's total is shown to its token's or its admin token's holder",
                          "authentication_error")
        try:
            return JSONResponse(await ledger.totals())
        except Refused as refused:
            return _error(CHAT, 503, f"bamasc proxy: {refused.error}", _KINDS[503])

    async def healthz(request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    async def metrics_route(request: Request) -> Response:
        # Every key's spend is in it: a client key sees its own scopes, not this.
        if not operator(request):
            return _error(CHAT, 401, "the proxy's metrics are shown to its token's or its admin token's holder",
                          "authentication_error")
        try:
            totals = await ledger.totals()
        except Refused:  # the shared ledger is out of reach: its gauges are left out, the counters still served
            metrics.scraped = {}
        else:
            metrics.ledger(totals["charged"], totals["held"], totals["total"], totals["left"])
        return Response(metrics.text(), media_type=CONTENT_TYPE)

    async def models(request: Request) -> Response:
        protocol = _protocol_of(request)
        try:
            who = await caller(request, settings)
        except Problem as problem:
            return _error(protocol, problem.status, problem.message, _KINDS[problem.status])
        except Refused as refused:
            return _error(protocol, 503, f"bamasc proxy: {refused.error}", _KINDS[503])
        names = sorted({name for (api, name), upstream in settings.upstreams.items()
                        if api == protocol.api and (who.key is None or who.key.may_use(upstream.model))})
        if protocol.api == "anthropic":
            data = [{"type": "model", "id": name, "display_name": name, "created_at": "1970-01-01T00:00:00Z"}
                    for name in names]
            return JSONResponse({"data": data, "has_more": False, "first_id": names[0] if names else None,
                                 "last_id": names[-1] if names else None})
        return JSONResponse({"object": "list", "data": [{"id": name, "object": "model", "created": 0,
                                                         "owned_by": "bamasc-proxy"} for name in names]})

    async def unknown(request: Request, problem: Exception) -> Response:
        """A route the proxy does not serve, or a method it does not take: the protocol's JSON error, never text."""
        status = getattr(problem, "status_code", 404)
        what = "is not served by the proxy" if status == 404 else f"does not take {request.method}"
        served = ", ".join([*(f"POST {known.routes[0]}" for known in protocols()),
                            "GET /v1/models", "GET /v1/scopes/SCOPE", "GET /v1/budget", "GET /metrics",
                            "GET /ui"])
        answer = _error(_protocol_of(request), status, f"bamasc proxy: {request.url.path} {what} (it serves {served})",
                        _KINDS.get(status, "invalid_request_error"))
        answer.headers.update(routing_headers(problem))  # a 405's `Allow`
        return answer

    @contextlib.asynccontextmanager
    async def lifespan(app):
        yield
        for session in sessions:
            await session.close()

    routes = [Route(path, serve(protocol), methods=["POST"]) for protocol in protocols() for path in protocol.routes]
    routes += [
        Route("/v1/scopes/{scope:path}", scope, methods=["GET"]),
        Route("/v1/budget", budget, methods=["GET"]),
        Route("/healthz", healthz, methods=["GET"]),
        Route("/metrics", metrics_route, methods=["GET"]),
        Route("/v1/models", models, methods=["GET"]),
        *admin_routes(settings, ledger),
        *spend_routes(settings, ledger),
    ]
    app = Starlette(routes=routes, lifespan=lifespan, exception_handlers={404: unknown, 405: unknown},
                    middleware=[Middleware(CountResponses, responses=metrics.responses)])
    app.state.metrics = metrics
    return app


def _protocol_of(request: Request) -> WireProtocol:
    """The protocol whose error shape a request reads: Anthropic's where its client says so, else OpenAI's."""
    anthropic = "anthropic-version" in request.headers or request.url.path.startswith("/v1/messages")
    return MESSAGES if anthropic else CHAT


def _error(protocol: WireProtocol, status: int, message: str, kind: str, field: str | None = None) -> JSONResponse:
    return JSONResponse(protocol.error(message, kind, field), status)


_KINDS = {400: "invalid_request_error", 401: "authentication_error", 402: "budget_exceeded",
          403: "permission_error", 404: "not_found_error", 405: "invalid_request_error", 409: "conflict_error",
          408: "request_timeout", 413: "request_too_large", 503: "ledger_unavailable"}


async def _guarded(request: Request, protocol: WireProtocol, settings: Settings, ledger,
                   client: aiohttp.ClientSession, metrics: Metrics) -> Response:
    chain = None
    try:
        who = await caller(request, settings)
        raw = await read_body(request, settings.max_body, settings.request_s)
        body = _json(raw)
        asked = protocol.read(body)
        upstream = settings.upstreams.get((protocol.api, asked.model))
        if upstream is None:
            names = sorted(name for api, name in settings.upstreams if api == protocol.api)
            raise Problem(404, f"model {asked.model!r} is not declared for the {protocol.name} protocol in the "
                               f"proxy's config; declared: {', '.join(names) or 'none'}", "model")
        model = upstream.model
        if who.key is not None and not who.key.may_use(model):
            raise Problem(403, f"key '{who.key.name}' may not use model {asked.model!r} (it may use "
                               f"{', '.join(who.key.models)})", "model")
        _, scope, budget = scope_and_budget(request, settings, who)
        if protocol.api == "anthropic":
            check_betas(request.headers.get("anthropic-beta"), model)
        tokenizer = counting_tokenizer(model.model_id, model.tokenizer, upstream.official)
        # A prompt that extends one its scope already sent is bounded by what that one was billed.
        prompt = protocol.prompt(body)
        bound = settings.calibration.bound(scope, model.name, prompt,
                                           protocol.prompt_bound(body, tokenizer, settings.exact))
        pricing = model.prices()
        rates = pricing.worst_rates(bound)
        # A client may mark its prompt for the cache (Anthropic's `cache_control`): every prompt token may then be
        # billed as a cache write, dearer than input.
        input_cost = max(rates.input, rates.cache_write) * bound + pricing.per_request
        ceiling = asked.requested or model.max_output or DEFAULT_OUTPUT_CAP
        cost = Cost(input_cost, rates.output, asked.choices, ceiling)
        levels = who.levels(settings.clock())
        # Its listeners: the trace's line of a refusal, and the metrics, which count every ending of the call.
        listeners = (metrics.listener(None if who.key is None else who.key.name),)
        if ledger.trace is not None:
            listeners = (RefusalLines(ledger, scope), *listeners)
        # The chain `exec` admits its calls with: what the prompt is billed is learned once it settles, the scope's
        # ledger, then the upstream key's pace.
        links = (Learn(settings.calibration, scope, prompt), ScopeLink(ledger, scope, budget, cost, pricing, levels),
                 PaceLink(settings.limiter, model))
        chain = Admissions(links, listeners)
        attempt = Attempt(None, None, model, 1, bound, ceiling, settings.timeout, choices=asked.choices)
        await chain.admit(attempt)
    except WireError as problem:
        return _error(protocol, problem.status, str(problem), _KINDS.get(problem.status, "invalid_request_error"),
                      problem.field)
    except Problem as problem:
        return _error(protocol, problem.status, problem.message, _KINDS.get(problem.status, "invalid_request_error"),
                      problem.field)
    except Refused as refused:
        if chain is None:  # the key could not be looked up: no chain heard this refusal
            metrics.refused(refused.limit)
        if refused.limit != "ledger" and who.answers:  # the key's `on_exhausted`: the proxy answers, nothing is sent
            return Response(protocol.exhausted(asked, f"The budget for this request is spent: {refused.error}."), 200,
                            media_type=protocol.media_type(asked), headers={"x-bamasc-exhausted": "1"})
        status = 503 if refused.limit == "ledger" else 402
        return _error(protocol, status, f"bamasc proxy: {refused.error}", _KINDS[status])
    # Upstream by the declared `name`, never as the client typed it: a request for the `.bam` name `o3` of
    # `name = "o3-mini"` was reserved at o3-mini's prices, and forwarded as `o3` it was billed as o3.
    forwarded = protocol.with_cap(asked, {**body, "model": model.model_id}, attempt.max_tokens, upstream.official)
    call = Metered(chain, attempt)
    try:
        if asked.stream:
            reader = StreamReader(protocol, hide=protocol.hides_usage(body))
            return await _stream(client, upstream.url(protocol), upstream.headers(request), forwarded, call, reader)
        return await _whole(client, upstream.url(protocol), upstream.headers(request), forwarded, call, protocol)
    except BaseException:
        await call.keep("the proxy stopped before the reply was read")
        raise


# Deepest body forwarded: the JSON encoders on the way upstream run deeper in the stack than the decoder,
# and one that hits the recursion limit there would fail a call already reserved.
MAX_JSON_DEPTH = 128


def _json(raw: bytes) -> object:
    data = json_body(raw)
    if _deeper_than(data, MAX_JSON_DEPTH):
        raise Problem(400, f"the body is nested more than {MAX_JSON_DEPTH} levels deep")
    return data


def _deeper_than(value: object, limit: int) -> bool:
    """Whether JSON `value` nests more than `limit` arrays and objects (walked without recursion)."""
    level = [value]
    for _ in range(limit + 1):
        level = [item for node in level if isinstance(node, (list, dict))
                 for item in (node.values() if isinstance(node, dict) else node)]
        if not level:
            return False
    return True


# What a failed upstream exchange raises: its outcome is unknown, so the hold is kept.
_UPSTREAM_ERRORS = (aiohttp.ClientError, asyncio.TimeoutError, OSError)


async def _whole(client, url: str, headers: dict, body: dict, call: Metered, protocol: WireProtocol) -> Response:
    try:
        async with client.post(url, json=body, headers=headers) as reply:
            content = await reply.read()
            status, kind = reply.status, reply.headers.get("content-type", "application/json")
            call.answered(status, reply.headers)
    except _UPSTREAM_ERRORS as problem:
        return await _no_answer(call, protocol, problem)
    if status == 200:
        try:
            data = json.loads(content)
        except ValueError:
            data = None
        await call.settle(protocol.counts(data).usage())
    elif surely_unbilled(status):
        await call.release(f"upstream status {status}")
    else:
        await call.keep(f"upstream status {status}")
    return Response(content, status, media_type=kind)


async def _no_answer(call: Metered, protocol: WireProtocol, problem: Exception) -> Response:
    await call.keep(f"upstream: {type(problem).__name__}")
    return _error(protocol, 502, f"bamasc proxy: the upstream did not answer ({type(problem).__name__}); the call's "
                                 "reservation is kept", "upstream_error")


async def _stream(client, url: str, headers: dict, body: dict, call: Metered, reader: StreamReader) -> Response:
    """Relay the stream as it comes, reading its usage (and taking out the usage event the client did not ask for)."""
    try:
        reply = await client.post(url, json=body, headers=headers)
    except _UPSTREAM_ERRORS as problem:
        return await _no_answer(call, reader.protocol, problem)
    call.answered(reply.status, reply.headers)
    if reply.status != 200:
        try:
            content = await reply.read()
        except _UPSTREAM_ERRORS:
            content = b""
        reply.release()
        if surely_unbilled(reply.status):
            await call.release(f"upstream status {reply.status}")
        else:
            await call.keep(f"upstream status {reply.status}")
        return Response(content, reply.status, media_type=reply.headers.get("content-type", "application/json"))

    async def relay():
        try:
            async for chunk in reply.content.iter_any():
                if passed := reader.feed(chunk):
                    yield passed
            if rest := reader.rest():
                yield rest
        except _UPSTREAM_ERRORS as problem:
            await call.keep(f"the upstream stream broke ({type(problem).__name__})")
        finally:
            reply.close()
            usage = reader.usage()
            if usage is not None:
                await call.settle(usage)
            else:
                await call.keep("the stream ended before its usage")

    return StreamingResponse(relay(), 200, media_type=reply.headers.get("content-type", "text/event-stream"))
