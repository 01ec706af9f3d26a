"""Holds that reach a replica before their call is admitted, on a Redis Cluster (metering/sharded_ledger.py).

Replication is asynchronous: a write the primary acknowledged but had not yet
sent to its replica is lost with it in a failover. So a write that holds money
(a scope's reservation, a slice's growth) is followed, on the same connection
to its primary, by `WAIT replicas wait_ms` (redis-py's cluster client would
send a WAIT of its own on another connection, where it waits for nothing); the
call is admitted only once that many replicas have the hold, and refused (503,
`LedgerLost`) when they do not answer in time. A reservation refused so is
released again; a slice grown so is used by no call until a later growth
reaches a replica. A settlement, a release and a report do not wait: losing
one in a failover leaves more held than was spent, never less.

`?replicas=0` in the cluster URL runs without replicas and without WAIT,
accepting that a failover may forget the last holds; otherwise a proxy refuses
to start on a cluster where no primary has the replicas, and a primary left
without one (after a failover) refuses its shards' calls until one joins it.
"""

from __future__ import annotations

from urllib.parse import parse_qsl, urlsplit

from bamasc.metering.refusals import LedgerLost

REPLICAS = 1  # replicas a hold must reach before its call is admitted (`?replicas=N`; 0: none, no WAIT)
WAIT_MS = 200  # how long a hold waits for them (`?wait_ms=M`) before its call is refused


def replication(url: str) -> tuple[int, int]:
    """The replicas each hold must reach, and the ms it waits for them, from a cluster URL's `?replicas=N&wait_ms=M`."""
    wanted = {"replicas": REPLICAS, "wait_ms": WAIT_MS}
    for name, value in parse_qsl(urlsplit(url).query, keep_blank_values=True):
        if name not in wanted:
            raise ValueError(f"unknown option {name}={value!r} (a cluster URL takes ?replicas=N&wait_ms=M)")
        if not value.isdigit() or (name == "wait_ms" and int(value) == 0):
            what = "ms, 1 or more" if name == "wait_ms" else "replicas"
            raise ValueError(f"{name}={value!r}: a whole number of {what}")
        wanted[name] = int(value)
    if wanted["wait_ms"] >= 4000:
        raise ValueError(f"wait_ms={wanted['wait_ms']}: under 4000 (the client's socket timeout is 5 s)")
    return wanted["replicas"], wanted["wait_ms"]


async def replicated_primaries(client, replicas: int, key: str) -> int:
    """How many of the cluster's primaries have `replicas` replicas online (`key`: any, to learn the cluster)."""
    from redis.exceptions import RedisError

    await client.exists(key)  # the client learns the cluster as for any command, past a dead seed node
    found = 0
    for node in client.get_primaries():
        try:
            info = await node.execute_command("INFO", "replication")
        except (RedisError, OSError):
            continue  # a node gone: it serves no shard
        online = sum(1 for name, value in info.items() if name.startswith("slave") and isinstance(value, dict)
                     and value.get("state") == "online")
        found += online >= replicas
    return found


async def script_and_wait(client, script, keys: list[str], args: list, replicas: int,
                          wait_ms: int) -> tuple[list, bool]:
    """`script`'s answer on `keys[0]`'s primary, and whether `replicas` replicas acknowledged it within `wait_ms`:
    EVALSHA and WAIT in one pipeline on one connection (WAIT waits for that connection's own writes)."""
    from redis.asyncio.cluster import PipelineCommand
    from redis.exceptions import NoScriptError

    node = client.get_node_from_key(keys[0])
    for _ in range(2):
        sent = [PipelineCommand(0, "EVALSHA", script.sha, len(keys), *keys, *args),
                PipelineCommand(1, "WAIT", replicas, wait_ms)]
        await node.execute_pipeline(sent)
        if not isinstance(sent[0].result, NoScriptError):
            break
        await node.execute_command("SCRIPT", "LOAD", script.script)
    for command in sent:
        if isinstance(command.result, BaseException):
            raise command.result
    return sent[0].result, int(sent[1].result) >= replicas


async def relearn(client) -> None:
    """Read the cluster's slots anew (after a moved slot or a dead node); quietly, where it cannot."""
    from redis.exceptions import RedisError

    try:
        await client.nodes_manager.initialize()
    except (RedisError, OSError):
        pass


def unreplicated(name: str, wait_ms: int) -> LedgerLost:
    return LedgerLost(name, f"no replica of the shared ledger took the call's hold within {wait_ms} ms, so a "
                            "failover could forget it; nothing is forwarded until one does")
