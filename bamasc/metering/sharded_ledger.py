"""The proxy fleet's ledger on a Redis Cluster: scopes spread over the cluster's slots, shared budgets leased in slices.

The ledger is cut into `SHARDS` shards, each a hash tag (`{bamasc:7.41}`)
chosen so the shards' slots spread evenly over the cluster's 16,384. A scope
lives in one shard (by a hash of its name), with that shard's copy of the
epoch, so its reservation and its settlement are each one script on one slot:
as the old ledger's, atomic, but no key of it is shared with other scopes.

A budget many scopes share (the total, a key's window, a team's window) is a
counter in its own shard, and no call touches it: each proxy leases a slice
of it (`Slice`: the counter's `held` grows by the slice, and the slice is
recorded in the counter's lease hash under the proxy's run), reserves against
its slices in its own memory, and every `REPORT_S` reports what its calls
settled (moved from the slice to the counter's `charged`) and gives back a
slice it has not used since. The invariant, counter by counter:

    charged + Σ live slices + what a dead proxy's slices still hold <= budget,

and a process never reserves past its slices, so the calls' charges never pass
the budget (a provider that bills past its reservation aside, as ever). A
proxy killed holding a slice leaves it held: counted as spent, never spent
twice; at most one slice per counter is lost that way per killed proxy. A
slice is at most `LEASE_CALLS` calls of the size that asked for it, and at
most what the call needs plus 1/`LEASE_SHARE` of what the counter has left,
so near the end of a budget slices shrink to one call each.

Epochs, `--new-ledger` and `--fold-trace` work as in metering/redis_ledger.py,
shard by shard: every shard holds the epoch, every script checks its own
shard's copy, and a trace run is folded into each shard once (a set of the
runs folded per shard). A node that loses its data (a primary with no replica
to take over) loses its shards' epochs, and a proxy that touches one refuses
from then on; the operator flushes the cluster and starts a new ledger with
every trace, as after a single server's loss.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
import zlib
from urllib.parse import urlsplit

from bamasc.metering.afford import Cost
from bamasc.metering.ledger import Hold, Level, closed, distinct, level_view, refusal, short_of
from bamasc.metering.redis_ledger import LEVEL_TTL_S, LedgerMismatch, lost_runs
from bamasc.metering.refusals import LedgerLost, ShortOfTotal

SHARDS = 64  # fixed per ledger: it is written into the ledger and a proxy of another count refuses to join
SLOTS = 16384
LEASE_CALLS = 32
LEASE_SHARE = 8
REPORT_S = 1.0
CLUSTER_SCHEME = "redis+cluster"

# KEYS = scope hash, its shard's epoch key; ARGV = epoch, the scope's budget, the cost (input, rate, choices,
# requested, least), and the cap its slices allow ('' for none). As the old ledger's reservation, without the
# total and the levels: the cap stands for them.
_RESERVE = """
if redis.call('GET', KEYS[2]) ~= ARGV[1] then return {'ledger'} end
local found = redis.call('HMGET', KEYS[1], 'budget', 'overbilled', 'charged', 'held')
local budget = tonumber(ARGV[2])
local set = '0'
if found[1] and tonumber(found[1]) <= budget then
  budget = tonumber(found[1])
else
  redis.call('HSET', KEYS[1], 'budget', string.format('%.17g', budget))
  set = '1'
