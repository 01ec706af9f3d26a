"""The proxy's client keys at `bamasc serve`: a key's task is held in the key's and its team's windows.

With `--redis`, serve joins the ledger of a proxy fleet (never starts one)
and takes the keys the fleet's operator made (metering/redis_keys.py). A task
of a key runs under the smaller of its budget and the key's `scope_budget`,
and before it starts that whole budget (the most the task may spend: its
guard holds it to it) is reserved in the key's and its team's windows, in the
same ledger as the proxy's calls; when it ends the reservation is settled to
what it cost. So a key's windows hold whichever door its calls come through.
"""

from __future__ import annotations

from bamasc.metering.afford import Cost
from bamasc.metering.keys import KeyPolicy, TeamPolicy, levels


class KeyGate:
    def __init__(self, store, ledger, clock) -> None:
        self.store, self.ledger, self.clock = store, ledger, clock

    async def who(self, secret: str) -> tuple[KeyPolicy, TeamPolicy | None] | None:
        return await self.store.key_of(secret)

    async def hold(self, key: KeyPolicy, team: TeamPolicy | None, task_id: str, budget: float):
        """Reserve a task's whole budget in its key's windows (a Refused when one has no room); returns the hold."""
        whole = Cost(budget, 0.0, 1, 1, 0)  # no output tokens to size: the task's budget is held as one amount
        return await self.ledger.reserve(f"{key.name} {task_id}", budget, "task", whole,
                                         levels(key, team, self.clock()))

    async def close(self, hold, cost: float | None) -> float:
        """Settle to what the task cost (None: unknown, so the whole hold is kept); returns the µ$ charged."""
        charged = hold.amount if cost is None else min(cost, hold.amount)
        await self.ledger.close(hold, charged, {"outcome": "settled" if cost is not None else "kept"})
        return charged


def sender(found: tuple[KeyPolicy, TeamPolicy | None] | None) -> dict[str, str]:
    """What a task's trace line records of the client key that sent it (`key`, `team`): a restarted server's
    /ui still shows the key its tasks. Nothing for the token's holder."""
    if found is None:
        return {}
    key, team = found
    return {"key": key.name, **({"team": team.name} if team is not None else {})}
