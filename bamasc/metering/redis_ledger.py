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
from bamasc.metering.ledger import (
    Hold, Level, closed, distinct, level_fields, level_view, line_limit, refusal, short_of, stored_scope_view,
    tighter, trace_lines,
)
from bamasc.metering.refusals import LedgerLost
from bamasc.records import record

# KEYS = scope hash, totals hash, epoch key, then a hash per level (a key's or a team's window); ARGV = epoch,
# the scope's budget, the cost (input, rate, choices, requested, least), the levels' time to live in seconds,
# then each level's budget. The script checks the epoch, sets or lowers the scope's budget (its last reply field
# says whether it did), then checks the scope, the total (the totals hash's budget) and every level; a refusal
# names the level that bound it (0: the scope or the total) and that level's spend.
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
local binding, bound_spent = 0, '0'
for i = 4, #KEYS do
  local level_spent = tonumber(redis.call('HGET', KEYS[i], 'charged') or '0') + tonumber(redis.call('HGET', KEYS[i], 'held') or '0')
  local room = tonumber(ARGV[i + 5]) - level_spent
  if room < left then left, binding, bound_spent = room, i - 3, string.format('%.17g', level_spent) end
end
local input_cost, rate, choices, requested, least = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7])
local room = left - input_cost
local refused = {'refused', string.format('%.17g', budget), string.format('%.17g', spent), total_left, tostring(binding), bound_spent, set}
if room < 0 then return refused end
local tokens = requested
if rate * choices > 0 then tokens = math.min(requested, math.floor(room / (rate * choices) + 1e-9)) end
if tokens < math.min(least, requested) then return refused end
local amount = string.format('%.17g', input_cost + rate * choices * tokens)
redis.call('HINCRBYFLOAT', KEYS[1], 'held', amount)
redis.call('HINCRBY', KEYS[1], 'calls', 1)
redis.call('HINCRBYFLOAT', KEYS[2], 'held', amount)
for i = 4, #KEYS do
  redis.call('HINCRBYFLOAT', KEYS[i], 'held', amount)
  redis.call('EXPIRE', KEYS[i], tonumber(ARGV[8]))
end
return {'ok', string.format('%.0f', tokens), amount, string.format('%.17g', budget), set}
"""
# KEYS = scope hash, totals hash, epoch key, the hold's level hashes; ARGV = epoch, amount held, charged,
# overbilled reason ('' for none).
_CLOSE = """
if redis.call('GET', KEYS[3]) ~= ARGV[1] then return 'ledger' end
for i = 1, #KEYS do
  if i ~= 3 then
    redis.call('HINCRBYFLOAT', KEYS[i], 'held', '-' .. ARGV[2])
    redis.call('HINCRBYFLOAT', KEYS[i], 'charged', ARGV[3])
  end
