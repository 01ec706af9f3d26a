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

A write that holds money (a reservation, a slice's growth) reaches a replica
before its call is admitted, or the call is refused (metering/replicas.py).

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
import contextlib
import json
import os
import time
import zlib

from bamasc.metering.afford import Cost
from bamasc.metering.ledger import Hold, Level, closed, distinct, level_fields, refusal, short_of
from bamasc.metering.redis_ledger import LEVEL_TTL_S, LedgerMismatch, RedisLedger, ask, lost_runs
from bamasc.metering.refusals import LedgerLost, ShortOfTotal
from bamasc.metering.shards import (CLOSE_SCRIPT, FOLD_SCRIPT, LEASE_SCRIPT, OPEN_SCRIPT, READ_SCRIPT, RESERVE_SCRIPT,
                                    ShardViews, Slice, cluster_client, is_cluster_url, shard_tags)
from bamasc.metering.replicas import relearn, replicated_primaries, replication, script_and_wait, unreplicated

LEASE_CALLS = 32
LEASE_SHARE = 8
REPORT_S = 1.0

def shared_ledger(url: str, total: float | None = None, prefix: str = "bamasc", trace=None, create: bool = False,
                  fold: tuple[str, ...] = ()):
    """The ledger a `--redis` URL names: one server's (`redis://`, `rediss://`, `unix://`:
    metering/redis_ledger.py), or a Redis Cluster's (`redis+cluster://HOST:PORT[,HOST:PORT]`: this module's)."""
    kind = ShardedLedger if is_cluster_url(url) else RedisLedger
    return kind(url, total, prefix, trace, create=create, fold=fold)


class ShardedLedger(ShardViews):
    """Scopes, the total and the key and team windows on a Redis Cluster, shared by every proxy given its URL and
    prefix; the same `open`, `reserve`, `close` and views as `RedisLedger`."""

    def __init__(self, url: str, total: float | None = None, prefix: str = "bamasc", trace=None,
                 create: bool = False, fold: tuple[str, ...] = (), client=None):
        self.replicas, self.wait_ms = replication(url)
        self.client = client if client is not None else cluster_client(url)
        self.total = total
        self.trace = trace
        self.prefix = prefix
        self.create = create
        self.fold = tuple(dict.fromkeys([*([trace.path] if trace is not None and trace.path else []), *fold]))
        self.epoch: str | None = None
        self.folded = 0
        self.tags = shard_tags(prefix)
        self._reserve = self.client.register_script(RESERVE_SCRIPT)
        self._close = self.client.register_script(CLOSE_SCRIPT)
        self._lease_script = self.client.register_script(LEASE_SCRIPT)
        self._open = self.client.register_script(OPEN_SCRIPT)
        self._fold = self.client.register_script(FOLD_SCRIPT)
        self._read_script = self.client.register_script(READ_SCRIPT)
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
        if self.replicas and not await self._ask(lambda: replicated_primaries(self.client, self.replicas, self._epoch_key(0))):
            raise LedgerMismatch(f"no primary of the cluster has {self.replicas} replica(s), so every call would be "
                                 "refused (a failover could forget its hold): give each primary a replica, or add "
                                 "?replicas=0 to the --redis URL to run without them and without WAIT")
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
        return await ask(command)

    async def _held(self, script, keys: list[str], args: list) -> tuple[list, bool]:
        """`script`'s answer, and whether `self.replicas` replicas have its writes (metering/replicas.py)."""
        if not self.replicas:
            return await self._ask(lambda: script(keys=keys, args=args)), True
        try:
            return await self._ask(lambda: script_and_wait(self.client, script, keys, args, self.replicas,
                                                           self.wait_ms))
        except LedgerLost:
            await relearn(self.client)  # a moved slot or a dead node: learn the cluster anew for the next call
            raise

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

    async def _lease(self, piece: Slice, least: float = 0.0, want: float = 0.0, give_back: float = 0.0,
                     grow: bool = False) -> list:
        """One report on `piece` (its settled spend, and `give_back` of its room), growing it by `least` to
        `want` where asked (`grow`: the growth must reach the replicas); the script's answer. Run under the
        slice's lock."""
        settled = piece.unreported
        args = [self.epoch, self._run, repr(settled), repr(max(0.0, give_back)), repr(least), repr(want),
                "" if piece.budget is None else repr(piece.budget), "" if piece.ttl is None else piece.ttl, LEASE_SHARE]
        if grow:
            answer, replicated = await self._held(self._lease_script, piece.keys, args)
        else:
            answer, replicated = await self._ask(lambda: self._lease_script(keys=piece.keys, args=args)), True
        if answer[0] == "ledger":
            raise self._lost("-")
        piece.unreported -= settled
        piece.granted = float(answer[2])  # as the primary holds it, replicated or not
        if grow:
            piece.doubt = not replicated
            if not replicated:
                raise unreplicated("-", self.wait_ms)
        return answer

    async def _take(self, piece: Slice, least: float, full: float, cost: Cost) -> float:
        """Take room for one call from `piece`: `full` where it has it (growing it when it does not), at least
        `least`; a refusal where the counter has no room for `least`."""
        piece.used_at = time.monotonic()
        if piece.room < full or piece.doubt:
            async with piece.lock:
                if piece.room < full or piece.doubt:
                    grow = piece.room < full  # else a report alone, to learn that the slice reached a replica
                    answer = await self._lease(piece, least - piece.room if grow else 0.0,
                                               full - piece.room + LEASE_CALLS * full if grow else 0.0, grow=True)
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
            answer, replicated = await self._held(
                self._reserve, [key, self._epoch_key(self.shard_of(name))],
                [self.epoch, repr(budget), repr(cost.input_cost), repr(cost.output_rate), cost.choices,
                 cost.requested, cost.min_tokens, "" if cap is None else repr(cap)])
        except BaseException:
            for piece, amount in taken:
                piece.in_use -= amount
            raise
        amount = float(answer[2]) if answer[0] == "ok" else 0.0
        for piece, held in taken:  # what the call did not need (all, where no replica has it) goes back to the slice
            piece.in_use -= held - (amount if replicated else 0.0)
        if answer[0] == "ok" and not replicated:  # the primary holds it, its replica may not: give it back
            with contextlib.suppress(LedgerLost):  # else it stays held: counted as spent, the safe side
                await self._ask(lambda: self._close(keys=[key, self._epoch_key(self.shard_of(name))],
                                                    args=[self.epoch, repr(amount), "0", ""]))
            raise unreplicated(name, self.wait_ms)
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
                                          **level_fields(levels)})
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
