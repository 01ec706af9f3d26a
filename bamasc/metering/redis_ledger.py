"""The proxy fleet's ledger: per-scope budgets and the total in a Redis server, shared by every proxy on it.

The check and the hold are one Lua script on the server, so they are atomic
across processes; the script reads the total's budget from the ledger, where
the proxy that started the ledger put it. A reservation of a process that
dies stays held.

One proxy starts a ledger, on an operator's word (`--new-ledger`); the others
join it. Its epoch key names it: when the server loses it (restarted without
persistence, flushed), every proxy refuses new reservations rather than spend
money nobody ledgers, and a proxy started then finds no ledger and refuses to
start rather than begin from zero. Every trace line a proxy writes names the
epoch it was spent under. Starting or joining a ledger folds into it what the
proxy's traces hold under any other epoch, once per trace run (a set of the
runs folded, updated by the script that adds them): each scope's charges and
open reservations in full, its tightest budget, its overbilled closure, and
their sum into the total's spend.
"""

from __future__ import annotations

import json
import os

from bamasc.metering.afford import Cost
from bamasc.metering.ledger import Hold, closed, line_limit, refusal, tighter, trace_lines
from bamasc.metering.refusals import LedgerLost
from bamasc.records import record

# KEYS = scope hash, totals hash, epoch key. The script checks the epoch, sets or lowers the scope's budget
# (its last reply field says whether it did), then checks the scope and the total (the totals hash's budget).
_RESERVE = """
if redis.call('GET', KEYS[3]) ~= ARGV[1] then return {'ledger'} end
local budget = tonumber(ARGV[2])
local known = redis.call('HGET', KEYS[1], 'budget')
local set = '0'
if known and tonumber(known) <= budget then
  budget = tonumber(known)
else
  redis.call('HSET', KEYS[1], 'budget', string.format('%.17g', budget))
  set = '1'
end
if redis.call('HGET', KEYS[1], 'overbilled') then return {'overbilled', redis.call('HGET', KEYS[1], 'overbilled'), set} end
local spent = tonumber(redis.call('HGET', KEYS[1], 'charged') or '0') + tonumber(redis.call('HGET', KEYS[1], 'held') or '0')
local left = budget - spent
local total = redis.call('HGET', KEYS[2], 'budget')
local total_left = ''
if total then
  local room = tonumber(total) - tonumber(redis.call('HGET', KEYS[2], 'charged') or '0') - tonumber(redis.call('HGET', KEYS[2], 'held') or '0')
  if room < left then left = room end
  total_left = string.format('%.17g', room)
end
local input_cost, rate, choices, requested, least = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7])
local room = left - input_cost
if room < 0 then return {'refused', string.format('%.17g', budget), string.format('%.17g', spent), total_left, set} end
local tokens = requested
if rate * choices > 0 then tokens = math.min(requested, math.floor(room / (rate * choices) + 1e-9)) end
if tokens < math.min(least, requested) then return {'refused', string.format('%.17g', budget), string.format('%.17g', spent), total_left, set} end
local amount = input_cost + rate * choices * tokens
redis.call('HINCRBYFLOAT', KEYS[1], 'held', string.format('%.17g', amount))
redis.call('HINCRBY', KEYS[1], 'calls', 1)
redis.call('HINCRBYFLOAT', KEYS[2], 'held', string.format('%.17g', amount))
return {'ok', string.format('%.0f', tokens), string.format('%.17g', amount), string.format('%.17g', budget), set}
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
# KEYS = epoch key, folded-runs set, totals hash, then the scope hashes the runs name (by number, from 1).
# ARGV = 'new' (start the ledger: refused where one exists) or 'join' (refused where the epoch changed), epoch,
# the total's budget ('' for none; 'new' only), and the runs as JSON: [[run, [[scope number, µ$ spent,
# budget or '', overbilled or ''], ...]], ...]. A run already in the set adds nothing: each is folded once.
_FOLD = """
if ARGV[1] == 'new' then
  if redis.call('EXISTS', KEYS[1]) == 1 then return {'exists'} end
  redis.call('SET', KEYS[1], ARGV[2])
  redis.call('DEL', KEYS[2])
  if ARGV[3] ~= '' then redis.call('HSET', KEYS[3], 'budget', ARGV[3]) end