end
if ARGV[4] ~= '' then redis.call('HSETNX', KEYS[1], 'overbilled', ARGV[4]) end
return 'ok'
"""
# How long a level's hash outlives its window: past any hold taken in it.
LEVEL_TTL_S = 40 * 86400
# KEYS = epoch key, folded-runs set, totals hash, then the scope hashes the runs name (by number, from 1).
# ARGV = 'new' (start the ledger: refused where one exists) or 'join' (refused where the epoch changed), epoch,
# the total's budget ('' for none; 'new' only), and the runs as JSON: [[run, [[scope number, µ$ spent,
# budget or '', overbilled or ''], ...], [[level key number, µ$ spent], ...]], ...], the level hashes' keys after
# the scopes'. A run already in the set adds nothing: each is folded once.
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
    for _, level in ipairs(run[3]) do
      redis.call('HINCRBYFLOAT', KEYS[3 + level[1]], 'charged', level[2])
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
    levels: dict  # level -> µ$, counted as a scope's


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
    levels_of: dict[str, tuple[str, ...]] = {}  # reservation id -> the levels it held
    for path in paths:
        for number, data in enumerate(trace_lines(path)):
            spent_under, kind, scope = data.get("epoch"), data.get("type"), data["task_id"]
            if spent_under == epoch or kind not in ("reserve", "call", "budget"):
                continue
            if kind == "call" and data.get("id") is None and not data.get("charged"):
                continue  # a refused call (a `skipped` line): nothing was held or spent
            run = data.get("run") if kind == "budget" else str(data.get("id")).rsplit(".", 1)[0]
            member = f"{spent_under if isinstance(spent_under, str) else ''}/{run}"
            if kind == "reserve":
                reserved.setdefault(member, {})[data["id"]] = (scope, data["reserved"])
                if isinstance(data.get("levels"), list):
                    levels_of[data["id"]] = tuple(str(level) for level in data["levels"])
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
        levels: dict[str, float] = {}
        ended = [(key, amount) for key, (_, amount) in settled.items()]
        for key, amount in [*ended, *((key, held[1]) for key, held in reserved.get(member, {}).items()
                                      if key not in settled)]:
            for level in levels_of.get(key, ()):
                levels[level] = levels.get(level, 0.0) + amount
        runs.append(RunSpend(member, spent, found, levels))
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

    def key_names(self) -> tuple[list[str], str]:
        """The key store's hashes (keys, key-digests, teams) and the epoch key (metering/redis_keys.py)."""
        return [f"{self.prefix}:keys", f"{self.prefix}:key-digests", f"{self.prefix}:teams"], f"{self.prefix}:epoch"

    def pace_key(self, key: str) -> str:
        """Where a provider key's shared pace lives (metering/redis_pace.py)."""
        return f"{self.prefix}:pace:{key}"

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
        levels = list(dict.fromkeys(level for run in runs for level in run.levels))
        number = {scope: index for index, scope in enumerate(scopes, start=1)}
        level_number = {level: index for index, level in enumerate(levels, start=len(scopes) + 1)}
        payload = [[run.member, [[number[scope], repr(run.spent.get(scope, 0.0)),
                                  "" if budget is None else repr(budget), overbilled or ""]
                                 for scope, (budget, overbilled) in run.limits.items()],
                    [[level_number[level], repr(spent)] for level, spent in run.levels.items()]] for run in runs]
        keys = [f"{self.prefix}:epoch", f"{self.prefix}:folded", f"{self.prefix}:total",
                *(self._keys(scope)[0] for scope in scopes), *(self._level_key(level) for level in levels)]
        return await self._ask(lambda: self._fold(keys=keys, args=[*args, json.dumps(payload)]))

    async def _ask(self, command):
        return await ask(command)

    async def _call(self, script, scope: str, args: list, levels: tuple[str, ...] = ()):
        keys = [*self._keys(scope), *(self._level_key(level) for level in levels)]
        return await self._ask(lambda: script(keys=keys, args=[self.epoch, *args]))

    def _level_key(self, level: str) -> str:
        return f"{self.prefix}:level:{level}"

    def _lost(self, name: str) -> LedgerLost:
        return LedgerLost(name, "the shared ledger was lost (its Redis server restarted or was flushed); nothing "
                                "is forwarded until an operator starts a new one (docs/proxy.md)")

    async def reserve(self, name: str, budget: float, model: str, cost: Cost, levels: tuple[Level, ...] = ()) -> Hold:
        """Hold the largest call that fits in the scope, the total and every level at once (one script), or refuse."""
        levels = distinct(levels)
        names = tuple(level.name for level in levels)
        answer = await self._call(self._reserve, name, [
            repr(budget), repr(cost.input_cost), repr(cost.output_rate), cost.choices, cost.requested, cost.min_tokens,
            LEVEL_TTL_S, *(repr(level.budget) for level in levels)], names)
        if answer[0] == "ledger":
            raise self._lost(name)
        if answer[-1] == "1" and self.trace is not None:  # the request set or lowered the scope's budget
            self.trace.budget({"task_id": name, "budget": budget, "epoch": self.epoch})
        if answer[0] == "overbilled":
            raise closed(name, answer[1])
        if answer[0] == "refused":
            if int(answer[4]):
                raise short_of(levels[int(answer[4]) - 1], float(answer[5]), cost)
            raise refusal(name, float(answer[1]), float(answer[2]), float(answer[3]) if answer[3] else None, cost)
        tokens, amount, budget = int(answer[1]), float(answer[2]), float(answer[3])
        self._ids += 1
        hold_id = f"{self._run}.{self._ids}"
        if self.trace is not None:
            hold_id = self.trace.reserve({"task_id": name, "model": model, "reserved": round(amount, 6),
                                          "budget": budget, "max_tokens": tokens, "epoch": self.epoch,
                                          **level_fields(levels)})
        return Hold(hold_id, name, model, tokens, amount, names)

    async def close(self, hold: Hold, charged: float, record: dict, overbilled: str | None = None) -> None:
        if self.trace is not None:
            self.trace.call({"id": hold.id, "task_id": hold.scope, "model": hold.model, "reserved": round(hold.amount, 6),
                             "charged": round(charged, 6), "max_tokens": hold.tokens, **record, "epoch": self.epoch})
        try:
            await self._call(self._close, hold.scope, [repr(hold.amount), repr(charged), overbilled or ""], hold.levels)
        except LedgerLost:
            pass  # the hold stays in Redis, counted as spent: the safe side

    async def _read(self, key: str) -> dict:
        """A hash of the ledger; a LedgerLost when the ledger this process joined is gone."""
        epoch, data = await self._together(lambda pipe: pipe.get(self._keys("-")[2]), lambda pipe: pipe.hgetall(key))
        if epoch != self.epoch:
            raise self._lost("-")
        return data

    async def view(self, name: str) -> dict | None:
        return stored_scope_view(name, await self._read(self._keys(name)[0]))

    async def level(self, name: str, budget: float) -> dict:
        """What a level has charged, holds and has left of `budget`."""
        data = await self._read(self._level_key(name))
        return level_view(name, budget, float(data.get("charged", 0)), float(data.get("held", 0)))

    async def totals(self) -> dict:
        data = await self._read(self._keys("-")[1])
        charged, held = float(data.get("charged", 0)), float(data.get("held", 0))
        return {"total": self.total, "charged": round(charged, 6), "held": round(held, 6),
                "left": None if self.total is None else round(max(0.0, self.total - charged - held), 6)}


async def ask(command):
    """`command()`'s answer from Redis (a server or a cluster); a LedgerLost when it cannot be reached."""
    from redis.exceptions import RedisError

    try:
        return await command()
    except (RedisError, OSError) as problem:
        raise LedgerLost("-", f"the shared ledger cannot be reached ({type(problem).__name__}); nothing is "
                              "forwarded until it can") from None
