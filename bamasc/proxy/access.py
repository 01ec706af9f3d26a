"""Who is calling the proxy, and what that lets a request spend: its key, its scope, the scope's budget, its levels.

A client sends its key as its API key (`Authorization: Bearer`, or
`x-api-key`). With keys (an admin token, or keys declared in the config),
the key's policy (metering/keys.py) decides: the scope is the key's own
(`<key> <id>`: a space no header can hold, so no client can name another
key's scope), its budget is the smaller of `X-Bamasc-Budget` and the key's
`scope_budget`, and every call is also reserved in the key's and its team's
windows. The shared token (`--token-env`) still opens scopes named as sent,
under the config's default budget, as a single team's proxy does.
"""

from __future__ import annotations

import hashlib
import hmac
import math
import re

from starlette.requests import Request

from bamasc.http.requests import Problem
from bamasc.metering.keys import KeyPolicy, TeamPolicy, levels

TASK_HEADER = "x-bamasc-task"
BUDGET_HEADER = "x-bamasc-budget"
_SCOPE = re.compile(r"^[\x21-\x7e]{1,200}$")  # printable ASCII, no spaces


class Caller:
    """A request's principal: a key (with its team), or the holder of the shared token (`key` None)."""

    __slots__ = ("key", "team", "secret")

    def __init__(self, key: KeyPolicy | None, team: TeamPolicy | None, secret: str | None):
        self.key, self.team, self.secret = key, team, secret

    def scope(self, given: str) -> str:
        """The ledger's name for the scope a request names: the key's own, for a key."""
        return given if self.key is None else f"{self.key.name} {given}"

    def levels(self, now: float):
        return () if self.key is None else levels(self.key, self.team, now)

    @property
    def answers(self) -> bool:
        """Whether a call no budget can fit is answered by the proxy (the key's `on_exhausted`), not refused."""
        return self.key is not None and self.key.on_exhausted == "answer"


def client_key(request: Request) -> str | None:
    """The key the client sent (`x-api-key`, else a bearer `authorization`), stripped; None without one."""
    given = request.headers.get("x-api-key")
    if given is None:
        scheme, _, given = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer":
            return None
    return given.strip()


def same(given: str | None, token: bytes | None) -> bool:
    return given is not None and token is not None and hmac.compare_digest(
        given.encode("utf-8", "surrogateescape"), token)


async def caller(request: Request, settings) -> Caller:
    """Who sent `request`: the shared token's holder or a key; a Problem (401) for anyone else."""
    given = client_key(request)
    if settings.token is None and settings.keys is None:
        return Caller(None, None, given)  # --no-auth
    if same(given, settings.token):
        return Caller(None, None, given)
    if settings.keys is not None and given:
        found = await settings.keys.key_of(given)
        if found is not None:
            return Caller(found[0], found[1], given)
    raise Problem(401, "a valid proxy token or key is needed (the client's API key)")


def scope_and_budget(request: Request, settings, who: Caller) -> tuple[str, str, float]:
    """(the scope as the client named it, as the ledger names it, its budget); a Problem for a bad header."""
    name = request.headers.get(TASK_HEADER)
    if name is None:
        # The key itself, not how its header spells it: one key is one scope.
        name = "key-" + hashlib.sha256((who.secret or "").encode("utf-8", "surrogateescape")).hexdigest()[:16]
    elif not _SCOPE.match(name):
        raise Problem(400, f"{TASK_HEADER} must be 1 to 200 printable characters without spaces", TASK_HEADER)
    try:
        budget = finite_budget(request.headers.get(BUDGET_HEADER))
    except ValueError:
        raise Problem(400, f"{BUDGET_HEADER} must be an amount of µ$ above 0 (at most 1e12), "
                           f"not {request.headers.get(BUDGET_HEADER)[:40]!r}", BUDGET_HEADER) from None
    ceiling = who.key.scope_budget if who.key is not None else None
    if ceiling is not None:
        budget = ceiling if budget is None else min(budget, ceiling)  # a client may lower its key's, never raise it
    if budget is None:
        budget = settings.default_budget
    if budget is None:
        raise Problem(400, f"no budget for scope '{name}': send {BUDGET_HEADER}, or give the config's system a budget",
                      BUDGET_HEADER)
    return name, who.scope(name), budget


def finite_budget(text: str | None) -> float | None:
    """A budget header's µ$, or None when absent; a ValueError when it is not a finite amount above 0."""
    if text is None:
        return None
    value = float(text.strip())
    if not math.isfinite(value) or value <= 0 or value > 1e12:
        raise ValueError(text)
    return value
