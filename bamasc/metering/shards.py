"""Where the sharded ledger (metering/sharded_ledger.py) lives on a Redis Cluster: the client, the shards' hash
tags, a proxy's slice of a shared counter, and the scripts, each on one slot (its shard's)."""

from __future__ import annotations

import asyncio
import time
from urllib.parse import urlsplit

from bamasc.metering.ledger import Level, level_view, stored_scope_view

SHARDS = 64  # fixed per ledger: it is written into the ledger and a proxy of another count refuses to join
SLOTS = 16384
CLUSTER_SCHEME = "redis+cluster"

# KEYS = scope hash, its shard's epoch key; ARGV = epoch, the scope's budget, the cost (input, rate, choices,
# requested, least), and the cap its slices allow ('' for none). As the old ledger's reservation, without the
# total and the levels: the cap stands for them.
RESERVE_SCRIPT = """
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
CLOSE_SCRIPT = """
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
LEASE_SCRIPT = """
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
OPEN_SCRIPT = """
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
FOLD_SCRIPT = """
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
READ_SCRIPT = """
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

    __slots__ = ("name", "keys", "budget", "ttl", "granted", "in_use", "unreported", "used_at", "lock", "what",
                 "doubt")

    def __init__(self, name: str, keys: list[str], budget: float | None, ttl: int | None, what: Level | None):
        self.name, self.keys, self.budget, self.ttl, self.what = name, keys, budget, ttl, what
        self.granted = self.in_use = self.unreported = 0.0
        self.used_at = time.monotonic()
        self.lock = asyncio.Lock()
        self.doubt = False  # the last growth reached no replica in time: no call uses the slice until one does

    @property
    def room(self) -> float:
        return self.granted - self.in_use - self.unreported


class ShardViews:
    """The sharded ledger's views: a scope, a level, the total, each read where its shard's epoch is the ledger's."""

    async def _read(self, key: str) -> dict:
        answer = await self._ask(lambda: self._read_script(keys=[self._epoch_key(self._shard_of_key(key)), key],
                                                           args=[self.epoch]))
        if answer[0] == "ledger":
            raise self._lost("-")
        flat = answer[1]
        return dict(zip(flat[::2], flat[1::2]))

    async def view(self, name: str) -> dict | None:
        return stored_scope_view(name, await self._read(self._scope_key(name)))

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