end
if found[2] then return {'overbilled', found[2], set} end
local spent = tonumber(found[3] or '0') + tonumber(found[4] or '0')
local left = budget - spent
if ARGV[8] ~= '' and tonumber(ARGV[8]) < left then left = tonumber(ARGV[8]) end
local input_cost, rate, choices, requested, least = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7])
local room = left - input_cost
local refused = {'refused', string.format('%.17g', budget), string.format('%.17g', spent), set}
if room < 0 then return refused end
local tokens = requested
if rate * choices > 0 then tokens = math.min(requested, math.floor(room / (rate * choices) + 1e-9)) end
if tokens < math.min(least, requested) then return refused end
local amount = string.format('%.17g', input_cost + rate * choices * tokens)
redis.call('HINCRBYFLOAT', KEYS[1], 'held', amount)
redis.call('HINCRBY', KEYS[1], 'calls', 1)
return {'ok', string.format('%.0f', tokens), amount, string.format('%.17g', budget), set}
"""
# KEYS = scope hash, its shard's epoch key; ARGV = epoch, amount held, charged, overbilled reason ('' for none).
_CLOSE = """
if redis.call('GET', KEYS[2]) ~= ARGV[1] then return 'ledger' end
redis.call('HINCRBYFLOAT', KEYS[1], 'held', '-' .. ARGV[2])
redis.call('HINCRBYFLOAT', KEYS[1], 'charged', ARGV[3])
if ARGV[4] ~= '' then redis.call('HSETNX', KEYS[1], 'overbilled', ARGV[4]) end
return 'ok'
"""
# KEYS = counter hash, its lease hash, its shard's epoch key; ARGV = epoch, the lease's name (the proxy's run),
# µ$ settled from the slice since the last report, µ$ of the slice given back, µ$ the slice must grow by at least
# (0: none), µ$ it would grow by, the counter's budget ('' for the one in the hash), the hashes' time to live
# ('' for none). The settled part moves from the slice (and the counter's `held`) to `charged`; a growth is
# granted where the counter has room for the least, up to that least plus 1/LEASE_SHARE of what is left.
# Answers {'ok', µ$ granted, the slice now, what the counter has left} or {'short', the slice, left}.
_LEASE = """
if redis.call('GET', KEYS[3]) ~= ARGV[1] then return {'ledger'} end
local slice = tonumber(redis.call('HGET', KEYS[2], ARGV[2]) or '0')
local settled, back, least, want = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
local moved = math.min(settled, slice)
back = math.min(back, slice - moved)
if settled > 0 then redis.call('HINCRBYFLOAT', KEYS[1], 'charged', string.format('%.17g', settled)) end
if moved + back > 0 then redis.call('HINCRBYFLOAT', KEYS[1], 'held', string.format('%.17g', -(moved + back))) end
slice = slice - moved - back
local found = redis.call('HMGET', KEYS[1], 'budget', 'charged', 'held')
local budget = tonumber(ARGV[7] ~= '' and ARGV[7] or found[1] or '0')
local left = budget - tonumber(found[2] or '0') - tonumber(found[3] or '0')
local answer = 'ok'
local grant = 0
if least > 0 then
  if left < least then
    answer = 'short'
  else
    grant = math.min(want, least + (left - least) / tonumber(ARGV[9]))
    redis.call('HINCRBYFLOAT', KEYS[1], 'held', string.format('%.17g', grant))
    slice = slice + grant
    left = left - grant
  end
end
if slice > 1e-9 then redis.call('HSET', KEYS[2], ARGV[2], string.format('%.17g', slice))
else redis.call('HDEL', KEYS[2], ARGV[2]) end
if ARGV[8] ~= '' then
  redis.call('EXPIRE', KEYS[1], tonumber(ARGV[8]))
  redis.call('EXPIRE', KEYS[2], tonumber(ARGV[8]))
end
return {answer, string.format('%.17g', grant), string.format('%.17g', slice), string.format('%.17g', left)}
"""
# KEYS = a shard's epoch key, its set of runs folded, the meta hash (shard 0: '' elsewhere is the epoch key
# again); ARGV = 'new' or 'join', epoch, shard count, total budget ('' for none). 'new' starts the shard where it
# holds no epoch; 'join' answers the shard's epoch (and, in shard 0, the meta hash's shard count and total).
_OPEN = """
if ARGV[1] == 'new' then
  if redis.call('EXISTS', KEYS[1]) == 1 then return {'exists'} end
  redis.call('SET', KEYS[1], ARGV[2])
  redis.call('DEL', KEYS[2])
  if KEYS[3] ~= KEYS[1] then
    redis.call('DEL', KEYS[3])
    redis.call('HSET', KEYS[3], 'shards', ARGV[3])
    if ARGV[4] ~= '' then redis.call('HSET', KEYS[3], 'total', ARGV[4]) end
  end
  return {'ok'}
