"""`/ui` on `bamasc serve` and `bamasc proxy`: the spend page, live, drawn from the server's own trace.

- `GET /ui`: the page's shell (no data in it), `GET /ui/plotly.min.js` and
  `GET /ui/page.js`: its scripts, served by the server itself;
- `GET /ui/summary.json`: the summary (bamasc/http/spend.py) of what the
  caller may see, behind the server's token; the page polls it.

The page takes the token from the address's fragment (`/ui#token=...`, which
a browser never sends to a server) or from its form, keeps it for the tab,
and sends it as `Authorization: Bearer`. Each server decides who sees what
(`view`): its token's (and a proxy's admin token's) holder sees everything, a
client key sees its own tasks or scopes only.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from bamasc.http.page import LIVE_POLICY, ReportMissing, live_html, page_js, plotly_js, require
from bamasc.http.requests import Problem
from bamasc.http.spend import SpendBook, TraceFollower

POLL_MS = 2000
_SAFE = {"x-content-type-options": "nosniff", "referrer-policy": "no-referrer"}


class LiveSpend:
    """The server's trace, followed: each summary first folds what was appended since the last one. A view's
    summary is kept until the trace grows, so an idle server's polls cost no summing."""

    KEPT_VIEWS = 64

    def __init__(self, path: str | None) -> None:
        self.follower = TraceFollower(path, os.path.basename(path) if path else "")
        self.lock = asyncio.Lock()
        self.kept: dict[str, tuple[int, dict]] = {}  # view -> (trace offset, summary)

    async def summary(self, visible=None, live: dict | None = None, view: str = "everything") -> dict:
        """The summary of the tasks `visible` lets through; `view` names that choice (a key's name) for the cache."""
        async with self.lock:
            book: SpendBook = await asyncio.to_thread(self.follower.refresh)
            offset = self.follower.offset
            kept = self.kept.get(view)
            if kept is None or kept[0] != offset:
                if len(self.kept) >= self.KEPT_VIEWS:
                    self.kept.clear()
                kept = self.kept[view] = (offset, await asyncio.to_thread(book.summary, visible))
            live = {**(live or {}), "bad_lines": self.follower.bad}
            if not self.follower.path:
                live["note"] = "this server writes no trace (--trace): only its live totals are shown"
            return {**kept[1], "live": live}


def ui_routes(view: Callable[[Request], Awaitable[dict]], title: str) -> list[Route]:
    """The `/ui` routes; `view(request)` answers the summary the request's caller may see, or raises a Problem."""

    async def shell(request: Request) -> Response:
        try:
            require()
        except ReportMissing as problem:
            return JSONResponse(Problem(503, str(problem)).body(), 503)
        text = live_html(title, "/ui/summary.json", "/ui/plotly.min.js", "/ui/page.js", POLL_MS)
        return Response(text, media_type="text/html; charset=utf-8",
                        headers={**_SAFE, "content-security-policy": LIVE_POLICY, "cache-control": "no-store"})

    async def plotly(request: Request) -> Response:
        try:
            text = plotly_js()
        except ReportMissing as problem:
            return JSONResponse(Problem(503, str(problem)).body(), 503)
        return Response(text, media_type="text/javascript; charset=utf-8",
                        headers={**_SAFE, "cache-control": "max-age=86400"})

    async def script(request: Request) -> Response:
        return Response(page_js(), media_type="text/javascript; charset=utf-8", headers=_SAFE)

    async def summary(request: Request) -> Response:
        try:
            found = await view(request)
        except Problem as problem:
            return JSONResponse(problem.body(), problem.status,
                                headers={"www-authenticate": "Bearer"} if problem.status == 401 else None)
        return JSONResponse(found, headers={**_SAFE, "cache-control": "no-store"})

    return [
        Route("/ui", shell, methods=["GET"]),
        Route("/ui/plotly.min.js", plotly, methods=["GET"]),
        Route("/ui/page.js", script, methods=["GET"]),
        Route("/ui/summary.json", summary, methods=["GET"]),
    ]
