"""The flow walk of `reference` combinators: the calls the BAMAS reference's engine makes.

`reference chain`, `reference parallel`, `reference vote`, `reference refine`
and `reference plan ... dynamic` run their slot's instances in the order, and
stop by the rules, of the execution engine of the paper's code
(github.com/chunfenri/BAMAS, `execution_engine.py`), given the pool the
reference's ILP picked (the seats of the binding). Instances are numbered
strongest first, as everywhere (docs/language.md, "Instance order"); the
reference takes seats from its pool "High" first, so its k-th seat taken is
instance k, except where it holds one back.

- `reference chain S(args)`: the linear template. At most three calls; one
  when the task is short arithmetic (fewer than 50 characters, an operator and
  a digit). With more than one call, the strongest instance is kept for the
  last: instances 1, 2, ..., then 0 (the reference keeps a High executor back
  when its pool has both levels; when it has one level only the tiers are the
  same either way). The second call reads the first's output (`{{previous}}`),
  later calls every earlier output (`{{earlier}}`).
- `reference parallel S(args)`: the star template. Below two instances, one
  call (the reference falls back to its linear template). Otherwise one call
  per part, one after another, on instances 0, 1, ...: three parts at most, four
  when the task says "calculate" or "compute"; each call is told its part
  (`{{part}}`).
- `reference vote(drafts)`: the reference's aggregation. The answer most drafts
  give; on a tie, the answer held by more drafts of the strongest tier when it
  is strictly more; otherwise the first draft.
- `reference refine S(args) with C until approved`: the feedback template. At
  most two rounds. Round k: instance k of `S` writes (from round 1, reading the
  critic's verdict, `{{feedback}}`), then instance k of `C` audits it
  (`{{solution}}`). It stops when the critic approves, when `S` or `C` has no
  instance k left, or after round 1's audit, whose verdict is not read. The
  answer is the last draft.
- `reference plan P(args) using S max_steps n dynamic`: the planner-driven
  template. The planner writes its cards once; step i runs on instance i of its
  slot, and the run ends at the first step whose slot has no instance i left
  (the reference's pool is used up). No call of it is ever stopped for the
  budget by the after-the-fact check (`CallRequest.budget_checked`).

The unroller answers every decision with `EVERY`, so it visits every call any
task can make (both answers of a task test, every round), and the bound counts
them all.
"""

from __future__ import annotations

from collections import Counter

from bamasc.combinators import chain, dynamic, parallel, refine, vote
from bamasc.combinators.requests import EVERY, Card, Decision, FlowValue, steps_value, Note, Seats, Walk, one, seat_decision
from bamasc.combinators.base import read_cards, register, site, verdict
from bamasc.records import replace
from bamasc.syntax import ast, reference_forms

LINEAR_MOST = 3  # the reference's linear template runs at most three executors
STAR_MOST = 3  # parts of a star's task
STAR_MOST_CALCULATING = 4  # ... when the task asks to calculate or compute
FEEDBACK_ROUNDS = 2  # the reference's max_iterations
SHORT_TASK = 50  # characters: below this, a task with an operator and a digit is one executor's

SHORT_ARITHMETIC = "short arithmetic"
CALCULATE = "calculate"

# What each part of a star's task asks (`{{part}}`), in bamasc's words: for a task that asks to
# calculate or compute, the reference splits the work into these four; otherwise each part is
# "solve part of this problem".
CALCULATING_PARTS = (
    "find the numbers and facts the problem gives",
    "work out which operations the problem needs",
    "carry out the calculation",
    "check how the calculation was set up",
)


def task_passes(test: str, task: str) -> bool:
    """The answer to a "task" decision: does `task` pass the reference's test `test`?"""
    if test == SHORT_ARITHMETIC:
        return len(task) < SHORT_TASK and any(op in task for op in "+-*/=") and any(c.isdigit() for c in task)
    if test == CALCULATE:
        lowered = task.lower()
        return "calculate" in lowered or "compute" in lowered
    raise ValueError(f"unknown task test {test!r}")


def part_note(index: int, parts: int, calculating: bool) -> Note:
    """What call `index` of a reference star of `parts` calls is told to do."""
    what = CALCULATING_PARTS[index] if calculating else "solve this part of the problem"
    return Note(f"Part {index + 1} of {parts}: {what}.")


