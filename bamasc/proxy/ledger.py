"""The proxy's ledger: per-scope budgets and the total, reserved before a call is forwarded, settled after.

One arithmetic (`afford`) decides every reservation; two owners hold the
numbers:

- `LocalLedger`, one process: the event loop runs one request's check and hold
  with no await between them, so two requests cannot both take the last µ$.
  The trace is its memory: a restart on the same trace starts each scope from
  what the trace holds for it (charges, and every reservation whose call line
  never came, kept in full), as `exec --resume` does.
- `RedisLedger`, several processes behind one address: the check and the hold
  are one Lua script on a Redis server, so they are atomic across processes.
  A reservation of a process that dies stays held. Each ledger carries an
  epoch key; when the server loses it (restarted without persistence, flushed),
  every proxy refuses new reservations rather than spend money nobody ledgers.
"""

from __future__ import annotations

import json
import math
import os

from bamasc.records import record

# A call that could emit fewer tokens than this is not worth making (as the budget guard).
MIN_USEFUL_TOKENS = 16


class Refused(Exception):
    """No reservation: `kind` is budget, total, overbilled or ledger (the shared ledger is unreachable or lost)."""

    def __init__(self, message: str, kind: str):
        super().__init__(message)
        self.kind = kind


@record
class Cost:
    """What one call may cost: its input side in full, and each output token on each of its choices."""

    input_cost: float  # µ$: the prompt bound at the dearest rate it could be billed, plus any per-request price
    output_rate: float  # µ$ per output token
    choices: int
    requested: int  # the output cap wanted (the client's, or the model's ceiling)
    min_tokens: int = MIN_USEFUL_TOKENS


def afford(left: float, cost: Cost) -> tuple[int, float] | None:
    """(output tokens, µ$ held) of the largest call that fits in `left`, or None below a useful one."""
    room = left - cost.input_cost
    if room < 0:
        return None
    per_token = cost.output_rate * cost.choices
    tokens = cost.requested if per_token <= 0 else min(cost.requested, math.floor(room / per_token + 1e-9))
    if tokens < min(cost.min_tokens, cost.requested):
        return None
    return tokens, cost.input_cost + per_token * tokens


@record
class Hold:
    """Money held for one forwarded call."""

    id: str
    scope: str
    model: str
    tokens: int  # the output cap sent upstream
    amount: float  # µ$


class Scope:
    __slots__ = ("budget", "charged", "held", "calls", "overbilled")

    def __init__(self, budget: float, charged: float = 0.0):
        self.budget = budget
        self.charged = charged
        self.held = 0.0
        self.calls = 0
        self.overbilled: str | None = None

    def view(self, name: str) -> dict:
        return {"scope": name, "budget": self.budget, "charged": round(self.charged, 6), "held": round(self.held, 6),
                "left": round(max(0.0, self.budget - self.charged - self.held), 6), "calls": self.calls,
                "status": "overbilled" if self.overbilled else "open", "overbilled": self.overbilled}


def _refusal(scope: str, budget: float, spent: float, total_left: float | None, cost: Cost) -> Refused:
    if total_left is not None and total_left < budget - spent:
        return Refused(f"the proxy's total budget has {max(total_left, 0.0):.2f} µ$ left, not enough for this call "
                       f"(its prompt alone may cost {cost.input_cost:.2f} µ$)", "total")
    return Refused(f"scope '{scope}' has {max(budget - spent, 0.0):.2f} µ$ left of its budget of {budget:g} µ$, "
                   f"not enough for this call (its prompt alone may cost {cost.input_cost:.2f} µ$, and at least "
                   f"{min(cost.min_tokens, cost.requested)} output tokens are needed)", "budget")


# How a call line's `error` says the upstream billed past the reservation (trace.md).
_OVERBILLED = "overbilled: "


def scope_limits(path: str | None) -> dict[str, tuple[float | None, str | None]]:
    """Each scope's tightest budget and its overbilled reason (or None) in an existing trace's lines.

    The money comes from `runtime.trace.read_ledgers`, which refuses a damaged
    trace; this reads what only the proxy writes, skipping any line that is not
    JSON (a torn last line).
    """
    limits: dict[str, tuple[float | None, str | None]] = {}
    if not path or not os.path.exists(path):
        return limits
    with open(path, "rb") as handle:
        for line in handle:
            try:
                data = json.loads(line)
            except ValueError:
                continue
            if not isinstance(data, dict) or not isinstance(data.get("task_id"), str):
                continue
            budget, overbilled = limits.get(data["task_id"], (None, None))
            given = data.get("budget") if data.get("type") == "reserve" else None
            if type(given) in (int, float) and math.isfinite(given) and (budget is None or given < budget):
                budget = float(given)
            error = data.get("error") if data.get("type") == "call" else None
            if isinstance(error, str) and error.startswith(_OVERBILLED):
                overbilled = overbilled or error[len(_OVERBILLED):]
            limits[data["task_id"]] = (budget, overbilled)
    return limits


