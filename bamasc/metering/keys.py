"""Client keys and teams: who may spend, on which models, under which budgets (the proxy's operator sets them).

A key's secret is shown once, when it is made, and kept only as its SHA-256
digest (a secret is 32 random bytes, so a plain digest cannot be reversed).
Each key may have a ceiling per scope (`scope_budget`), budgets over time
windows (`budgets`, metering/windows.py), the models it may call, a team
whose windows it also spends from, and what a call that no budget can fit
gets (`on_exhausted`: refused with 402, or answered by the proxy).

`levels` turns a key (and its team) into the ledger levels a call of it is
reserved in, at a given time. The stores keep the records: `KeyStore` in this
process, written to a journal file when given one (each change a JSON line,
replayed at start); `metering/redis_keys.py` in Redis for a fleet.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import secrets

from bamasc.metering.ledger import Level
from bamasc.metering.windows import PERIODS, window_id
from bamasc.records import record

ON_EXHAUSTED = ("refuse", "answer")
_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.")


class PolicyError(ValueError):
    """A key or team the operator asked for that cannot be made; `field` names what is at fault."""

    def __init__(self, message: str, field: str | None = None):
        super().__init__(message)
        self.field = field


@record
class Window:
    """At most `amount` µ$ spent in each window of the period `per`."""

    amount: float
    per: str

    def as_json(self) -> dict:
        return {"amount": self.amount, "per": self.per}


@record
class TeamPolicy:
    name: str
    budgets: tuple[Window, ...] = ()

    def as_json(self) -> dict:
        return {"name": self.name, "budgets": [window.as_json() for window in self.budgets]}


@record
class KeyPolicy:
    name: str
    team: str | None = None
    scope_budget: float | None = None  # µ$: the most one scope of the key may have (None: the proxy's default)
    budgets: tuple[Window, ...] = ()
    models: tuple[str, ...] = ()  # the models it may call, by their `.bam` names; (): every model
    on_exhausted: str = "refuse"

    def as_json(self) -> dict:
        return {"name": self.name, "team": self.team, "scope_budget": self.scope_budget,
                "budgets": [window.as_json() for window in self.budgets], "models": list(self.models),
                "on_exhausted": self.on_exhausted}

    def may_use(self, model) -> bool:
        return not self.models or model.name in self.models


def digest(secret: str) -> str:
    return hashlib.sha256(secret.encode("utf-8", "surrogateescape")).hexdigest()


def new_secret() -> str:
    return "bk-" + secrets.token_urlsafe(32)


def levels(key: KeyPolicy, team: TeamPolicy | None, now: float) -> tuple[Level, ...]:
    """The ledger levels a call of `key` is reserved in at time `now`: each of its windows, and its team's."""
    return windows_of("key", key.name, key.budgets, now) + (
        () if team is None else windows_of("team", team.name, team.budgets, now))


def windows_of(kind: str, name: str, budgets: tuple[Window, ...], now: float) -> tuple[Level, ...]:
    """The levels of a key's or a team's windows open at `now`, one per budget."""
    named = ((window, window_id(window.per, now)) for window in budgets)  # each window named once, per call
    return tuple(Level(f"{kind}:{name}:{open_}", window.amount, f"{kind} '{name}' ({open_})") for window, open_ in named)


# ------------------------------------------------------------ reading what an operator sends


def _name(value: object, field: str = "name") -> str:
    if not isinstance(value, str) or not 1 <= len(value) <= 100 or not set(value) <= _NAME_CHARS:
        raise PolicyError(f"`{field}` must be 1 to 100 letters, digits, '-', '_' or '.'", field)
    return value


def _amount(value: object, field: str) -> float:
    if type(value) not in (int, float) or not math.isfinite(value) or not 0 < value <= 1e15:
        raise PolicyError(f"`{field}` must be an amount of µ$ above 0", field)
    return float(value)


