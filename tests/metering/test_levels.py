"""One reservation, every level at once: a scope, the total, and any key or team windows, in one step in each store.

Random hierarchies of keys in teams, each with budgets over windows, concurrent clients that reserve and settle
(or keep, or release) at random, and a fake clock that crosses window boundaries: no scope, window or total ever
holds or is charged past its budget, in the process's ledger and in Redis's, and both agree with the sum of what
the holds were charged.
"""

from __future__ import annotations

import asyncio
import random

import pytest

from bamasc.metering.afford import Cost
from bamasc.metering.ledger import Level, LocalLedger, level_spend
from bamasc.metering.refusals import BudgetExhausted, Refused, ShortOfTotal
from bamasc.metering.windows import window_id

PERIODS = ("30s", "1m", "1h")


def _hierarchy(rng: random.Random):
    """Teams of keys, each with windows: {key: (team, [(per, budget)], [(per, budget)] of its team)}."""
    teams = {f"team{t}": [(rng.choice(PERIODS), rng.uniform(300, 3000)) for _ in range(rng.randint(0, 2))]
             for t in range(rng.randint(1, 3))}
    keys = {}
    for k in range(rng.randint(1, 4)):
        team = rng.choice([*teams, None])
        keys[f"key{k}"] = (team, [(rng.choice(PERIODS), rng.uniform(200, 2000)) for _ in range(rng.randint(0, 2))],
                           teams.get(team, []))
    return keys


def _levels(key: str, spec, now: float) -> tuple[Level, ...]:
    team, own, shared = spec
    # A key may name a period twice (a hand-written config might): its counter is one, held once, at the lower budget.
    levels = [Level(f"key:{key}:{window_id(per, now)}", budget, f"key {key}") for per, budget in own]
    levels += [Level(f"team:{team}:{window_id(per, now)}", budget, f"team {team}") for per, budget in shared]
    return tuple(levels)


async def _clients(ledger, rng: random.Random, keys: dict, clock: list[float], budgets: dict, settle) -> dict:
    """Concurrent clients on `ledger`; returns what each level, scope and the total were charged, and the largest
    budget each level had (levels are named by their window, so a budget belongs to one name)."""
    charged: dict[str, float] = {}
    limits: dict[str, float] = {}

    async def client(number: int) -> None:
        for _ in range(rng.randint(5, 25)):
            key = rng.choice(list(keys))
            scope = f"{key}/s{rng.randint(0, 3)}"
            levels = _levels(key, keys[key], clock[0])
            for level in levels:
                limits[level.name] = min(level.budget, limits.get(level.name, level.budget))
            cost = Cost(rng.uniform(1, 60), rng.uniform(0.1, 2.0), rng.randint(1, 2), rng.randint(16, 400))
            try:
                hold = await ledger.reserve(scope, budgets[scope], "m", cost, levels)
            except (BudgetExhausted, ShortOfTotal):
                continue
            await asyncio.sleep(0)
            clock[0] += rng.uniform(0, 8)  # time passes while the call is out: windows may close behind it
            ending = rng.random()
            amount = hold.amount if ending < 0.2 else 0.0 if ending < 0.3 else rng.uniform(0, hold.amount)
            await settle(ledger, hold, amount)
            for name in (*hold.levels, scope, "total"):
                charged[name] = charged.get(name, 0.0) + amount

    await asyncio.gather(*(client(number) for number in range(6)))
    return charged, limits


async def _close(ledger, hold, amount: float) -> None:
    await ledger.close(hold, amount, {"outcome": "settled"})


def _check(charged: dict, limits: dict, budgets: dict, total: float) -> None:
    for name, amount in charged.items():
        budget = total if name == "total" else budgets.get(name, limits.get(name))
        assert amount <= budget * (1 + 1e-9) + 1e-6, (name, amount, budget)


