"""`bamasc serve` takes the proxy fleet's client keys: a key's task is held in its key's and team's windows, in the
same Redis ledger as the proxy's calls, so the windows hold whichever door the calls come through."""

from __future__ import annotations

import asyncio
import time

import pytest

httpx = pytest.importorskip("httpx")
pytest.importorskip("starlette")
pytest.importorskip("redis", reason="the redis client library (the proxy extra) is not installed")

import bamasc  # noqa: E402
from bamasc.metering.afford import Cost  # noqa: E402
from bamasc.metering.keys import KeyPolicy, TeamPolicy, Window, levels  # noqa: E402
from bamasc.metering.redis_keys import RedisKeyStore  # noqa: E402
from bamasc.metering.redis_ledger import RedisLedger  # noqa: E402
from bamasc.metering.refusals import BudgetExhausted  # noqa: E402
from bamasc.serve.app import Limits, build_app  # noqa: E402
from bamasc.serve.keys import KeyGate  # noqa: E402
from tests.proxy.fleet import REDIS_MISSING, RedisServer  # noqa: E402
from tests.serve.harness import TOKEN, compiled_plan  # noqa: E402

if REDIS_MISSING:
    pytest.skip(REDIS_MISSING, allow_module_level=True)


def test_a_keys_windows_hold_across_serve_and_the_proxy(tmp_path):
    server = RedisServer(tmp_path)
    plan = bamasc.Plan.load(compiled_plan(str(tmp_path)))  # 2,000 µ$ a task
    team = TeamPolicy("cx", (Window(9000.0, "1mo"),))
    key = KeyPolicy("desk", "cx", 1500.0, (Window(5000.0, "1d"),))

    async def main():
        fleet = RedisLedger(server.url, None, create=True)  # the proxy that started the ledger
        await fleet.open()
        store = RedisKeyStore(fleet)
        await store.add_team(team)
        secret = await store.add_key(key)
        joined = RedisLedger(server.url, None)  # serve joins it
        await joined.open()
        gate = KeyGate(RedisKeyStore(joined), joined, time.time)
        async with plan.session(trace=str(tmp_path / "trace.jsonl"), provider=bamasc.providers.fake("verbose")) as session:
            app = build_app(plan, session, TOKEN.encode(), Limits(), gate=gate)
            async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test") as client:
                mine = {"Authorization": f"Bearer {secret}"}
                costs, refused = [], None
                for number in range(40):
                    reply = await client.post("/v1/tasks", headers=mine, json={"task": f"What is {number} + 4?"})
                    if reply.status_code != 200:
                        refused = reply
                        break
                    assert reply.json()["budget"] <= 1500  # the key's scope_budget is the task's ceiling
                    costs.append(reply.json()["cost"])
                assert refused is not None and refused.status_code == 402 and "desk" in refused.text
                assert 0 < sum(costs) <= 5000
                window = levels(key, team, time.time())[0]
                seen = await fleet.level(window.name, window.budget)
                assert seen["charged"] == pytest.approx(sum(costs), abs=1e-3) and seen["held"] == 0
                # The proxy's calls of the key meet the same window: held to what serve's tasks left of it.
                call = Cost(50.0, 1.0, 1, 100_000)
                hold = await fleet.reserve("desk proxied", 5000.0, "m", call, levels(key, team, time.time()))
                assert hold.amount == pytest.approx(5000 - sum(costs), abs=1e-3)
                await fleet.close(hold, hold.amount, {})
                with pytest.raises(BudgetExhausted):
                    await fleet.reserve("desk proxied", 5000.0, "m", call, levels(key, team, time.time()))
                # The shared token still serves; a deleted key, or none, is refused.
                assert (await client.post("/v1/tasks", headers={"Authorization": f"Bearer {TOKEN}"},
                                           json={"task": "What is 1 + 1?"})).status_code == 200
                assert await store.remove_key("desk")
                assert (await client.post("/v1/tasks", headers=mine, json={"task": "x"})).status_code == 401
                assert (await client.get("/v1/budget")).status_code == 401
        for ledger in (fleet, joined):
            await ledger.client.aclose()

    try:
        asyncio.run(main())
    finally:
        server.kill()
