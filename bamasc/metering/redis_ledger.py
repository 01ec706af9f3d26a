"""The proxy fleet's ledger: per-scope budgets and the total in a Redis server, shared by every proxy on it.

The check and the hold are one Lua script on the server, so they are atomic
across processes. A reservation of a process that dies stays held. Each
ledger carries an epoch key; when the server loses it (restarted without
persistence, flushed), every proxy refuses new reservations rather than spend
money nobody ledgers.
"""

from __future__ import annotations

import os

from bamasc.metering.afford import Cost
from bamasc.metering.ledger import Hold, closed, refusal
from bamasc.metering.refusals import LedgerLost


# Redis: KEYS = scope hash, totals hash, epoch key; the script checks the epoch, then the scope and the total.
_RESERVE = """
if redis.call('GET', KEYS[3]) ~= ARGV[1] then return {'ledger'} end
local budget = tonumber(ARGV[2])
local known = redis.call('HGET', KEYS[1], 'budget')
if known and tonumber(known) < budget then budget = tonumber(known) end
redis.call('HSET', KEYS[1], 'budget', string.format('%.17g', budget))
if redis.call('HGET', KEYS[1], 'overbilled') then return {'overbilled', redis.call('HGET', KEYS[1], 'overbilled')} end
local spent = tonumber(redis.call('HGET', KEYS[1], 'charged') or '0') + tonumber(redis.call('HGET', KEYS[1], 'held') or '0')
local left = budget - spent
local total = tonumber(ARGV[3])
local total_left = -1
if total >= 0 then
  total_left = total - tonumber(redis.call('HGET', KEYS[2], 'charged') or '0') - tonumber(redis.call('HGET', KEYS[2], 'held') or '0')
  if total_left < left then left = total_left end
end
local input_cost, rate, choices, requested, least = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7]), tonumber(ARGV[8])
local room = left - input_cost
if room < 0 then return {'refused', string.format('%.17g', budget), string.format('%.17g', spent), string.format('%.17g', total_left)} end
local tokens = requested
if rate * choices > 0 then tokens = math.min(requested, math.floor(room / (rate * choices) + 1e-9)) end
if tokens < math.min(least, requested) then return {'refused', string.format('%.17g', budget), string.format('%.17g', spent), string.format('%.17g', total_left)} end
local amount = input_cost + rate * choices * tokens
redis.call('HINCRBYFLOAT', KEYS[1], 'held', string.format('%.17g', amount))
redis.call('HINCRBY', KEYS[1], 'calls', 1)
redis.call('HINCRBYFLOAT', KEYS[2], 'held', string.format('%.17g', amount))
return {'ok', string.format('%.0f', tokens), string.format('%.17g', amount), string.format('%.17g', budget)}
"""
# KEYS = scope hash, totals hash, epoch key; ARGV = epoch, amount held, charged, overbilled reason ('' for none).
_CLOSE = """
if redis.call('GET', KEYS[3]) ~= ARGV[1] then return 'ledger' end
redis.call('HINCRBYFLOAT', KEYS[1], 'held', '-' .. ARGV[2])
redis.call('HINCRBYFLOAT', KEYS[1], 'charged', ARGV[3])
redis.call('HINCRBYFLOAT', KEYS[2], 'held', '-' .. ARGV[2])
redis.call('HINCRBYFLOAT', KEYS[2], 'charged', ARGV[3])
if ARGV[4] ~= '' then redis.call('HSETNX', KEYS[1], 'overbilled', ARGV[4]) end
return 'ok'
"""