@pytest.mark.parametrize("seed", range(8))
def test_no_level_passes_its_budget_in_this_process(seed, tmp_path):
    from bamasc.runtime.trace import TraceWriter

    rng = random.Random(seed)
    keys = _hierarchy(rng)
    budgets = {f"{key}/s{n}": rng.uniform(100, 1500) for key in keys for n in range(4)}
    total = rng.uniform(2000, 9000)
    trace = TraceWriter(str(tmp_path / "trace.jsonl"))
    ledger = LocalLedger(total, trace)
    clock = [1_700_000_000.0 + rng.uniform(0, 100)]
    charged, limits = asyncio.run(_clients(ledger, rng, keys, clock, budgets, _close))
    trace.close()
    _check(charged, limits, budgets, total)
    # Each level's counter is what its holds were charged, and a restart reads the same from the trace.
    spend = level_spend(str(tmp_path / "trace.jsonl"))
    for name, counter in ledger.counters.items():
        assert counter.held == pytest.approx(0, abs=1e-6)
        assert counter.charged == pytest.approx(charged.get(name, 0.0), abs=1e-6)
        assert spend.get(name, 0.0) == pytest.approx(charged.get(name, 0.0), abs=1e-3)


def test_a_restart_starts_each_level_from_the_trace(tmp_path):
    from bamasc.runtime.trace import TraceWriter

    path = str(tmp_path / "trace.jsonl")
    level = Level("key:k:1d@2026-12-07T00:00:00Z", 500.0, "key 'k' (1d window)")
    cost = Cost(10.0, 1.0, 1, 100)

    async def spend(ledger) -> list:
        outcomes = []
        for scope in ("a", "b", "c", "d", "e", "f"):  # scopes of 10,000 µ$: only the key's window binds
            try:
                hold = await ledger.reserve(scope, 10_000.0, "m", cost, (level,))
                outcomes.append(hold.amount)
                if scope != "c":  # c's call never ends: its hold is kept in full
                    await ledger.close(hold, hold.amount, {})
            except Refused as refused:
                outcomes.append(refused.error)
        return outcomes

    trace = TraceWriter(path)
    first = asyncio.run(spend(LocalLedger(None, trace)))
    trace.close()
    assert first[:4] == [110.0] * 4 and first[4] == pytest.approx(60.0)  # 500 µ$: four full calls, one lowered
    assert "key 'k' (1d window) has" in first[5]
    trace = TraceWriter(path)
    again = asyncio.run(spend(LocalLedger(None, trace, levels=level_spend(path))))
    trace.close()
    assert all(isinstance(outcome, str) for outcome in again)  # the window was spent before the restart


def test_a_redis_ledger_holds_every_level_in_one_script(tmp_path):
    pytest.importorskip("redis", reason="the redis client library (the proxy extra) is not installed")
    from tests.proxy.fleet import REDIS_MISSING, RedisServer

    if REDIS_MISSING:
        pytest.skip(REDIS_MISSING)
    from bamasc.metering.redis_ledger import RedisLedger

    server = RedisServer(tmp_path)
    try:
        for seed in range(4):
            rng = random.Random(100 + seed)
            keys = _hierarchy(rng)
            budgets = {f"{key}/s{n}": rng.uniform(100, 1500) for key in keys for n in range(4)}
            total = rng.uniform(2000, 9000)

            async def run():
                ledger = RedisLedger(server.url, total, prefix=f"p{seed}", create=True)
                await ledger.open()
                clock = [1_700_000_000.0 + rng.uniform(0, 100)]
                charged, limits = await _clients(ledger, rng, keys, clock, budgets, _close)
                seen = {name: await ledger.level(name, limits[name]) for name in limits}
                await ledger.client.aclose()
                return charged, limits, seen

            charged, limits, seen = asyncio.run(run())
            _check(charged, limits, budgets, total)
            for name, view in seen.items():
                assert view["held"] == pytest.approx(0, abs=1e-6)
                assert view["charged"] == pytest.approx(charged.get(name, 0.0), abs=1e-3)
    finally:
        server.kill()