end
local epoch = redis.call('GET', KEYS[1])
if not epoch then return {'none'} end
if KEYS[3] == KEYS[1] then return {'ok', epoch} end
local meta = redis.call('HMGET', KEYS[3], 'shards', 'total')
return {'ok', epoch, meta[1] or '', meta[2] or ''}
"""
# KEYS = a shard's epoch key, its set of runs folded, then the hashes the runs add to (by number, from 1);
# ARGV = epoch, the runs as JSON: [[run, [[hash number, µ$ spent, budget or '', overbilled or ''], ...]], ...].
# A run already in the shard's set adds nothing; answers the runs it folded.
_FOLD = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return {'ledger'} end
local folded = {'ok'}
for _, run in ipairs(cjson.decode(ARGV[2])) do
  if redis.call('SADD', KEYS[2], run[1]) == 1 then
    table.insert(folded, run[1])
    for _, entry in ipairs(run[2]) do
      local key = KEYS[2 + entry[1]]
      redis.call('HINCRBYFLOAT', key, 'charged', entry[2])
      local known = redis.call('HGET', key, 'budget')
      if entry[3] ~= '' and (not known or tonumber(known) > tonumber(entry[3])) then
        redis.call('HSET', key, 'budget', entry[3])
      end
      if entry[4] ~= '' then redis.call('HSETNX', key, 'overbilled', entry[4]) end
    end
  end
end
return folded
"""
# KEYS = a shard's epoch key, a hash; ARGV = epoch. The hash, read where the epoch is this proxy's.
_READ = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return {'ledger'} end
return {'ok', redis.call('HGETALL', KEYS[2])}
"""


def is_cluster_url(url: str | None) -> bool:
    return bool(url) and url.split("://", 1)[0].lower() == CLUSTER_SCHEME


def cluster_client(url: str):
    """A redis-py cluster client for `redis+cluster://HOST:PORT[,HOST:PORT...][?...]` (any node serves to find
    the others; `rediss+cluster://` is not taken)."""
    from redis.asyncio.cluster import ClusterNode, RedisCluster

    parts = urlsplit(url)
    nodes = []
    for seed in parts.netloc.rsplit("@", 1)[-1].split(","):
        host, _, port = seed.rpartition(":")
        if not host or not port.isdigit():
            raise ValueError(f"{url}: each node is HOST:PORT (a cluster URL is redis+cluster://HOST:PORT[,HOST:PORT])")
        nodes.append(ClusterNode(host.strip("[]"), int(port)))
    password = parts.password
    return RedisCluster(startup_nodes=nodes, password=password, username=parts.username, decode_responses=True,
                        socket_timeout=5, socket_connect_timeout=5)


def shard_tags(prefix: str, shards: int = SHARDS) -> list[str]:
    """One hash tag per shard, shard i's slot in the i-th of `shards` equal ranges of the cluster's slots, so
    the shards fall evenly on nodes that split the slots evenly (as `redis-cli --cluster create` does)."""
    from redis.crc import key_slot

    if "{" in prefix or "}" in prefix:
        raise ValueError(f"a cluster ledger's prefix has no braces (they name a key's slot): {prefix!r}")
    tags = []
    for shard in range(shards):
        low, high = shard * SLOTS // shards, (shard + 1) * SLOTS // shards
        suffix = 0
        while not low <= key_slot(f"{prefix}:{shard}.{suffix}".encode()) < high:
            suffix += 1
        tags.append(f"{{{prefix}:{shard}.{suffix}}}")
    return tags


class Slice:
    """This process's slice of one shared counter: granted (as the counter's lease hash holds it), held by calls
    in flight, and settled but not yet reported."""

    __slots__ = ("name", "keys", "budget", "ttl", "granted", "in_use", "unreported", "used_at", "lock", "what")

    def __init__(self, name: str, keys: list[str], budget: float | None, ttl: int | None, what: Level | None):
        self.name, self.keys, self.budget, self.ttl, self.what = name, keys, budget, ttl, what
        self.granted = self.in_use = self.unreported = 0.0
        self.used_at = time.monotonic()
        self.lock = asyncio.Lock()

    @property
    def room(self) -> float:
        return self.granted - self.in_use - self.unreported


class ShardedLedger:
    """Scopes, the total and the key and team windows on a Redis Cluster, shared by every proxy given its URL and
    prefix; the same `open`, `reserve`, `close` and views as `RedisLedger`."""

    def __init__(self, url: str, total: float | None = None, prefix: str = "bamasc", trace=None,
                 create: bool = False, fold: tuple[str, ...] = (), client=None):
        self.client = client if client is not None else cluster_client(url)
        self.total = total
        self.trace = trace
        self.prefix = prefix
        self.create = create
        self.fold = tuple(dict.fromkeys([*([trace.path] if trace is not None and trace.path else []), *fold]))
        self.epoch: str | None = None
        self.folded = 0
        self.tags = shard_tags(prefix)
        self._reserve = self.client.register_script(_RESERVE)
        self._close = self.client.register_script(_CLOSE)
        self._lease_script = self.client.register_script(_LEASE)
        self._open = self.client.register_script(_OPEN)
        self._fold = self.client.register_script(_FOLD)
        self._read_script = self.client.register_script(_READ)
        self._ids = 0
        self._run = os.urandom(4).hex()
        self.slices: dict[str, Slice] = {}
        self._reporter: asyncio.Task | None = None
        self._lost_why: str | None = None

    # ------------------------------------------------------------ where things live

    def shard_of(self, name: str) -> int:
        return zlib.crc32(name.encode("utf-8", "surrogateescape")) % len(self.tags)

    def _epoch_key(self, shard: int) -> str:
        return f"{self.tags[shard]}:epoch"

    def _scope_key(self, scope: str) -> str:
        return f"{self.tags[self.shard_of(scope)]}:scope:{scope}"

    def _level_key(self, level: str) -> str:
        return f"{self.tags[self.shard_of(level)]}:level:{level}"

    def pace_key(self, key: str) -> str:
        """Where a provider key's shared pace lives (metering/redis_pace.py): in the key's own shard."""
        return f"{self.tags[self.shard_of(key)]}:pace:{key}"

    def _total_key(self) -> str:
        return f"{self.tags[0]}:total"

    def key_names(self) -> tuple[list[str], str]:
        """The key store's hashes (keys, key-digests, teams) and the epoch key beside them: shard 0's."""
        return [f"{self.tags[0]}:keys", f"{self.tags[0]}:key-digests", f"{self.tags[0]}:teams"], self._epoch_key(0)

    def _shard_of_key(self, key: str) -> int:
        return self.tags.index(key[:key.index("}") + 1])

    # ------------------------------------------------------------ start, join, fold

    async def open(self) -> None:
        """Start the ledger (`create`) or join the one the cluster holds; either way, fold the traces in first."""
        if self.create:
            self.epoch = os.urandom(8).hex()
            total = "" if self.total is None else repr(float(self.total))
            first = await self._ask(lambda: self._open(keys=[self._epoch_key(0), f"{self.tags[0]}:folded",
                                                             f"{self.tags[0]}:meta"],
                                                       args=["new", self.epoch, len(self.tags), total]))
            if first[0] == "exists":
                raise LedgerMismatch(f"a ledger exists already under the prefix '{self.prefix}': drop --new-ledger "
                                     "to join it (--new-ledger starts one where there is none, as after a loss)")
            for shard in range(1, len(self.tags)):
                answer = await self._ask(lambda shard=shard: self._open(
                    keys=[self._epoch_key(shard), f"{self.tags[shard]}:folded", self._epoch_key(shard)],
                    args=["new", self.epoch, len(self.tags), ""]))
                if answer[0] == "exists":
                    raise LedgerMismatch(f"part of a lost ledger remains under the prefix '{self.prefix}' (shard "
                                         f"{shard}): flush every primary of the cluster, then start the new ledger "
                                         "with every proxy's trace (docs/proxy.md)")
            if self.total is not None:
                await self._ask(lambda: self.client.hset(self._total_key(), "budget", total))
        else:
            await self._join()
        self.folded = await self._fold_traces()
        self._reporter = asyncio.get_running_loop().create_task(self._report_loop())

    async def _join(self) -> None:
        first = await self._ask(lambda: self._open(keys=[self._epoch_key(0), f"{self.tags[0]}:folded",
                                                         f"{self.tags[0]}:meta"], args=["join", "", "", ""]))
        if first[0] == "none":
            raise LedgerMismatch(
                f"no ledger under the prefix '{self.prefix}': none was started, or the cluster lost it, and a proxy "
                "starts none by itself. Give one proxy --new-ledger (after a loss, with --fold-trace FILE for every "
                "other proxy's trace): it folds in what the traces hold; then start the others as before")
        epoch, shards, total = first[1], first[2], first[3]
        if shards != str(len(self.tags)):
            raise LedgerMismatch(f"the ledger has {shards or 'no'} shards, this proxy {len(self.tags)}: run the "
                                 "same bamasc on every proxy of a ledger")
        given = None if self.total is None else float(self.total)
        ledgers = float(total) if total else None
        if given is not None and given != ledgers:
            words = "has no total budget" if ledgers is None else f"has a total budget of {ledgers:.15g} µ$"
            raise LedgerMismatch(f"the ledger {words}, not the {given:.15g} µ$ of --total-budget: drop "
                                 "--total-budget to use the ledger's (the proxy that starts a ledger, with "
                                 "--new-ledger, sets its total)")
        self.total, self.epoch = ledgers, epoch
        for shard in range(1, len(self.tags)):
            answer = await self._ask(lambda shard=shard: self._open(
                keys=[self._epoch_key(shard), f"{self.tags[shard]}:folded", self._epoch_key(shard)],
                args=["join", "", "", ""]))
            if answer[0] != "ok" or answer[1] != epoch:
                raise LedgerLost("-", f"shard {shard} of the shared ledger was lost (a node lost its data); nothing "
                                      "was served: flush the cluster and start a new ledger (docs/proxy.md)")

    async def _fold_traces(self) -> int:
        """Fold what the traces hold under other epochs into each shard, once per run; how many runs were new."""
        runs = lost_runs(list(self.fold), self.epoch)
        by_shard: dict[int, dict[str, dict[str, list]]] = {}  # shard -> run -> hash key -> [spent, budget, why]
        for run in runs:
            entries = {}
            for scope, (budget, overbilled) in run.limits.items():
                entries[self._scope_key(scope)] = [run.spent.get(scope, 0.0), budget, overbilled]
            for level, spent in run.levels.items():
                entries[self._level_key(level)] = [spent, None, None]
            if self.total is not None:
                entries[self._total_key()] = [sum(run.spent.values()), None, None]
            for key, entry in entries.items():
                by_shard.setdefault(self._shard_of_key(key), {}).setdefault(run.member, {})[key] = entry
        folded: set[str] = set()
        for shard, members in sorted(by_shard.items()):
            keys = list(dict.fromkeys(key for entries in members.values() for key in entries))
            number = {key: index for index, key in enumerate(keys, start=1)}
            payload = [[member, [[number[key], repr(spent), "" if budget is None else repr(budget), why or ""]
                                 for key, (spent, budget, why) in entries.items()]] for member, entries in members.items()]
            answer = await self._ask(lambda shard=shard, keys=keys, payload=payload: self._fold(
                keys=[self._epoch_key(shard), f"{self.tags[shard]}:folded", *keys],
                args=[self.epoch, json.dumps(payload)]))
            if answer[0] == "ledger":
                raise LedgerLost("-", "the shared ledger was lost while this proxy joined it; nothing was served")
            folded.update(answer[1:])
        return len(folded)

    # ------------------------------------------------------------ asking

    async def _ask(self, command):
        """`command()`'s answer from the cluster; a LedgerLost when it cannot be reached."""
        from redis.exceptions import RedisError

        try:
            return await command()
        except (RedisError, OSError) as problem:
            raise LedgerLost("-", f"the shared ledger cannot be reached ({type(problem).__name__}); nothing is "
                                  "forwarded until it can") from None

    def _lost(self, name: str) -> LedgerLost:
        self._lost_why = self._lost_why or "lost"
        return LedgerLost(name, "the shared ledger was lost (a shard of it: a node lost its data, or the cluster "
                                "was flushed); nothing is forwarded until an operator starts a new one "
                                "(docs/proxy.md)")

    # ------------------------------------------------------------ slices

    def _slices_for(self, levels: tuple[Level, ...]) -> list[Slice]:
        wanted = []
        if self.total is not None:
            wanted.append(("total", self._total_key(), None, None, None))
        for level in levels:
            wanted.append((level.name, self._level_key(level.name), level.budget, LEVEL_TTL_S, level))
        found = []
        for name, key, budget, ttl, level in wanted:
            piece = self.slices.get(name)
            if piece is None:
                piece = self.slices[name] = Slice(name, [key, f"{key}:leases", self._epoch_key(self._shard_of_key(key))],
                                                  budget, ttl, level)
            elif budget is not None and budget < (piece.budget or budget + 1):
                piece.budget = budget
            found.append(piece)
        return found

    async def _lease(self, piece: Slice, least: float = 0.0, want: float = 0.0, give_back: float = 0.0) -> list:
        """One report on `piece` (its settled spend, and `give_back` of its room), growing it by `least` to
        `want` where asked; the script's answer. Run under the slice's lock."""
        settled = piece.unreported
        answer = await self._ask(lambda: self._lease_script(
            keys=piece.keys, args=[self.epoch, self._run, repr(settled), repr(max(0.0, give_back)), repr(least),
                                   repr(want), "" if piece.budget is None else repr(piece.budget),
                                   "" if piece.ttl is None else piece.ttl, LEASE_SHARE]))
        if answer[0] == "ledger":
            raise self._lost("-")
        piece.unreported -= settled
        piece.granted = float(answer[2])
        return answer

    async def _take(self, piece: Slice, least: float, full: float, cost: Cost) -> float:
        """Take room for one call from `piece`: `full` where it has it (growing it when it does not), at least
        `least`; a refusal where the counter has no room for `least`."""
        piece.used_at = time.monotonic()
        if piece.room < full:
            async with piece.lock:
                if piece.room < full:
                    answer = await self._lease(piece, least - piece.room, full - piece.room + LEASE_CALLS * full)
                    if answer[0] == "short" and piece.room < least:
                        left = float(answer[3]) + max(piece.room, 0.0)
                        if piece.what is None:
                            raise ShortOfTotal("-", f"the proxy's total budget has {max(left, 0.0):.2f} µ$ left "
                                                    "that this proxy may hold, not enough for this call")
                        raise short_of(piece.what, piece.what.budget - max(left, 0.0), cost)
        taken = min(full, piece.room)
        if taken < least:  # another call took the room while this one waited for the lock
            return await self._take(piece, least, full, cost)
        piece.in_use += taken
        return taken

    async def _report_loop(self) -> None:
        """Every REPORT_S: each slice's settled spend to its counter, and the room of a slice unused since back."""
        while True:
            await asyncio.sleep(REPORT_S)
            try:
                await self.report()
            except LedgerLost:
                pass  # reported at the next turn; the spend stays in the slice, counted as held

    async def report(self, give_back_all: bool = False) -> None:
        now = time.monotonic()
        for name, piece in list(self.slices.items()):
            idle = give_back_all or now - piece.used_at >= REPORT_S
            if not (piece.unreported or (idle and piece.room > 0)) or piece.lock.locked():
                continue
            async with piece.lock:
                await self._lease(piece, give_back=piece.room if idle else 0.0)
            if piece.granted <= 0 and piece.in_use <= 0 and piece.unreported <= 0:
                self.slices.pop(name, None)

    async def shutdown(self) -> None:
        """Report every slice and give back its room (a graceful stop)."""
        if self._reporter is not None:
            self._reporter.cancel()
        try:
            await self.report(give_back_all=True)
        except LedgerLost:
            pass

    # ------------------------------------------------------------ reservations

    async def reserve(self, name: str, budget: float, model: str, cost: Cost, levels: tuple[Level, ...] = ()) -> Hold:
        """Hold the largest call that fits in the scope and in this proxy's slices of the total and every level."""
        if self._lost_why:
            raise self._lost(name)
        levels = distinct(levels)
        names = tuple(level.name for level in levels)
        per_token = cost.output_rate * cost.choices
        least = cost.input_cost + per_token * min(cost.min_tokens, cost.requested)
        full = cost.input_cost + per_token * cost.requested
        taken: list[tuple[Slice, float]] = []
        try:
            for piece in self._slices_for(levels):
                taken.append((piece, await self._take(piece, least, full, cost)))
            cap = min((amount for _, amount in taken), default=None)
            key = self._scope_key(name)
            answer = await self._ask(lambda: self._reserve(
                keys=[key, self._epoch_key(self.shard_of(name))],
                args=[self.epoch, repr(budget), repr(cost.input_cost), repr(cost.output_rate), cost.choices,
                      cost.requested, cost.min_tokens, "" if cap is None else repr(cap)]))
        except BaseException:
            for piece, amount in taken:
                piece.in_use -= amount
            raise
        amount = float(answer[2]) if answer[0] == "ok" else 0.0
        for piece, held in taken:
            piece.in_use -= held - amount  # what the call did not need goes back to the slice
        if answer[0] == "ledger":
            raise self._lost(name)
        if answer[-1] == "1" and self.trace is not None:
            self.trace.budget({"task_id": name, "budget": budget, "epoch": self.epoch})
        if answer[0] == "overbilled":
            raise closed(name, answer[1])
        if answer[0] == "refused":
            raise refusal(name, float(answer[1]), float(answer[2]), None, cost)
        tokens, budget = int(answer[1]), float(answer[3])
        self._ids += 1
        hold_id = f"{self._run}.{self._ids}"
        if self.trace is not None:
            hold_id = self.trace.reserve({"task_id": name, "model": model, "reserved": round(amount, 6),
                                          "budget": budget, "max_tokens": tokens, "epoch": self.epoch,
                                          **({"levels": list(names)} if names else {})})
        return Hold(hold_id, name, model, tokens, amount, ("total",) * (self.total is not None) + names)

    async def close(self, hold: Hold, charged: float, record: dict, overbilled: str | None = None) -> None:
        for name in hold.levels:
            piece = self.slices.get(name)
            if piece is not None:  # the settled part is reported with the slice; the rest is its room again
                piece.in_use -= hold.amount
                piece.unreported += charged
        if self.trace is not None:
            self.trace.call({"id": hold.id, "task_id": hold.scope, "model": hold.model, "reserved": round(hold.amount, 6),
                             "charged": round(charged, 6), "max_tokens": hold.tokens, **record, "epoch": self.epoch})
        try:
            answer = await self._ask(lambda: self._close(
                keys=[self._scope_key(hold.scope), self._epoch_key(self.shard_of(hold.scope))],
                args=[self.epoch, repr(hold.amount), repr(charged), overbilled or ""]))
        except LedgerLost:
            return  # the hold stays in the scope, counted as spent: the safe side
        if answer == "ledger":
            self._lost_why = "lost"

    # ------------------------------------------------------------ views

    async def _read(self, key: str) -> dict:
        answer = await self._ask(lambda: self._read_script(keys=[self._epoch_key(self._shard_of_key(key)), key],
                                                           args=[self.epoch]))
        if answer[0] == "ledger":
            raise self._lost("-")
        flat = answer[1]
        return dict(zip(flat[::2], flat[1::2]))

    async def view(self, name: str) -> dict | None:
        data = await self._read(self._scope_key(name))
        if not data:
            return None
        budget, charged, held = (float(data.get(key, 0)) for key in ("budget", "charged", "held"))
        return {"scope": name, "budget": budget, "charged": round(charged, 6), "held": round(held, 6),
                "left": round(max(0.0, budget - charged - held), 6), "calls": int(data.get("calls", 0)),
                "status": "overbilled" if data.get("overbilled") else "open", "overbilled": data.get("overbilled")}

    async def level(self, name: str, budget: float) -> dict:
        """What a level has charged and holds (its slices held by proxies included) and has left of `budget`."""
        data = await self._read(self._level_key(name))
        return level_view(name, budget, float(data.get("charged", 0)), float(data.get("held", 0)))

    async def totals(self) -> dict:
        """The total's charges as reported, and what it holds: every proxy's slices, used or not."""
        data = await self._read(self._total_key())
        charged, held = float(data.get("charged", 0)), float(data.get("held", 0))
        return {"total": self.total, "charged": round(charged, 6), "held": round(held, 6),
                "left": None if self.total is None else round(max(0.0, self.total - charged - held), 6)}

