"""The ASGI app of `bamasc proxy`: OpenAI and Anthropic requests reserved, forwarded, settled.

A request goes through four steps, and money moves only in the last three:

1. Read: the body (capped), the model (one the config declares for this
   protocol), the scope (`X-Bamasc-Task`, else one scope per client key) and
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
   did not bill (a 4xx) releases the hold; anything else (a timeout, a dropped
   connection or stream, a 5xx, a reply without usage) keeps the whole hold.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import re

import aiohttp
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from bamasc.encodings import counting_tokenizer
from bamasc.proxy.ledger import Cost, Refused
from bamasc.proxy.settle import Closing, Pace
from bamasc.runtime.providers.openai_provider import is_official_endpoint
from bamasc.proxy.stream import StreamReader, UsageChunkFilter, asked_for_usage
from bamasc.proxy.wire import WireError, check_betas, error_body, finite_budget, prompt_bound, read_request, read_usage, with_cap
from bamasc.serve.requests import Problem, read_body

log = logging.getLogger("bamasc.proxy")

TASK_HEADER = "x-bamasc-task"
BUDGET_HEADER = "x-bamasc-budget"
_SCOPE = re.compile(r"^[\x21-\x7e]{1,200}$")  # printable ASCII, no spaces
# Output cap sent when neither the client nor the model's `max_output` sets one.
DEFAULT_OUTPUT_CAP = 8192
# Request headers passed on upstream (the client's own key never is).
_PASSED = ("anthropic-version", "anthropic-beta", "openai-organization", "openai-project")
_ENDPOINTS = {"openai": "/chat/completions", "anthropic": "/v1/messages"}
_DEFAULT_BASE = {"openai": "https://api.openai.com/v1", "anthropic": "https://api.anthropic.com"}


class Upstream:
    """A declared model the proxy forwards to: where, with which key, at which prices."""

    def __init__(self, model, key: str | None):
        self.model = model
        self.key = key
        base = (model.base_url or _DEFAULT_BASE[model.provider]).rstrip("/")
        if model.provider == "anthropic" and base.endswith("/v1"):
            base = base[: -len("/v1")]
        self.url = base + _ENDPOINTS[model.provider]
        self.official = model.provider == "openai" and is_official_endpoint(model.base_url)

    def headers(self, request: Request) -> dict[str, str]:
        # A compressed reply could be neither read for its usage nor passed on as it is (its encoding header is not).
        headers = {"content-type": "application/json", "accept-encoding": "identity"}
        for name in _PASSED:
            if name in request.headers:
                headers[name] = request.headers[name]
        if self.model.provider == "anthropic":
            headers.setdefault("anthropic-version", "2023-06-01")
            if self.key:
                headers["x-api-key"] = self.key
        elif self.key:
            headers["authorization"] = f"Bearer {self.key}"
        return headers


class Settings:
    def __init__(self, upstreams: dict[tuple[str, str], Upstream], default_budget: float | None, token: bytes | None,
                 max_body: int = 32 << 20, timeout: float = 600.0, exact=None, limiter=None, request_s: float = 30.0):
        self.upstreams = upstreams  # (protocol, name the client may use) -> Upstream
        self.limiter = limiter  # a runtime.limiter.RateLimiter pacing each upstream key, or None
        self.default_budget = default_budget
        self.token = token
        self.max_body = max_body
        self.timeout = timeout
        self.request_s = request_s  # seconds a request's body may take to arrive (408 past them)
        self.exact = exact  # exact prompt counter for OpenAI families, or None


def build_app(settings: Settings, ledger) -> Starlette:
    sessions: list[aiohttp.ClientSession] = []

    def client() -> aiohttp.ClientSession:
        # Made on first use, inside the server's event loop.
        if not sessions:
            timeout = aiohttp.ClientTimeout(total=settings.timeout, connect=30.0)
            sessions.append(aiohttp.ClientSession(timeout=timeout, auto_decompress=False))
        return sessions[0]

    async def openai(request: Request) -> Response:
        return await _guarded(request, "openai", settings, ledger, client())

    async def anthropic(request: Request) -> Response:
        return await _guarded(request, "anthropic", settings, ledger, client())

    async def scope(request: Request) -> Response:
        if not _authorized(request, settings.token):
            return JSONResponse(error_body("openai", "a valid proxy token is needed", "authentication_error"), 401)
        try:
            view = await ledger.view(request.path_params["scope"])
        except Refused as refused:
            return JSONResponse(error_body("openai", f"bamasc proxy: {refused}", _KINDS[503]), 503)
        if view is None:
            return JSONResponse(error_body("openai", "no such scope", "not_found_error"), 404)
        return JSONResponse(view)

    async def budget(request: Request) -> Response:
        if not _authorized(request, settings.token):
            return JSONResponse(error_body("openai", "a valid proxy token is needed", "authentication_error"), 401)
        try:
            return JSONResponse(await ledger.totals())
        except Refused as refused:
            return JSONResponse(error_body("openai", f"bamasc proxy: {refused}", _KINDS[503]), 503)

    async def healthz(request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    async def models(request: Request) -> Response:
        protocol = _protocol_of(request)
        if not _authorized(request, settings.token):
            return _error(protocol, 401, "a valid proxy token is needed (the client's API key)", _KINDS[401])
        names = sorted({name for kind, name in settings.upstreams if kind == protocol})
        if protocol == "anthropic":
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
        served = "POST /v1/chat/completions, POST /v1/messages, GET /v1/models, GET /v1/scopes/SCOPE, GET /v1/budget"
        return _error(_protocol_of(request), status, f"bamasc proxy: {request.url.path} {what} (it serves {served})",
                      _KINDS.get(status, "invalid_request_error"))

    @contextlib.asynccontextmanager
    async def lifespan(app):
        yield
        for session in sessions:
            await session.close()

    routes = [
        Route("/v1/chat/completions", openai, methods=["POST"]),
        Route("/chat/completions", openai, methods=["POST"]),
        Route("/v1/messages", anthropic, methods=["POST"]),
        Route("/v1/scopes/{scope:path}", scope, methods=["GET"]),
        Route("/v1/budget", budget, methods=["GET"]),
        Route("/healthz", healthz, methods=["GET"]),
        Route("/v1/models", models, methods=["GET"]),
    ]
    return Starlette(routes=routes, lifespan=lifespan, exception_handlers={404: unknown, 405: unknown})


def _protocol_of(request: Request) -> str:
    """The protocol whose error shape a request reads: Anthropic's where its client says so, else OpenAI's."""
    return "anthropic" if "anthropic-version" in request.headers or request.url.path.startswith("/v1/messages") else "openai"


def _client_key(request: Request) -> str | None:
    """The key the client sent (`x-api-key`, else a bearer `authorization`), stripped; None without one."""
    given = request.headers.get("x-api-key")
    if given is None:
        scheme, _, given = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer":
            return None
    return given.strip()


def _authorized(request: Request, token: bytes | None) -> bool:
    import hmac

    if token is None:
        return True
    given = _client_key(request)
    return given is not None and hmac.compare_digest(given.encode("utf-8", "surrogateescape"), token)


def _error(protocol: str, status: int, message: str, kind: str, field: str | None = None) -> JSONResponse:
    return JSONResponse(error_body(protocol, message, kind, field), status)


_KINDS = {400: "invalid_request_error", 401: "authentication_error", 402: "budget_exceeded", 404: "not_found_error",
          405: "invalid_request_error",
          408: "request_timeout", 413: "request_too_large", 503: "ledger_unavailable"}


async def _guarded(request: Request, protocol: str, settings: Settings, ledger, client: aiohttp.ClientSession) -> Response:
    try:
        if not _authorized(request, settings.token):
            raise Problem(401, "a valid proxy token is needed (the client's API key)")
        raw = await read_body(request, settings.max_body, settings.request_s)
        body = _json(raw)
        asked = read_request(protocol, body)
        upstream = settings.upstreams.get((protocol, asked.model))
        if upstream is None:
            names = sorted(name for kind, name in settings.upstreams if kind == protocol)
            raise Problem(404, f"model {asked.model!r} is not declared for the {protocol} protocol in the proxy's "
                               f"config; declared: {', '.join(names) or 'none'}", "model")
        scope, budget = _scope(request, settings)
        model = upstream.model
        check_betas(request.headers.get("anthropic-beta"), model)
        tokenizer = counting_tokenizer(model.model_id, model.tokenizer, upstream.official)
        bound = prompt_bound(protocol, body, tokenizer, settings.exact)
        pricing = model.prices()
        rates = pricing.worst_rates(bound)
        # A client may mark its prompt for the cache (Anthropic's `cache_control`): every prompt token may then be
        # billed as a cache write, dearer than input.
        input_cost = max(rates.input, rates.cache_write) * bound + pricing.per_request
        ceiling = asked.requested or model.max_output or DEFAULT_OUTPUT_CAP
        cost = Cost(input_cost, rates.output, asked.choices, ceiling)
        hold = await ledger.reserve(scope, budget, model.name, cost)
    except WireError as problem:
        return _error(protocol, problem.status, str(problem), _KINDS.get(problem.status, "invalid_request_error"),
                      problem.field)
    except Problem as problem:
        return _error(protocol, problem.status, problem.message, _KINDS.get(problem.status, "invalid_request_error"),
                      problem.field)
    except Refused as refused:
        status = 503 if refused.kind == "ledger" else 402
        return _error(protocol, status, f"bamasc proxy: {refused}", _KINDS[status])
    # Upstream by the declared `name`, never as the client typed it: a request for the `.bam` name `o3` of
    # `name = "o3-mini"` was reserved at o3-mini's prices, and forwarded as `o3` it was billed as o3.
    forwarded = with_cap(asked, {**body, "model": model.model_id}, hold.tokens, upstream.official)
    closing = Closing(ledger, hold, protocol, bound, pricing, asked.choices)
    pace = Pace(settings.limiter, model)
    try:
        await pace.turn(bound + hold.tokens * asked.choices)
    except BaseException:
        await closing.release(None)  # stopped while waiting for the key's turn: nothing was sent
        raise
    closing.pace = pace
    try:
        if asked.stream:
            hidden = protocol == "openai" and not asked_for_usage(body)
            return await _stream(client, upstream, request, forwarded, closing, UsageChunkFilter() if hidden else None)
        return await _whole(client, upstream, request, forwarded, closing)
    except BaseException:
        await closing.keep("the proxy stopped before the reply was read")
        raise


# Deepest body forwarded: the JSON encoders on the way upstream run deeper in the stack than the decoder,
# and one that hits the recursion limit there would fail a call already reserved.
MAX_JSON_DEPTH = 128


def _json(raw: bytes) -> object:
    try:
        data = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise Problem(400, "the body is not UTF-8") from None
    except RecursionError:
        raise Problem(400, "the body is nested too deeply") from None
    except ValueError as problem:
        raise Problem(400, f"the body is not JSON: {str(problem)[:200]}") from None
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


def _scope(request: Request, settings: Settings) -> tuple[str, float]:
    name = request.headers.get(TASK_HEADER)
    if name is None:
        # The key itself, not how its header spells it: one key is one scope.
        key = _client_key(request) or ""
        name = "key-" + hashlib.sha256(key.encode("utf-8", "surrogateescape")).hexdigest()[:16]
    elif not _SCOPE.match(name):
        raise Problem(400, f"{TASK_HEADER} must be 1 to 200 printable characters without spaces", TASK_HEADER)
    try:
        budget = finite_budget(request.headers.get(BUDGET_HEADER))
    except ValueError:
        raise Problem(400, f"{BUDGET_HEADER} must be an amount of µ$ above 0 (at most 1e12), "
                           f"not {request.headers.get(BUDGET_HEADER)[:40]!r}", BUDGET_HEADER) from None
    if budget is None:
        budget = settings.default_budget
    if budget is None:
        raise Problem(400, f"no budget for scope '{name}': send {BUDGET_HEADER}, or give the config's system a budget",
                      BUDGET_HEADER)
    return name, budget


def _release_status(status: int) -> bool:
    """A reply the upstream surely did not bill: a refusal of the request itself."""
    return 400 <= status < 500 and status not in (408, 409)


# What a failed upstream exchange raises: its outcome is unknown, so the hold is kept.
_UPSTREAM_ERRORS = (aiohttp.ClientError, asyncio.TimeoutError, OSError)


async def _whole(client, upstream: Upstream, request: Request, body: dict, closing: Closing) -> Response:
    try:
        async with client.post(upstream.url, json=body, headers=upstream.headers(request)) as reply:
            content = await reply.read()
            status, kind = reply.status, reply.headers.get("content-type", "application/json")
            if closing.pace is not None:
                closing.pace.answered(status, reply.headers)
    except _UPSTREAM_ERRORS as problem:
        await closing.keep(f"upstream: {type(problem).__name__}")
        return _error(closing.protocol, 502, f"bamasc proxy: the upstream did not answer ({type(problem).__name__}); "
                                             "the call's reservation is kept", "upstream_error")
    if status == 200:
        try:
            data = json.loads(content)
        except ValueError:
            data = None
        await closing.settle(read_usage(closing.protocol, data), status)
    elif _release_status(status):
        await closing.release(status)
    else:
        await closing.keep(f"upstream status {status}", status)
    return Response(content, status, media_type=kind)


async def _stream(client, upstream: Upstream, request: Request, body: dict, closing: Closing,
                  hide: UsageChunkFilter | None) -> Response:
    """Relay the stream as it comes, reading its usage; `hide` takes out the usage chunk the client did not ask for."""
    try:
        reply = await client.post(upstream.url, json=body, headers=upstream.headers(request))
    except _UPSTREAM_ERRORS as problem:
        await closing.keep(f"upstream: {type(problem).__name__}")
        return _error(closing.protocol, 502, f"bamasc proxy: the upstream did not answer ({type(problem).__name__}); "
                                             "the call's reservation is kept", "upstream_error")
    if closing.pace is not None:
        closing.pace.answered(reply.status, reply.headers)
    if reply.status != 200:
        try:
            content = await reply.read()
        except _UPSTREAM_ERRORS:
            content = b""
        reply.release()
        if _release_status(reply.status):
            await closing.release(reply.status)
        else:
            await closing.keep(f"upstream status {reply.status}", reply.status)
        return Response(content, reply.status, media_type=reply.headers.get("content-type", "application/json"))
    reader = StreamReader(closing.protocol)

    async def relay():
        try:
            async for chunk in reply.content.iter_any():
                reader.feed(chunk)
                passed = chunk if hide is None else hide.feed(chunk)
                if passed:
                    yield passed
            if hide is not None and (rest := hide.rest()):
                yield rest
        except _UPSTREAM_ERRORS as problem:
            await closing.keep(f"the upstream stream broke ({type(problem).__name__})", 200)
        finally:
            reply.close()
            if reader.settled:
                await closing.settle(reader.usage, 200)
            else:
                await closing.keep("the stream ended before its usage", 200)

    return StreamingResponse(relay(), 200, media_type=reply.headers.get("content-type", "text/event-stream"))
