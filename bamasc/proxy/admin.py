"""The proxy's admin routes (`/v1/admin/`), for the holder of the admin token only (`--admin-token-env`).

- `POST /v1/admin/keys` makes a key (metering/keys.py says its fields) and
  answers 201 with its secret, shown this once;
- `POST /v1/admin/teams` makes a team;
- `GET /v1/admin/keys/{name}`, `GET /v1/admin/teams/{name}`: the policy, and
  for each window its budget, what it charged, holds and has left now;
- `DELETE` of either: a deleted key's next request is refused; a team is
  deleted once no key names it.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from bamasc.http.requests import Problem, json_body, read_body
from bamasc.metering.keys import PolicyError, read_key, read_team, windows_of
from bamasc.metering.refusals import Refused
from bamasc.proxy.access import client_key, same

_BODY_LIMIT = 64 << 10


def admin_routes(settings, ledger) -> list[Route]:
    """The admin routes of a proxy whose settings name an admin token and a key store; none without one."""
    if settings.admin_token is None or settings.keys is None:
        return []
    store = settings.keys
    models = {upstream.model.name for upstream in settings.upstreams.values()}

    def admin(handler):
        async def guarded(request: Request) -> Response:
            if not same(client_key(request), settings.admin_token):
                return _error(401, "the admin routes take the admin token only", "authentication_error")
            try:
                return await handler(request)
            except PolicyError as problem:
                status = 409 if "exists already" in str(problem) or "remain" in str(problem) else 400
                return _error(status, str(problem), "invalid_request_error", problem.field)
            except Problem as problem:
                return _error(problem.status, problem.message, "invalid_request_error", problem.field)
            except Refused as refused:
                return _error(503, f"bamasc proxy: {refused.error}", "ledger_unavailable")
        return guarded

    async def body(request: Request):
        return json_body(await read_body(request, _BODY_LIMIT, settings.request_s))

    @admin
    async def make_key(request: Request) -> Response:
        policy = read_key(await body(request), models)
        secret = await store.add_key(policy)
        return JSONResponse({"name": policy.name, "key": secret, **policy.as_json()}, 201)

    @admin
    async def make_team(request: Request) -> Response:
        policy = read_team(await body(request))
        await store.add_team(policy)
        return JSONResponse(policy.as_json(), 201)

    async def show(kind: str, found, request: Request) -> Response:
        """A key's or a team's policy, and each of its windows now; 404 where there is none."""
        if found is None:
            return _error(404, f"no {kind} named {request.path_params['name']!r}", "not_found_error")
        open_ = windows_of(kind, found.name, found.budgets, settings.clock())
        return JSONResponse({**found.as_json(), "windows": await _windows(ledger, open_, found.budgets)})

    async def dropped(kind: str, removed: bool, request: Request) -> Response:
        if not removed:
            return _error(404, f"no {kind} named {request.path_params['name']!r}", "not_found_error")
        return JSONResponse({"name": request.path_params["name"], "deleted": True})

    @admin
    async def show_key(request: Request) -> Response:
        return await show("key", await store.key(request.path_params["name"]), request)

    @admin
    async def show_team(request: Request) -> Response:
        return await show("team", await store.team(request.path_params["name"]), request)

    @admin
    async def drop_key(request: Request) -> Response:
        return await dropped("key", await store.remove_key(request.path_params["name"]), request)

    @admin
    async def drop_team(request: Request) -> Response:
        return await dropped("team", await store.remove_team(request.path_params["name"]), request)

    return [
        Route("/v1/admin/keys", make_key, methods=["POST"]),
        Route("/v1/admin/teams", make_team, methods=["POST"]),
        Route("/v1/admin/keys/{name}", show_key, methods=["GET"]),
        Route("/v1/admin/keys/{name}", drop_key, methods=["DELETE"]),
        Route("/v1/admin/teams/{name}", show_team, methods=["GET"]),
        Route("/v1/admin/teams/{name}", drop_team, methods=["DELETE"]),
    ]


async def _windows(ledger, found, budgets) -> list[dict]:
    """Each window's budget and what its counter charged, holds and has left now."""
    shown = []
    for level, window in zip(found, budgets):
        view = await ledger.level(level.name, level.budget)
        shown.append({"per": window.per, **view})
    return shown


def _error(status: int, message: str, kind: str, field: str | None = None) -> JSONResponse:
    return JSONResponse({"error": {"message": message, "type": kind, "param": field, "code": kind}}, status)
