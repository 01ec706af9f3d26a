"""The proxy's `/ui` (bamasc/http/ui.py): its token's and its admin token's holders see every scope, key and team;
a client key sees its own scopes only."""

from __future__ import annotations

from starlette.requests import Request

from bamasc.http.requests import Problem
from bamasc.http.ui import LiveSpend, ui_routes
from bamasc.metering.keys import windows_of
from bamasc.metering.refusals import Refused
from bamasc.proxy.access import caller, client_key, same


def spend_routes(settings, ledger) -> list:
    spend = LiveSpend(None if ledger.trace is None else ledger.trace.path)

    async def view(request: Request) -> dict:
        try:
            who = None if same(client_key(request), settings.admin_token) else await caller(request, settings)
            if who is None or who.key is None:
                totals = await ledger.totals()
                return await spend.summary(None, {"total": totals["total"], "left": totals["left"]})
            key = who.key
            shown = windows_of("key", key.name, key.budgets, settings.clock())
            windows = [{"level": level.name, **await ledger.level(level.name, level.budget)} for level in shown]
        except Refused as refused:
            raise Problem(503, f"bamasc proxy: {refused.error}") from None
        return await spend.summary(lambda task: task.key == key.name, {"key": key.name, "windows": windows},
                                   view=f"key {key.name}")

    return ui_routes(view, "bamasc proxy: spend")