elseif redis.call('GET', KEYS[1]) ~= ARGV[2] then
  return {'ledger'}
end
local folded = 0
for _, run in ipairs(cjson.decode(ARGV[4])) do
  if redis.call('SADD', KEYS[2], run[1]) == 1 then
    folded = folded + 1
    for _, scope in ipairs(run[2]) do
      local key = KEYS[3 + scope[1]]
      redis.call('HINCRBYFLOAT', key, 'charged', scope[2])
      redis.call('HINCRBYFLOAT', KEYS[3], 'charged', scope[2])
      local known = redis.call('HGET', key, 'budget')
      if scope[3] ~= '' and (not known or tonumber(known) > tonumber(scope[3])) then
        redis.call('HSET', key, 'budget', scope[3])
      end
      if scope[4] ~= '' then redis.call('HSETNX', key, 'overbilled', scope[4]) end
    end
  end
end
return {'ok', tostring(folded)}
"""


class LedgerMismatch(Exception):
    """The ledger in Redis is not one this proxy may serve from as started: none to join, one where a new one
    was asked for, or another total budget. Nothing was changed and nothing is served."""


@record
class RunSpend:
    """What one trace run holds under a lost epoch: per scope, its spend and its (budget, overbilled) limit."""

    member: str  # the run in the ledger's set of runs folded: the epoch it spent under, and the trace's run prefix
    spent: dict  # scope -> µ$: charges, and reservations without a call line in full
    limits: dict  # scope -> (tightest budget or None, overbilled reason or None)


def lost_runs(paths: list[str], epoch: str) -> list[RunSpend]:
    """Each trace run of `paths` that spent under an epoch other than `epoch` (or none: a local or older proxy).

    A scope's spend is counted as `exec --resume` counts a task's
    (runtime/trace.py): its call lines' charges, and in full each reservation
    whose call line never came. Lines are known by their reservation id, so a
    trace given twice (or a copy of it) counts once.
    """
    reserved: dict[str, dict[str, tuple[str, float]]] = {}  # member -> reservation id -> (scope, µ$)
    charged: dict[str, dict[object, tuple[str, float]]] = {}  # member -> id (or line number) -> (scope, µ$)
    limits: dict[str, dict[str, tuple]] = {}
    for path in paths:
        for number, data in enumerate(trace_lines(path)):
            spent_under, kind, scope = data.get("epoch"), data.get("type"), data["task_id"]
            if spent_under == epoch or kind not in ("reserve", "call", "budget"):
                continue
            run = data.get("run") if kind == "budget" else str(data.get("id")).rsplit(".", 1)[0]
            member = f"{spent_under if isinstance(spent_under, str) else ''}/{run}"
            if kind == "reserve":
                reserved.setdefault(member, {})[data["id"]] = (scope, data["reserved"])
            elif kind == "call":
                key = data["id"] if isinstance(data.get("id"), str) else (path, number)
                charged.setdefault(member, {})[key] = (scope, data["charged"])
            found = limits.setdefault(member, {})
            found[scope] = tighter(found.get(scope, (None, None)), line_limit(data))
    runs = []
    for member, found in limits.items():
        settled = charged.get(member, {})
        unsettled = [held for key, held in reserved.get(member, {}).items() if key not in settled]
        spent: dict[str, float] = {}
        for scope, amount in [*settled.values(), *unsettled]:
            spent[scope] = spent.get(scope, 0.0) + amount
        runs.append(RunSpend(member, spent, found))
    return runs


class RedisLedger:
    """Scopes and the total in a Redis server, shared by every proxy given the same URL and prefix.

    The money lives in Redis; each process still writes its own trace of what
    it forwarded. `open` starts the ledger (`create`) or joins it, folding in
    what `fold` (trace paths; the process's own trace with them) holds under
    other epochs.
    """

    def __init__(self, url: str, total: float | None = None, prefix: str = "bamasc", trace=None,
                 create: bool = False, fold: tuple[str, ...] = ()):
        import redis.asyncio as redis

        self.client = redis.Redis.from_url(url, decode_responses=True, socket_timeout=5, socket_connect_timeout=5)
        self.total = total  # as given; after `open`, the ledger's
        self.trace = trace
        self.prefix = prefix
        self.create = create
        self.fold = tuple(dict.fromkeys([*([trace.path] if trace is not None and trace.path else []), *fold]))
        self.epoch: str | None = None
        self.folded = 0  # trace runs this process folded in when it opened
        self._reserve = self.client.register_script(_RESERVE)
        self._close = self.client.register_script(_CLOSE)
        self._fold = self.client.register_script(_FOLD)
        self._ids = 0
        self._run = os.urandom(4).hex()

    def _keys(self, scope: str) -> list[str]:
        return [f"{self.prefix}:scope:{scope}", f"{self.prefix}:total", f"{self.prefix}:epoch"]

    async def open(self) -> None:
        """Start the ledger (`create`) or join the one the server holds; either way, fold the traces in first."""
        self.epoch, self.folded = await (self._start() if self.create else self._join())

    async def _start(self) -> tuple[str, int]:
        epoch = os.urandom(8).hex()
        runs = lost_runs(list(self.fold), epoch)  # the set of runs folded starts empty: every run is folded
        total = "" if self.total is None else repr(float(self.total))
        answer = await self._fold_runs(["new", epoch, total], runs)
        if answer[0] == "exists":
            raise LedgerMismatch(f"a ledger exists already under the prefix '{self.prefix}': drop --new-ledger to "
                                 "join it (--new-ledger starts one where there is none, as after a loss)")
        return epoch, int(answer[1])

    async def _join(self) -> tuple[str, int]:
        folded_key = f"{self.prefix}:folded"
        epoch, total = await self._together(lambda pipe: pipe.get(f"{self.prefix}:epoch"),
                                            lambda pipe: pipe.hget(f"{self.prefix}:total", "budget"))
        if epoch is None:
            raise LedgerMismatch(
                f"no ledger under the prefix '{self.prefix}': none was started, or the server lost it (restarted "
                "without persistence, or flushed), and a proxy starts none by itself. Give one proxy --new-ledger "
                "(after a loss, with --fold-trace FILE for every other proxy's trace): it folds in what the traces "
                "hold; then start the others as before")
        given = None if self.total is None else float(self.total)
        ledgers = None if total is None else float(total)
        if given is not None and given != ledgers:
            words = "has no total budget" if ledgers is None else f"has a total budget of {ledgers:.15g} µ$"
            raise LedgerMismatch(f"the ledger {words}, not the {given:.15g} µ$ of --total-budget: drop "
                                 "--total-budget to use the ledger's (the proxy that starts a ledger, with "
                                 "--new-ledger, sets its total)")
        self.total = ledgers
        runs = lost_runs(list(self.fold), epoch)
        if runs:
            known = await self._together(*(lambda pipe, run=run: pipe.sismember(folded_key, run.member)
                                           for run in runs))
            runs = [run for run, folded in zip(runs, known) if not folded]  # the script checks again
        answer = await self._fold_runs(["join", epoch, ""], runs)
        if answer[0] == "ledger":
            raise LedgerLost("-", "the shared ledger was lost while this proxy joined it; nothing was served")
        return epoch, int(answer[1])

    async def _together(self, *commands) -> list:
        """The answers of `commands` (each queues one on a pipeline), run as one transaction."""

        async def run() -> list:
            async with self.client.pipeline(transaction=True) as pipe:
                for command in commands:
                    command(pipe)
                return await pipe.execute()

        return await self._ask(run)

    async def _fold_runs(self, args: list[str], runs: list[RunSpend]):
        scopes = list(dict.fromkeys(scope for run in runs for scope in run.limits))
        number = {scope: index for index, scope in enumerate(scopes, start=1)}
        payload = [[run.member, [[number[scope], repr(run.spent.get(scope, 0.0)),
                                  "" if budget is None else repr(budget), overbilled or ""]
                                 for scope, (budget, overbilled) in run.limits.items()]] for run in runs]
        keys = [f"{self.prefix}:epoch", f"{self.prefix}:folded", f"{self.prefix}:total",
                *(self._keys(scope)[0] for scope in scopes)]
        return await self._ask(lambda: self._fold(keys=keys, args=[*args, json.dumps(payload)]))

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

    def _lost(self, name: str) -> LedgerLost:
        return LedgerLost(name, "the shared ledger was lost (its Redis server restarted or was flushed); nothing "
                                "is forwarded until an operator starts a new one (docs/proxy.md)")

    async def reserve(self, name: str, budget: float, model: str, cost: Cost) -> Hold:
        answer = await self._call(self._reserve, name, [
            repr(budget), repr(cost.input_cost), repr(cost.output_rate), cost.choices, cost.requested, cost.min_tokens])
        if answer[0] == "ledger":
            raise self._lost(name)
        if answer[-1] == "1" and self.trace is not None:  # the request set or lowered the scope's budget
            self.trace.budget({"task_id": name, "budget": budget, "epoch": self.epoch})
        if answer[0] == "overbilled":
            raise closed(name, answer[1])
        if answer[0] == "refused":
            raise refusal(name, float(answer[1]), float(answer[2]), float(answer[3]) if answer[3] else None, cost)
        tokens, amount, budget = int(answer[1]), float(answer[2]), float(answer[3])
        self._ids += 1
        hold_id = f"{self._run}.{self._ids}"
        if self.trace is not None:
            hold_id = self.trace.reserve({"task_id": name, "model": model, "reserved": round(amount, 6),
                                          "budget": budget, "max_tokens": tokens, "epoch": self.epoch})
        return Hold(hold_id, name, model, tokens, amount)

    async def close(self, hold: Hold, charged: float, record: dict, overbilled: str | None = None) -> None:
        if self.trace is not None:
            self.trace.call({"id": hold.id, "task_id": hold.scope, "model": hold.model, "reserved": round(hold.amount, 6),
                             "charged": round(charged, 6), "max_tokens": hold.tokens, **record, "epoch": self.epoch})
        try:
            await self._call(self._close, hold.scope, [repr(hold.amount), repr(charged), overbilled or ""])
        except LedgerLost:
            pass  # the hold stays in Redis, counted as spent: the safe side

    async def _read(self, key: str) -> dict:
        """A hash of the ledger; a LedgerLost when the ledger this process joined is gone."""
        epoch, data = await self._together(lambda pipe: pipe.get(self._keys("-")[2]), lambda pipe: pipe.hgetall(key))
        if epoch != self.epoch:
            raise self._lost("-")
        return data

    async def view(self, name: str) -> dict | None:
        data = await self._read(self._keys(name)[0])
        if not data:
            return None
        budget, charged, held = (float(data.get(key, 0)) for key in ("budget", "charged", "held"))
        return {"scope": name, "budget": budget, "charged": round(charged, 6), "held": round(held, 6),
                "left": round(max(0.0, budget - charged - held), 6), "calls": int(data.get("calls", 0)),
                "status": "overbilled" if data.get("overbilled") else "open", "overbilled": data.get("overbilled")}

    async def totals(self) -> dict:
        data = await self._read(self._keys("-")[1])
        charged, held = float(data.get("charged", 0)), float(data.get("held", 0))
        return {"total": self.total, "charged": round(charged, 6), "held": round(held, 6),
                "left": None if self.total is None else round(max(0.0, self.total - charged - held), 6)}