def _windows(value: object) -> tuple[Window, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or len(value) > 16:
        raise PolicyError("`budgets` must be a list of at most 16 {\"amount\": µ$, \"per\": period}", "budgets")
    found = []
    for item in value:
        if not isinstance(item, dict) or set(item) - {"amount", "per"}:
            raise PolicyError("each budget is {\"amount\": µ$, \"per\": period}", "budgets")
        if item.get("per") not in PERIODS:
            raise PolicyError(f"a budget's `per` is one of {', '.join(PERIODS)}, not {str(item.get('per'))[:20]!r}",
                            "budgets")
        found.append(Window(_amount(item.get("amount"), "budgets"), item["per"]))
    pers = [window.per for window in found]
    if len(set(pers)) < len(pers):
        raise PolicyError("two budgets name the same period: give each period one amount", "budgets")
    return tuple(found)


def read_team(body: object) -> TeamPolicy:
    if not isinstance(body, dict) or set(body) - {"name", "budgets"}:
        raise PolicyError("a team is {\"name\": ..., \"budgets\": [...]}")
    return TeamPolicy(_name(body.get("name")), _windows(body.get("budgets")))


def read_key(body: object, models: set[str]) -> KeyPolicy:
    """A key from an operator's JSON; `models` are the names a key may list."""
    fields = {"name", "team", "scope_budget", "budgets", "models", "on_exhausted"}
    if not isinstance(body, dict) or set(body) - fields:
        unknown = sorted(set(body) - fields) if isinstance(body, dict) else []
        raise PolicyError(f"a key has the fields {', '.join(sorted(fields))}" +
                        (f"; not {', '.join(unknown)}" if unknown else ""), unknown[0] if unknown else None)
    team = body.get("team")
    listed = body.get("models") or []
    if not isinstance(listed, list) or not all(isinstance(name, str) for name in listed):
        raise PolicyError("`models` must be a list of model names", "models")
    unknown = [name for name in listed if name not in models]
    if unknown:
        raise PolicyError(f"`models` names {', '.join(map(repr, unknown))}, not in the proxy's config (its models: "
                        f"{', '.join(sorted(models))})", "models")
    on_exhausted = body.get("on_exhausted", "refuse")
    if on_exhausted not in ON_EXHAUSTED:
        raise PolicyError("`on_exhausted` is \"refuse\" or \"answer\"", "on_exhausted")
    scope_budget = body.get("scope_budget")
    return KeyPolicy(_name(body.get("name")), None if team is None else _name(team, "team"),
                     None if scope_budget is None else _amount(scope_budget, "scope_budget"),
                     _windows(body.get("budgets")), tuple(dict.fromkeys(listed)), on_exhausted)


# ------------------------------------------------------------ the store of one process


class KeyStore:
    """Keys and teams in this process; with a journal, every change is a line in it and a restart replays them."""

    def __init__(self, journal: str | None = None, strict: bool = True):
        self.strict = strict  # False: a journal of a fleet's store, where a team may be another proxy's
        self.keys: dict[str, tuple[KeyPolicy, str]] = {}  # name -> (policy, digest of its secret)
        self.teams: dict[str, TeamPolicy] = {}
        self._by_digest: dict[str, str] = {}
        self.journal = journal
        if journal and os.path.exists(journal):
            with open(journal, encoding="utf-8") as handle:
                for number, line in enumerate(handle, start=1):
                    if line.strip():
                        self._replay(json.loads(line), journal, number)

    def _replay(self, change: dict, path: str, number: int) -> None:
        kind = change.get("change")
        if kind == "key":
            policy = read_key(change["key"], set(change["key"].get("models") or []))
            self._put_key(policy, change["digest"])
        elif kind == "team":
            self.teams[change["team"]["name"]] = read_team(change["team"])
        elif kind == "key deleted":
            self._drop_key(change["name"])
        elif kind == "team deleted":
            self.teams.pop(change["name"], None)
        else:
            raise ValueError(f"{path}:{number}: not a change this proxy wrote")

    def _write(self, change: dict) -> None:
        if self.journal:
            with open(self.journal, "a", encoding="utf-8") as handle:
                handle.write(json.dumps(change) + "\n")
                handle.flush()
                os.fsync(handle.fileno())

    def _put_key(self, policy: KeyPolicy, key_digest: str) -> None:
        self.keys[policy.name] = (policy, key_digest)
        self._by_digest[key_digest] = policy.name

    async def add_key(self, policy: KeyPolicy, secret: str | None = None, journal: bool = True) -> str:
        """Store `policy` under a new secret (or `secret`, a config's); returns the secret. A name taken is refused.
        A config's keys are not journaled (`journal` False): the config declares them at every start."""
        if policy.name in self.keys:
            raise PolicyError(f"a key named {policy.name!r} exists already", "name")
        if self.strict and policy.team is not None and policy.team not in self.teams:
            raise PolicyError(f"no team named {policy.team!r}: make it first", "team")
        secret = secret or new_secret()
        if digest(secret) in self._by_digest:
            raise PolicyError("another key has that secret", "secret")
        self._put_key(policy, digest(secret))
        if journal:
            self._write({"change": "key", "key": policy.as_json(), "digest": digest(secret)})
        return secret

    async def add_team(self, policy: TeamPolicy, journal: bool = True) -> None:
        if policy.name in self.teams:
            raise PolicyError(f"a team named {policy.name!r} exists already", "name")
        self.teams[policy.name] = policy
        if journal:
            self._write({"change": "team", "team": policy.as_json()})

    def _drop_key(self, name: str) -> bool:
        found = self.keys.pop(name, None)
        if found is not None:
            self._by_digest.pop(found[1], None)
        return found is not None

    async def remove_key(self, name: str) -> bool:
        """Delete a key: its next request is refused. False where there is none."""
        if not self._drop_key(name):
            return False
        self._write({"change": "key deleted", "name": name})
        return True

    async def remove_team(self, name: str) -> bool:
        if self.strict and any(policy.team == name for policy, _ in self.keys.values()):
            raise PolicyError(f"keys of team {name!r} remain: delete them first", "name")
        if self.teams.pop(name, None) is None:
            return False
        self._write({"change": "team deleted", "name": name})
        return True

    async def key_of(self, secret: str) -> tuple[KeyPolicy, TeamPolicy | None] | None:
        """The key whose secret this is, with its team; None for no key."""
        name = self._by_digest.get(digest(secret))
        if name is None:
            return None
        policy = self.keys[name][0]
        return policy, self.teams.get(policy.team) if policy.team else None

    async def key(self, name: str) -> KeyPolicy | None:
        found = self.keys.get(name)
        return None if found is None else found[0]

    async def team(self, name: str) -> TeamPolicy | None:
        return self.teams.get(name)
