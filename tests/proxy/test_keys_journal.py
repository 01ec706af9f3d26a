"""Keys made through one proxy of a fleet are journaled (`--keys` with `--redis`), so a ledger started anew after
Redis lost its data (`--new-ledger`) makes them again: a client's key works as before, and a deleted one stays
deleted."""

from __future__ import annotations

import asyncio

import pytest

pytest.importorskip("redis", reason="the redis client library (the proxy extra) is not installed")

from bamasc.metering.keys import KeyPolicy, TeamPolicy, Window  # noqa: E402
from bamasc.metering.redis_keys import JournaledKeys, RedisKeyStore  # noqa: E402
from bamasc.metering.redis_ledger import RedisLedger  # noqa: E402
from bamasc.metering.refusals import LedgerLost  # noqa: E402
from tests.proxy.fleet import REDIS_MISSING, RedisServer  # noqa: E402

if REDIS_MISSING:
    pytest.skip(REDIS_MISSING, allow_module_level=True)


def test_a_new_ledger_makes_the_journaled_keys_again(tmp_path):
    server = RedisServer(tmp_path)
    journal = str(tmp_path / "keys.jsonl")

    async def main():
        first = RedisLedger(server.url, None, create=True)
        await first.open()
        keys = JournaledKeys(RedisKeyStore(first), journal)
        await keys.add_team(TeamPolicy("cx", (Window(5000.0, "1d"),)))
        kept = await keys.add_key(KeyPolicy("kept", "cx", 300.0, (Window(900.0, "1h"),), ("m0_0",), "answer"))
        gone = await keys.add_key(KeyPolicy("gone"))
        assert await keys.remove_key("gone")
        assert (await keys.key_of(kept))[0].name == "kept"
        server.flushall()
        with pytest.raises(LedgerLost):
            await keys.key_of(kept)  # a lost ledger is never served from, nor is a client told its key is bad
        await first.client.aclose()

        second = RedisLedger(server.url, None, create=True)  # the operator's --new-ledger
        await second.open()
        again = JournaledKeys(RedisKeyStore(second), journal)
        assert await again.restore() == 2  # the team and the key that was not deleted
        found = await again.key_of(kept)
        assert found[0] == KeyPolicy("kept", "cx", 300.0, (Window(900.0, "1h"),), ("m0_0",), "answer")
        assert found[1] == TeamPolicy("cx", (Window(5000.0, "1d"),))
        assert await again.key_of(gone) is None
        assert await again.restore() == 0  # restoring twice makes nothing twice
        await second.client.aclose()

    try:
        asyncio.run(main())
    finally:
        server.kill()
