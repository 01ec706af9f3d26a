"""Client keys and teams in Redis, shared by every proxy on it (metering/keys.py says what a key is).

Three hashes under the ledger's prefix: `keys` (name -> the key as JSON, with
its secret's digest), `key-digests` (digest -> name) and `teams` (name -> the
team as JSON). Making or deleting a key is one script, so a name and a digest
never disagree; a request finds its key and team in one script, so a deleted
key is refused by its next request on any proxy.
"""

from __future__ import annotations

import json

from bamasc.metering.keys import KeyPolicy, KeyStore, PolicyError, TeamPolicy, digest, new_secret, read_key, read_team

# Every script takes the ledger's epoch key last among its KEYS and the epoch this proxy joined as ARGV[1], and
# answers 'ledger' where they differ: keys are part of the ledger, and a lost ledger is never served from.
_EPOCH = """
if redis.call('GET', KEYS[#KEYS]) ~= ARGV[1] then return 'ledger' end
"""
# KEYS = keys, key-digests, teams; ARGV = epoch, name, digest, key JSON, team name ('' for none).
_ADD_KEY = _EPOCH + """
if redis.call('HEXISTS', KEYS[1], ARGV[2]) == 1 then return 'name' end
if redis.call('HEXISTS', KEYS[2], ARGV[3]) == 1 then return 'secret' end
if ARGV[5] ~= '' and redis.call('HEXISTS', KEYS[3], ARGV[5]) == 0 then return 'team' end
redis.call('HSET', KEYS[1], ARGV[2], ARGV[4])
redis.call('HSET', KEYS[2], ARGV[3], ARGV[2])
return 'ok'
"""
# KEYS = teams; ARGV = epoch, name, team JSON.
_ADD_TEAM = _EPOCH + """
return redis.call('HSETNX', KEYS[1], ARGV[2], ARGV[3])
"""
# KEYS = keys, key-digests; ARGV = epoch, name.
_REMOVE_KEY = _EPOCH + """
local found = redis.call('HGET', KEYS[1], ARGV[2])
if not found then return 0 end
redis.call('HDEL', KEYS[2], cjson.decode(found)['digest'])
redis.call('HDEL', KEYS[1], ARGV[2])
return 1
"""
# KEYS = keys, key-digests, teams; ARGV = epoch, digest. The key's JSON and its team's ('' for none), or nothing.
_KEY_OF = """
if redis.call('GET', KEYS[#KEYS]) ~= ARGV[1] then return {'ledger'} end
local name = redis.call('HGET', KEYS[2], ARGV[2])
if not name then return {} end
local found = redis.call('HGET', KEYS[1], name)
if not found then return {} end
local team = cjson.decode(found)['key']['team']
local team_json = ''
if type(team) == 'string' then team_json = redis.call('HGET', KEYS[3], team) or '' end
return {found, team_json}
"""
# KEYS = keys, teams; ARGV = epoch, team name. Refused while a key names the team.
_REMOVE_TEAM = _EPOCH + """
for _, found in ipairs(redis.call('HVALS', KEYS[1])) do
  if cjson.decode(found)['key']['team'] == ARGV[2] then return 'keys' end
end
return redis.call('HDEL', KEYS[2], ARGV[2])
"""