class RedisLedger:
    """Scopes and the total in a Redis server, shared by every proxy given the same URL and prefix.

    The money lives in Redis; each process still writes its own trace of what it forwarded.
    """

    def __init__(self, url: str, total: float | None = None, prefix: str = "bamasc", trace=None):
        import redis.asyncio as redis

        self.client = redis.Redis.from_url(url, decode_responses=True, socket_timeout=5, socket_connect_timeout=5)
        self.total = total
        self.trace = trace
        self.prefix = prefix
        self.epoch: str | None = None
        self._reserve = self.client.register_script(_RESERVE)
        self._close = self.client.register_script(_CLOSE)
        self._ids = 0
        self._run = os.urandom(4).hex()

    def _keys(self, scope: str) -> list[str]:
        return [f"{self.prefix}:scope:{scope}", f"{self.prefix}:total", f"{self.prefix}:epoch"]

    async def open(self) -> None:
        """Join the ledger the server holds, or start one: the first proxy sets the epoch, the others read it."""
        epoch = f"{self.prefix}:epoch"
        await self._ask(lambda: self.client.set(epoch, os.urandom(8).hex(), nx=True))
        self.epoch = await self._ask(lambda: self.client.get(epoch))

    async def _ask(self, command):
        """`command()`'s answer from the server; a LedgerLost when the server cannot be reached."""
        from redis.exceptions import RedisError

        try:
            return await command()
        except (RedisError, OSError) as problem:
            raise LedgerLost("-", f"the shared ledger cannot be reached ({type(problem).__name__}); nothing is "
                                  "forwarded until it can") from None

    async def _call(self, script, scope: str, args: list):
        return await self._ask(lambda: script(keys=self._keys(scope), args=[self.epoch, *args]))

    async def reserve(self, name: str, budget: float, model: str, cost: Cost) -> Hold:
        answer = await self._call(self._reserve, name, [
            repr(budget), repr(-1.0 if self.total is None else self.total), repr(cost.input_cost),
            repr(cost.output_rate), cost.choices, cost.requested, cost.min_tokens])
        if answer[0] == "ledger":
            raise LedgerLost(name, "the shared ledger was lost (its Redis server restarted or was flushed); nothing "
                                   "is forwarded until an operator restores it")
        if answer[0] == "overbilled":
            raise closed(name, answer[1])
        if answer[0] == "refused":
            total_left = None if self.total is None else float(answer[3])
            raise refusal(name, float(answer[1]), float(answer[2]), total_left, cost)
        tokens, amount, budget = int(answer[1]), float(answer[2]), float(answer[3])
        self._ids += 1
        hold_id = f"{self._run}.{self._ids}"
        if self.trace is not None:
            hold_id = self.trace.reserve({"task_id": name, "model": model, "reserved": round(amount, 6),
                                          "budget": budget, "max_tokens": tokens})
        return Hold(hold_id, name, model, tokens, amount)

    async def close(self, hold: Hold, charged: float, record: dict, overbilled: str | None = None) -> None:
        if self.trace is not None:
            self.trace.call({"id": hold.id, "task_id": hold.scope, "model": hold.model, "reserved": round(hold.amount, 6),
                             "charged": round(charged, 6), "max_tokens": hold.tokens, **record})
        try:
            await self._call(self._close, hold.scope, [repr(hold.amount), repr(charged), overbilled or ""])
        except LedgerLost:
            pass  # the hold stays in Redis, counted as spent: the safe side

    async def view(self, name: str) -> dict | None:
        data = await self._ask(lambda: self.client.hgetall(self._keys(name)[0]))
        if not data:
            return None
        budget, charged, held = (float(data.get(key, 0)) for key in ("budget", "charged", "held"))
        return {"scope": name, "budget": budget, "charged": round(charged, 6), "held": round(held, 6),
                "left": round(max(0.0, budget - charged - held), 6), "calls": int(data.get("calls", 0)),
                "status": "overbilled" if data.get("overbilled") else "open", "overbilled": data.get("overbilled")}

    async def totals(self) -> dict:
        data = await self._ask(lambda: self.client.hgetall(self._keys("-")[1]))
        charged, held = float(data.get("charged", 0)), float(data.get("held", 0))
        return {"total": self.total, "charged": round(charged, 6), "held": round(held, 6),
                "left": None if self.total is None else round(max(0.0, self.total - charged - held), 6)}
