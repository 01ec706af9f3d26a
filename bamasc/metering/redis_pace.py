"""A provider key's pace shared by every proxy of one ledger: the key's two buckets in Redis, one script on its slot.

`limiter.RateLimiter` paces the calls of one process. Proxies that share a
ledger share their upstream keys too, so each would pace a key as if alone
and together send as many times its limit as there are proxies. Here the
buckets (requests and tokens, refilled at the limit less its headroom, each
holding a second's worth, as the local limiter's) live in one hash per key in
the ledger's Redis, and a call's turn is one script: it refills the buckets
to the server's clock (`TIME`, the same for every proxy), says how long the
call must wait for both to hold what it needs, and takes that now, owing what
the buckets lack. The next caller's wait counts the debt, so the calls of
every proxy are served in the order they asked, and the key's pace holds for
all of them together. A caller that cannot wait that long (`within`) takes
nothing. A 429 pauses the key for every proxy and empties its buckets.

The limits come from the local limiter (declared, or learnt from the
headers this process has seen); a key with none yet is paced by it alone, as
is every key while Redis cannot be reached (the ledger refuses the call then
anyway). What a reply says is left of a limit adapts this process's limits,
not the shared buckets.
"""

from __future__ import annotations

import asyncio

from bamasc.metering.limiter import BURST, HEADROOM

# KEYS = the key's pace hash; ARGV = window (s), requests and tokens per window ('' for none), the call's tokens,
# the longest it may wait ('' for no limit), the longest any call waits, the headroom, the burst. Answers the
# seconds to wait (taken), or '-1' (nothing taken).
_ACQUIRE = """
local clock = redis.call('TIME')
local now = tonumber(clock[1]) + tonumber(clock[2]) / 1000000
local window, headroom, burst = tonumber(ARGV[1]), tonumber(ARGV[7]), tonumber(ARGV[8])
local state = redis.call('HMGET', KEYS[1], 'paused', 'requests', 'requests_at', 'tokens', 'tokens_at')
local paused = tonumber(state[1] or '0')
local wait = math.max(0, paused - now)
local limits = {tonumber(ARGV[2]), tonumber(ARGV[3])}
local amounts = {1, tonumber(ARGV[4])}
local levels = {}
for i = 1, 2 do
  local limit = limits[i]
  if limit then
    local capacity = math.max(1, limit * burst)
    local rate = limit * (1 - headroom) / window
    local level = capacity
    if state[2 * i] then
      level = math.min(capacity, tonumber(state[2 * i]) + math.max(0, now - math.max(paused, tonumber(state[2 * i + 1]))) * rate)
    end
    local needed = math.min(amounts[i], capacity)
    if level < needed then wait = math.max(wait, (needed - level) / rate) end
    levels[i] = math.max(level - amounts[i], -limit)
  end
end
wait = math.min(wait, tonumber(ARGV[6]))
if ARGV[5] ~= '' and wait > tonumber(ARGV[5]) then return '-1' end
local stamp = string.format('%.6f', now)
if levels[1] then redis.call('HSET', KEYS[1], 'requests', string.format('%.17g', levels[1]), 'requests_at', stamp) end
if levels[2] then redis.call('HSET', KEYS[1], 'tokens', string.format('%.17g', levels[2]), 'tokens_at', stamp) end
redis.call('EXPIRE', KEYS[1], math.ceil(3 * window))
return string.format('%.6f', wait)
"""
# KEYS = the key's pace hash; ARGV = the pause in seconds (already capped at a window). Every proxy's calls of the
# key wait until the pause ends, and the buckets start it empty.
_PENALISE = """
local clock = redis.call('TIME')
local now = tonumber(clock[1]) + tonumber(clock[2]) / 1000000
local paused = math.max(tonumber(redis.call('HGET', KEYS[1], 'paused') or '0'), now + tonumber(ARGV[1]))
redis.call('HSET', KEYS[1], 'paused', string.format('%.6f', paused))
for _, name in ipairs({'requests', 'tokens'}) do
  local level = redis.call('HGET', KEYS[1], name)
  if level and tonumber(level) > 0 then redis.call('HSET', KEYS[1], name, '0', name .. '_at', string.format('%.6f', now)) end
end
return 'ok'
"""


class SharedLimiter:
    """`limiter.RateLimiter`'s interface (`acquire`, `penalise`, `observe`, `limits`), its buckets in the ledger's
    Redis; `local` is this process's limiter, which knows each key's limits."""

    def __init__(self, local, ledger) -> None:
        self.local = local
        self.ledger = ledger  # a RedisLedger or a ShardedLedger: its client, and where a key's pace lives
        self._acquire = ledger.client.register_script(_ACQUIRE)
        self._penalise = ledger.client.register_script(_PENALISE)
        self._pending: set[asyncio.Task] = set()

    async def acquire(self, key: str, tokens: int, within: float | None = None) -> float | None:
        """Wait for `key`'s turn across every proxy of the ledger; the seconds waited, or None (nothing taken)."""
        from redis.exceptions import RedisError

        requests, token_limit = self.local.limits(key)
        if requests is None and token_limit is None:
            return await self.local.acquire(key, tokens, within)
        window = self.local.window_s
        try:
            answer = await self._acquire(keys=[self.ledger.pace_key(key)], args=[
                repr(window), "" if requests is None else repr(requests),
                "" if token_limit is None else repr(token_limit), tokens, "" if within is None else repr(max(0.0, within)),
                repr(self.local.max_wait_s), repr(HEADROOM), repr(BURST)])
        except (RedisError, OSError):
            return await self.local.acquire(key, tokens, within)
        wait = float(answer)
        if wait < 0:
            return None
        if wait > 0:
            await asyncio.sleep(wait)
        return wait

    def penalise(self, key: str, retry_after_s: float | None = None) -> None:
        """A 429 on `key`: this process slows down at once, and every proxy's calls of the key wait out the pause."""
        self.local.penalise(key, retry_after_s)
        window = self.local.window_s
        pause = window / 60 if retry_after_s is None or not 0 <= retry_after_s < float("inf") else retry_after_s
        task = asyncio.get_running_loop().create_task(self._pause(key, min(pause, window)))
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)

    async def _pause(self, key: str, pause: float) -> None:
        from redis.exceptions import RedisError

        try:
            await self._penalise(keys=[self.ledger.pace_key(key)], args=[repr(pause)])
        except (RedisError, OSError):
            pass  # this process still waits the pause out (its own limiter)

    def observe(self, key: str, headers) -> None:
        self.local.observe(key, headers)

    def limits(self, key: str):
        return self.local.limits(key)