class LocalLedger:
    """Scopes and the total in this process, remembered by the trace."""

    def __init__(self, total: float | None = None, trace=None, earlier: dict | None = None,
                 limits: dict[str, tuple[float | None, str | None]] | None = None):
        self.total = total
        self.trace = trace  # a runtime.trace.TraceWriter, or None
        self.scopes: dict[str, Scope] = {}
        self._earlier = {scope: ledger.spent for scope, ledger in (earlier or {}).items()}
        self._limits = limits or {}  # from scope_limits: a restart keeps a tightened budget and a closed scope
        self.spent_before = sum(self._earlier.values())
        self.charged = self.spent_before  # every scope's charges, earlier runs' open reservations included
        self.held = 0.0
        self._ids = 0

    @property
    def total_left(self) -> float | None:
        return None if self.total is None else self.total - self.charged - self.held

    def _scope(self, name: str, budget: float) -> Scope:
        scope = self.scopes.get(name)
        if scope is None:
            earlier_budget, overbilled = self._limits.get(name, (None, None))
            scope = self.scopes[name] = Scope(budget, self._earlier.get(name, 0.0))
            if earlier_budget is not None and earlier_budget < budget:
                scope.budget = earlier_budget
            scope.overbilled = overbilled
        elif budget < scope.budget:
            scope.budget = budget  # a scope's budget may be tightened, never raised
        return scope

    async def reserve(self, name: str, budget: float, model: str, cost: Cost) -> Hold:
        scope = self._scope(name, budget)
        if scope.overbilled:
            raise Refused(f"scope '{name}' is closed: {scope.overbilled}", "overbilled")
        left = scope.budget - scope.charged - scope.held
        total_left = self.total_left
        fit = afford(left if total_left is None else min(left, total_left), cost)
        if fit is None:
            raise _refusal(name, scope.budget, scope.charged + scope.held, total_left, cost)
        tokens, amount = fit
        scope.held += amount
        scope.calls += 1
        self.held += amount
        self._ids += 1
        hold_id = str(self._ids)
        if self.trace is not None:
            hold_id = self.trace.reserve({"task_id": name, "model": model, "reserved": round(amount, 6),
                                          "budget": scope.budget, "max_tokens": tokens})
        return Hold(hold_id, name, model, tokens, amount)

    async def close(self, hold: Hold, charged: float, record: dict, overbilled: str | None = None) -> None:
        """End the call: `charged` µ$ (the usage's price, the whole hold when the outcome is unknown, or 0)."""
        scope = self.scopes[hold.scope]
        scope.held -= hold.amount
        scope.charged += charged
        self.held -= hold.amount
        self.charged += charged
        if overbilled and not scope.overbilled:
            scope.overbilled = overbilled
        if self.trace is not None:
            self.trace.call({"id": hold.id, "task_id": hold.scope, "model": hold.model, "reserved": round(hold.amount, 6),
                             "charged": round(charged, 6), "max_tokens": hold.tokens, **record})

    async def view(self, name: str) -> dict | None:
        scope = self.scopes.get(name)
        if scope is None:
            spent = self._earlier.get(name)
            return None if spent is None else {"scope": name, "charged": round(spent, 6), "held": 0.0,
                                               "calls": 0, "status": "earlier run"}
        return scope.view(name)

    async def totals(self) -> dict:
        return {"total": self.total, "charged": round(self.charged, 6), "held": round(self.held, 6),
                "left": None if self.total is None else round(max(0.0, self.total_left), 6),
                "scopes": len(set(self.scopes) | set(self._earlier))}


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
        """`command()`'s answer from the server; a Refused (kind ledger) when the server cannot be reached."""
        from redis.exceptions import RedisError

        try:
            return await command()
        except (RedisError, OSError) as problem:
            raise Refused(f"the shared ledger cannot be reached ({type(problem).__name__}); nothing is forwarded "
                          "until it can", "ledger") from None

    async def _call(self, script, scope: str, args: list):
        return await self._ask(lambda: script(keys=self._keys(scope), args=[self.epoch, *args]))

    async def reserve(self, name: str, budget: float, model: str, cost: Cost) -> Hold:
        answer = await self._call(self._reserve, name, [
            repr(budget), repr(-1.0 if self.total is None else self.total), repr(cost.input_cost),
            repr(cost.output_rate), cost.choices, cost.requested, cost.min_tokens])
        if answer[0] == "ledger":
            raise Refused("the shared ledger was lost (its Redis server restarted or was flushed); nothing is "
                          "forwarded until an operator restores it", "ledger")
        if answer[0] == "overbilled":
            raise Refused(f"scope '{name}' is closed: {answer[1]}", "overbilled")
        if answer[0] == "refused":
            total_left = None if self.total is None else float(answer[3])
            raise _refusal(name, float(answer[1]), float(answer[2]), total_left, cost)
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
        except Refused:
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