def winner(answers: list, strong: list[bool]) -> int:
    """The index of the draft the reference's vote keeps, given each draft's extracted answer and
    whether its model is of the strongest tier (drafts in the order they were made)."""
    votes = Counter(answers)
    if len(votes) > 1:
        most = max(votes.values())
        leaders = [answer for answer, n in votes.items() if n == most]
        if len(leaders) == 1:
            return answers.index(leaders[0])
        strength = {answer: sum(s for a, s in zip(answers, strong) if a == answer) for answer in votes}
        ranked = sorted(votes, key=lambda answer: (votes[answer], strength[answer]), reverse=True)
        best, second = ranked[0], ranked[1]
        if votes[best] == votes[second] and strength[best] > strength[second]:
            return answers.index(best)
    return 0


# ---------------------------------------------------------------- the walks


def reference_chain(walker, node: ast.Chain) -> Walk:
    slot = node.call.slot
    count = walker.count(slot)
    if not count:
        return FlowValue()
    base = walker.args(node.call)
    if count == 1:  # one call whatever the task
        made = walker.call(slot, 0, "chain0", base, None, "chain")
        yield made
        return one(made.id)
    short = yield Decision("task", marker=SHORT_ARITHMETIC)
    ends = []
    if short is not False:
        made = walker.call(slot, 0, "short", base, "the task is short arithmetic", "chain")
        yield made
        if short:
            return one(made.id)
        ends.append(made.id)
    calls = min(count, LINEAR_MOST)
    order = [*range(1, calls), 0]  # the strongest kept for the last call
    ran: list[str] = []
    for position, instance in enumerate(order):
        inputs = base
        if position == 1:
            inputs += (("previous", one(ran[0])),)
        elif position > 1:
            inputs += (("earlier", FlowValue(nodes=tuple(ran), many=True)),)
        made = walker.call(slot, instance, f"chain{position}", inputs, "the task is not short arithmetic", "chain")
        yield made
        ran.append(made.id)
    if short is EVERY:
        return FlowValue(nodes=(*ends, ran[-1]), one_of=True)
    return one(ran[-1])


def reference_parallel(walker, node: ast.Parallel) -> Walk:
    slot = node.call.slot
    count = walker.count(slot)
    if not count:
        return FlowValue()
    base = walker.args(node.call)
    if count < 2:  # the reference falls back to its linear template: one call on the task
        made = walker.call(slot, 0, "part0", base, None, "parallel")
        yield made
        return FlowValue(nodes=(made.id,), many=True)
    calculating = yield Decision("task", marker=CALCULATE)
    plain = min(count, STAR_MOST)
    parts = plain if calculating is False else min(count, STAR_MOST_CALCULATING)
    made = []
    for index in range(parts):
        if calculating is EVERY:  # the longer of the two notes this call may be given
            note = max((part_note(index, n, c) for n, c in ((plain, False), (parts, True)) if index < n),
                       key=lambda each: len(each.text.encode("utf-8")))
        else:
            note = part_note(index, parts, bool(calculating))
        condition = None if index < plain else "the task asks to calculate or compute"
        call = walker.call(slot, index, f"part{index}", base + (("part", note),), condition, "parallel")
        yield call
        made.append(call.id)
    return FlowValue(nodes=tuple(made), many=True)


def reference_vote(walker, node: ast.Vote) -> Walk:
    drafts = walker.values.get(node.drafts.name, FlowValue())
    nodes = drafts.nodes
    if drafts.many and nodes:
        chosen = yield Decision("reference vote", among=nodes)
        nodes = nodes if chosen is EVERY else (chosen,)
    return FlowValue(task=drafts.task, nodes=nodes, one_of=True)


def reference_refine(walker, node: ast.Refine) -> Walk:
    slot, critic = node.call.slot, node.critic.name
    writers, critics = walker.count(slot), walker.count(critic)
    if not writers:
        return FlowValue()
    base = walker.args(node.call)
    draft = walker.call(slot, 0, "draft", base, None, "refine")
    yield draft
    ends = []  # the drafts the loop may end on
    for round_ in range(FEEDBACK_ROUNDS):
        if round_ >= critics:
            break
        reached = None if round_ == 0 else f"critic {round_ - 1} rejected the draft"
        audit = walker.call(critic, round_, f"audit{round_}", base + (("solution", one(draft.id)),), reached, "refine")
        yield audit
        if round_ == FEEDBACK_ROUNDS - 1:
            break  # the reference reads no verdict after its last round
        approved = yield Decision("approved", of=audit.id)
        if approved is not False:
            ends.append(draft.id)
        if approved or round_ + 1 >= writers:
            # Approved, or no executor left to write again: the reference stops (always, past here,
            # when approval was possible, which ended on this draft already).
            if not approved and approved is not EVERY:
                ends.append(draft.id)
            return FlowValue(nodes=tuple(dict.fromkeys(ends)), one_of=True)
        draft = walker.call(slot, round_ + 1, f"revise{round_}", base + (("feedback", one(audit.id)),),
                            f"critic {round_} rejected the draft", "refine")
        yield draft
    ends.append(draft.id)
    return FlowValue(nodes=tuple(dict.fromkeys(ends)), one_of=True)


