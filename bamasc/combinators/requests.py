"""What the flow walker (ir/walk.py) and its drivers pass each other: calls, decisions, values.

Kept apart from the walker so that a combinator written in a module of its own
(combinators/dynamic.py) yields the same records without importing the walker.
"""

from __future__ import annotations

from collections.abc import Generator

from bamasc.records import record

# What the unroller answers a decision with: every answer is possible.
EVERY = None


@record
class FlowValue:
    """What a flow expression yields: outputs of calls (all of them, or one of them).

    `many` values are lists (a prompt reads them numbered `[1] ... [2] ...`);
    a `one_of` value is one output of `nodes`, which one known only at run time
    (a vote, a refined draft): at run time it holds just that one.
    """

    task: bool = False
    nodes: tuple[str, ...] = ()
    one_of: bool = False
    many: bool = False
    # Groups of `nodes` of which at most one ran (a dynamic plan's step, one call per seat it
    # may run on): a list shows one item per group, and bounds count the group's largest output.
    either: tuple[tuple[str, ...], ...] = ()
    # The values it may turn out to be, of which exactly one is shown (a route's branches): a
    # prompt reading it shows the one chosen, so bounds count the largest, lists and all. At
    # run time, and for values that are not alternatives, ().
    options: tuple[tuple[tuple[tuple[str, str], ...], "FlowValue"], ...] = ()  # (branch's alternative, its value)


TASK = FlowValue(task=True)


@record
class Card:
    """One step card of a plan call's output, as a prompt input."""

    plan: str
    index: int


@record
class Seats:
    """The seats a dynamic plan's planner may give steps to, as its prompt shows them (`{{seats}}`)."""

    names: tuple[str, ...]
    roles: tuple[str, ...]

    @property
    def text(self) -> str:
        return "\n".join(f"- {name} (role {role})" for name, role in zip(self.names, self.roles))


@record
class Note:
    """Text the walker itself writes into a prompt: which part of the task a reference star's call
    solves (`{{part}}`, combinators/reference.py). Its bytes count in the call's bound like the seat list's."""

    text: str


@record
class CallRequest:
    """One call the flow makes: its seat, what its prompt reads, and when it runs.

    `inputs` maps placeholder names to what fills them: a `FlowValue` (the
    task, earlier outputs) or a `Card`. A name absent from `inputs` is absent
    from the prompt (a `{{previous?}}` of the first call of a chain).
    """

    id: str
    slot: str
    instance: int
    role: str
    inputs: tuple[tuple[str, FlowValue | Card | Seats | Note], ...]
    condition: str | None  # why it might not run; None when it always runs
    combinator: str
    alternative: tuple[tuple[str, str], ...] = ()  # the (decision, branch) pairs it runs under (ir/alternatives.py)
    # False for the calls of a `reference plan ... dynamic`: the reference's planner-driven engine
    # never stops them for the budget. Only the after-the-fact check (the posthoc guard) reads it.
    budget_checked: bool = True

    @property
    def reads_task(self) -> bool:
        return any(isinstance(value, FlowValue) and value.task for _, value in self.inputs)

    @property
    def reads(self) -> tuple[str, ...]:
        """Ids of the calls whose outputs are part of this call's prompt, first read first."""
        ids: list[str] = []
        for _, value in self.inputs:
            ids.extend(value.nodes if isinstance(value, FlowValue) else (value.plan,) if isinstance(value, Card) else ())
        return tuple(dict.fromkeys(ids))


@record
class CallGroup:
    """Calls made together; the walker receives their outputs as a list, in order."""

    calls: tuple[CallRequest, ...]


@record
class Decision:
    """A branch on an output. `kind` is one of:

    - "approved": did the critic's verdict `of` approve? True / False.
    - "steps": how many step cards has the plan `of` (at most `limit`)?
    - "majority": which of the outputs `among` wins the vote? A call id.
    - "mentions": does the output `of` contain the text `marker`? True / False.
    - "branch": which of the branches `among` does the router's output `of` name?
      A branch name (`fallback` when it names none; None fails the task).
      The branches' calls exclude each other: each runs under `within` plus
      (`of`, its name).
    - "seat", "reads": which of the slots `among` does step `limit` of the dynamic plan `of`,
      and which earlier steps (a tuple of indices) it reads (combinators/dynamic.py).
    - "task": does the task text pass the test `marker` (combinators/reference.py)? True / False.
    - "reference vote": which of the outputs `among` wins the reference's vote? A call id.

    The answer `EVERY` stands for all answers at once (the unroller's).
    """

    kind: str
    of: str = ""
    limit: int = 0
    among: tuple[str, ...] = ()
    marker: str = ""
    fallback: str | None = None
    within: tuple[tuple[str, str], ...] = ()


Walk = Generator["CallRequest | CallGroup | Decision", object, FlowValue]


def call_id(slot: str, instance: int, statement: int, label: str) -> str:
    """A call's id says which seat makes it and where in the flow: `executor[1]@0.revise0`."""
    return f"{slot}[{instance}]@{statement}.{label}"


def seat_decision(plan: str, step: int) -> str:
    """The id of the choice of seat for step `step` (from 0) of the dynamic plan made by call `plan`."""
    return f"{plan}.seat{step}"


def one(node: str) -> FlowValue:
    return FlowValue(nodes=(node,))


def steps_value(ran: list[tuple[str, ...]]) -> FlowValue:
    """The results of these steps as a list: one item per step, whichever of its calls ran."""
    return FlowValue(
        nodes=tuple(node for made in ran for node in made), many=True, either=tuple(made for made in ran if len(made) > 1)
    )