class RedisKeyStore:
    """The keys and teams of every proxy on one Redis server and prefix (the ledger's)."""

    def __init__(self, ledger):
        self.ledger = ledger  # a RedisLedger or a ShardedLedger: its client, its key names, its way of asking
        client = ledger.client
        self._keys, self._epoch_key = ledger.key_names()  # beside the epoch key, in one slot on a cluster
        self._add_key = client.register_script(_ADD_KEY)
        self._add_team = client.register_script(_ADD_TEAM)
        self._remove_key = client.register_script(_REMOVE_KEY)
        self._key_of = client.register_script(_KEY_OF)
        self._remove_team = client.register_script(_REMOVE_TEAM)

    async def _run(self, script, keys: list[str], *args):
        """`script`'s answer, run against the ledger this proxy joined; a LedgerLost where that ledger is gone."""
        answer = await self.ledger._ask(lambda: script(keys=[*keys, self._epoch_key], args=[self.ledger.epoch, *args]))
        if answer == "ledger" or answer == ["ledger"]:
            raise self.ledger._lost("-")
        return answer

    async def add_key(self, policy: KeyPolicy, secret: str | None = None, journal: bool = True) -> str:
        secret = secret or new_secret()
        await self.restore_key(policy, digest(secret), journal)
        return secret

    async def restore_key(self, policy: KeyPolicy, key_digest: str, journal: bool = False) -> None:
        """Store `policy` under the digest of its secret (a journal's, after a loss: the secret is never kept)."""
        stored = json.dumps({"key": policy.as_json(), "digest": key_digest})
        answer = await self._run(self._add_key, self._keys, policy.name, key_digest, stored, policy.team or "")
        if answer == "name":
            if not journal and await self.key(policy.name) == policy:
                return  # a config's key, declared again by a proxy that joins: the same key
            raise PolicyError(f"a key named {policy.name!r} exists already", "name")
        if answer == "secret":
            raise PolicyError("another key has that secret", "secret")
        if answer == "team":
            raise PolicyError(f"no team named {policy.team!r}: make it first", "team")

    async def add_team(self, policy: TeamPolicy, journal: bool = True) -> None:
        created = await self._run(self._add_team, [self._keys[2]], policy.name, json.dumps(policy.as_json()))
        if not created and (journal or await self.team(policy.name) != policy):
            raise PolicyError(f"a team named {policy.name!r} exists already", "name")

    async def remove_key(self, name: str) -> bool:
        return bool(await self._run(self._remove_key, self._keys[:2], name))

    async def remove_team(self, name: str) -> bool:
        answer = await self._run(self._remove_team, [self._keys[0], self._keys[2]], name)
        if answer == "keys":
            raise PolicyError(f"keys of team {name!r} remain: delete them first", "name")
        return bool(answer)

    async def key_of(self, secret: str) -> tuple[KeyPolicy, TeamPolicy | None] | None:
        answer = await self._run(self._key_of, self._keys, digest(secret))
        if not answer:
            return None
        stored = json.loads(answer[0])["key"]
        return _key(stored), read_team(json.loads(answer[1])) if answer[1] else None

    async def key(self, name: str) -> KeyPolicy | None:
        found = (await self.ledger._read(self._keys[0])).get(name)
        return None if found is None else _key(json.loads(found)["key"])

    async def team(self, name: str) -> TeamPolicy | None:
        found = (await self.ledger._read(self._keys[2])).get(name)
        return None if found is None else read_team(json.loads(found))


def _key(stored: dict) -> KeyPolicy:
    return read_key(stored, set(stored.get("models") or []))


class JournaledKeys:
    """A fleet's key store whose changes made through this proxy are also journaled (`--keys` with `--redis`), so
    a ledger started anew after Redis lost its data (`--new-ledger`) makes them again (`restore`)."""

    def __init__(self, store: RedisKeyStore, path: str):
        self.store = store
        self.journal = KeyStore(path, strict=False)  # replays the journal: what this proxy's admin made, not deleted

    async def restore(self) -> int:
        """Make again every team and key of the journal that the store lacks; returns how many were."""
        made = 0
        for team in self.journal.teams.values():
            if await self.store.team(team.name) is None:
                await self.store.add_team(team, journal=False)
                made += 1
        for policy, key_digest in self.journal.keys.values():
            if await self.store.key(policy.name) is None:
                await self.store.restore_key(policy, key_digest)
                made += 1
        return made

    async def add_key(self, policy: KeyPolicy, secret: str | None = None, journal: bool = True) -> str:
        secret = await self.store.add_key(policy, secret, journal)
        if journal:
            await self.journal.add_key(policy, secret)
        return secret

    async def add_team(self, policy: TeamPolicy, journal: bool = True) -> None:
        await self.store.add_team(policy, journal)
        if journal:
            await self.journal.add_team(policy)

    async def remove_key(self, name: str) -> bool:
        removed = await self.store.remove_key(name)
        await self.journal.remove_key(name)
        return removed

    async def remove_team(self, name: str) -> bool:
        removed = await self.store.remove_team(name)
        await self.journal.remove_team(name)
        return removed

    async def key_of(self, secret: str):
        return await self.store.key_of(secret)

    async def key(self, name: str):
        return await self.store.key(name)

    async def team(self, name: str):
        return await self.store.team(name)