def _exempt(request):
    """The reference's planner-driven engine never stops a call for the budget."""
    return replace(request, budget_checked=False)


def reference_dynamic(walker, node: ast.Dynamic) -> Walk:
    planner = node.call.slot
    if not walker.count(planner) or node.max_steps is None:
        return FlowValue()
    seats = tuple(seat.name for seat in node.seats if walker.count(seat.name))
    roles = tuple(walker.topology.slot(name).role for name in seats)
    base = walker.args(node.call)
    plan = _exempt(walker.call(planner, 0, "plan", base + (("seats", Seats(seats, roles)),), None, "dynamic"))
    yield plan
    limit = int(node.max_steps.value)
    cards = yield Decision("steps", of=plan.id, limit=limit)
    largest = max((walker.count(name) for name in seats), default=0)
    outer = walker.alternative  # read only: `within` enters a seat's alternative
    ran: list[tuple[str, ...]] = []  # per step, the calls that may have made it (one per seat)
    for step in range(min(limit if cards is EVERY else cards, largest)):
        by = yield Decision("seat", of=plan.id, limit=step, among=seats, within=outer)
        reads = yield Decision("reads", of=plan.id, limit=step)
        # Step i takes the i-th seat of its slot; where none is left, the reference's run ends.
        open_seats = tuple(name for name in (seats if by is EVERY else (by,)) if step < walker.count(name))
        if not open_seats:
            break
        read = [ran[j] for j in (range(step) if reads is EVERY else reads)]
        inputs = base + (("plan", one(plan.id)), ("step", Card(plan.id, step)))
        if read:
            inputs += (("previous", steps_value(read)),)
        made = []
        for slot in open_seats:
            with walker.within(seat_decision(plan.id, step), slot):
                call = walker.call(slot, step, f"step{step}", inputs, f"the plan has more than {step} steps", "dynamic")
            yield _exempt(call)
            made.append(call.id)
        ran.append(tuple(made))
    steps = tuple(node_ for made in ran for node_ in made)
    formatter = node.formatter.name if node.formatter else None
    if formatter and walker.count(formatter) and steps:
        call = _exempt(walker.call(formatter, 0, "format", base + (("steps", steps_value(ran)),), None, "dynamic"))
        yield call
        return one(call.id)
    if cards is EVERY:
        return FlowValue(nodes=steps, one_of=True)
    return FlowValue(nodes=ran[-1] if ran else ())


# ---------------------------------------------------------------- the combinators


def _reference(decision: Decision, run):
    """"task" (does the task pass the test `marker`?) and "reference vote" (the reference's winner)."""
    return run.reference(decision)


class ReferenceChain(chain.Chain):
    node = reference_forms.ReferenceChain
    padded = False
    decisions = {"task": _reference}

    def walk(self, walker, node):
        return reference_chain(walker, node)

    def sites(self, node, optional):
        # The second call reads the first's output, later ones every earlier one.
        return [site(node.call, node.call.slot, node.call.span, sometimes=("previous", "earlier"))]


class ReferenceParallel(parallel.Parallel):
    node = reference_forms.ReferenceParallel
    padded = False
    decisions = {"task": _reference}

    def walk(self, walker, node):
        return reference_parallel(walker, node)

    def sites(self, node, optional):
        return [site(node.call, node.call.slot, node.call.span, sometimes=("part",))]  # one call, below two instances, has no part


class ReferenceVote(vote.Vote):
    node = reference_forms.ReferenceVote
    padded = False
    decisions = {"reference vote": _reference}

    def walk(self, walker, node):
        return reference_vote(walker, node)


class ReferenceRefine(refine.Refine):
    node = reference_forms.ReferenceRefine
    decisions = {"approved": verdict}

    def walk(self, walker, node):
        return reference_refine(walker, node)

    def sites(self, node, optional):
        # The second draft reads only the verdict.
        return [
            site(node.call, node.call.slot, node.call.span, sometimes=("feedback",)),
            site(node.call, node.critic.name, node.critic.span, always=("solution",)),
        ]


class ReferenceDynamic(dynamic.Dynamic):
    node = reference_forms.ReferenceDynamic
    decisions = {"steps": read_cards, "seat": read_cards, "reads": read_cards}

    def walk(self, walker, node):
        return reference_dynamic(walker, node)


for _combinator in (ReferenceChain(), ReferenceParallel(), ReferenceVote(), ReferenceRefine(), ReferenceDynamic()):
    register(_combinator)
