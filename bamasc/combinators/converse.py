"""`converse A(args), B(args) [until B approves | until "MARKER"] max_rounds n`: a conversation.

Every instance of each speaker takes a turn per round, speakers in the order
written and each slot's instances in order, every turn reading the transcript
so far (`{{transcript}}`). It stops after the approver's approving turn, after
a turn whose output holds the marker, or after the round limit.
"""

from __future__ import annotations

from bamasc.combinators.requests import Decision, FlowValue, Walk
from bamasc.combinators.base import CallSite, Combinator, Name, call_names, register, slot_name, verdict
from bamasc.diagnostics import Diagnostic, Note, error, warning
from bamasc.limits import MAX_ROUNDS, MAX_TURNS
from bamasc.syntax import ast


def _mentions(decision: Decision, run):
    """"mentions": does the output `of` hold the text `marker`?"""
    return decision.marker in run.text(decision.of)


class Converse(Combinator):
    node = ast.Converse
    name = "converse"
    # Not trusted as padded: the binder compares its unrolls (they turn out padded, see `walk`).
    padded = False
    decisions = {"approved": verdict, "mentions": _mentions}

    def check(self, node: ast.Converse, flow) -> str:
        for speaker in node.calls:
            flow.call(speaker)
        if node.approver is not None:
            flow.slot_ref(node.approver.name, node.approver.span)
        _check_conversation(node, flow, flow.diagnostics)
        return "list"

    def walk(self, walker, node: ast.Converse) -> Walk:
        approver = node.approver.name if node.approver else None
        marker = node.marker.value if node.marker else None
        if approver:
            stop = f"{approver} has not approved yet"
        else:
            stop = f"no turn has said {marker!r} yet" if marker is not None else None
        rounds = int(node.max_rounds.value) if node.max_rounds else 0
        turns: tuple[str, ...] = ()
        checked = False  # some earlier turn, at the largest counts, may have ended the conversation
        for round_ in range(rounds):
            for call in node.calls:
                base = walker.args(call)
                for instance in range(walker.count(call.slot)):
                    transcript = (("transcript", FlowValue(nodes=turns, many=True)),) if turns else ()
                    made = walker.call(call.slot, instance, f"turn{round_}", base + transcript, stop if checked else None, "converse")
                    yield made
                    turns += (made.id,)
                    if approver == call.slot:
                        ended = yield Decision("approved", of=made.id)
                    elif marker is not None:
                        ended = yield Decision("mentions", of=made.id, marker=marker)
                    else:
                        continue
                    checked = True
                    if ended:
                        return FlowValue(nodes=turns, many=True)
                # Whether a turn is conditional must not depend on the counts (a
                # speaker at count 0 still comes before the next), so that at a
                # smaller count the turns are the largest count's minus the
                # missing instances, and the binder prices the conversation from
                # its largest unroll (it is a padded statement).
                checked = checked or approver == call.slot or marker is not None
        return FlowValue(nodes=turns, many=True)

    def calls(self, node: ast.Converse) -> list[ast.SlotCall]:
        return list(node.calls)

    def sites(self, node: ast.Converse, optional: frozenset[str]) -> list[CallSite]:
        found = []
        spoken = False  # some earlier speaker always has an instance, so a turn always came before
        for call in node.calls:
            args = frozenset(arg.name for arg in call.args)
            # Later rounds give every speaker a transcript; the first round may not.
            always = args | {"transcript"} if spoken else args
            found.append(CallSite(call.slot, call, call.span, always, args | {"transcript"}))
            spoken = spoken or call.slot not in optional
        return found

    def occurrences(self, node: ast.Converse) -> list[Name]:
        found = [name for speaker in node.calls for name in call_names(speaker)]
        return found + ([slot_name(node.approver)] if node.approver is not None else [])

    def lint(self, node: ast.Converse, roles: dict) -> list[Diagnostic]:
        """A marker every speaker's `stop` cuts off can never appear: generation ends before any stop
        string, so an output never holds one, nor any marker that contains one."""
        if not node.marker or not node.marker.value:
            return []
        cut = [(call, _cutting(roles.get(call.slot), node.marker.value)) for call in node.calls]
        if not cut or any(stop is None for _, stop in cut):
            return []
        call, stop = cut[0]
        role = roles[call.slot]
        return [
            error(
                "BAM312",
                f"no speaker can ever write {node.marker.raw}: every speaker's role stops before {stop!r}, which it contains",
                node.marker.span,
                Note(f"role '{role.name}' stops at {stop!r}", role.spans.get("stop", role.span)),
                hint="choose a marker without the roles' stop strings in it, or drop those stop strings",
            )
        ]

    def explain(self, node: ast.Converse, statement: int, nodes) -> list[str]:
        """The conversation's turns in order, and the turns after which it may stop."""
        turns = [n for n in nodes if n.combinator == "converse" and n.id.split("@")[1].split(".")[0] == str(statement)]
        if not turns:
            return []
        if node.approver is not None:
            stops = [t.id for t in turns[:-1] if t.slot == node.approver.name]
            why = f"if {node.approver.name} approves"
        elif node.marker is not None:
            stops = [t.id for t in turns[:-1]]
            why = f"if its output holds {node.marker.raw}"
        else:
            stops, why = [], ""
        rounds = int(node.max_rounds.value)
        lines = ["", f"Conversation (statement {statement + 1}): {len(turns)} turns in at most {rounds} rounds"]
        lines += [f"  {turn.id}" + ("  <- may stop here " + why if turn.id in stops else "") for turn in turns]
        lines.append(f"  (the round limit ends it after {turns[-1].id})")
        return lines


def _cutting(role, marker: str) -> str | None:
    """The stop string of `role` that the marker contains, if any (a role's `stop` overrides its model's)."""
    stops = role.decoding.stop if role is not None else None
    return next((stop for stop in stops or () if stop in marker), None)


def _check_conversation(node: ast.Converse, flow, diagnostics) -> None:
    """Speakers once each, a round limit within the limits, and a termination that can end it early."""
    speakers: dict[str, ast.SlotCall] = {}
    for speaker in node.calls:
        if speaker.slot in speakers:
            diagnostics.append(
                error(
                    "BAM307",
                    f"slot '{speaker.slot}' speaks twice in this conversation",
                    speaker.span,
                    Note("first named here", speakers[speaker.slot].span),
                    hint="every instance of a speaker takes a turn each round; name each slot once",
                )
            )
        speakers.setdefault(speaker.slot, speaker)
    rounds = node.max_rounds
    if rounds is None:
        diagnostics.append(
            error(
                "BAM311",
                "this conversation has no round limit, so its cost has no bound",
                node.span,
                hint="end it with `max_rounds N`, as in `converse a(task), b(task) until b approves max_rounds 3`",
            )
        )
        return
    if not rounds.is_integer or not 1 <= rounds.value <= MAX_ROUNDS:
        diagnostics.append(
            error("BAM207", f"max_rounds must be a whole number from 1 to {MAX_ROUNDS}, not {rounds.text}", rounds.span)
        )
        return
    widest = [flow.slot(name).hi for name in speakers if flow.slot(name) is not None]
    turns = int(rounds.value) * sum(widest)
    if turns > MAX_TURNS:
        diagnostics.append(
            error(
                "BAM207",
                f"this conversation may take {turns} turns ({rounds.text} rounds of up to {sum(widest)}), "
                f"beyond the limit of {MAX_TURNS}",
                rounds.span,
                hint="fewer rounds or fewer instances: every turn reads every turn before it",
            )
        )
    if node.marker is not None and not node.marker.value:
        diagnostics.append(
            error("BAM307", "an empty marker is in every output: the conversation would stop after its first turn", node.marker.span)
        )
    _check_termination(node, list(speakers), flow, int(rounds.value), diagnostics)


def _check_termination(node: ast.Converse, speakers: list[str], flow, rounds: int, diagnostics) -> None:
    approver = node.approver
    if approver is not None and flow.slot(approver.name) is not None and approver.name not in speakers:
        diagnostics.append(
            error(
                "BAM312",
                f"'{approver.name}' never takes a turn in this conversation, so it can never approve",
                approver.span,
                hint=f"add `{approver.name}(...)` to the speakers, or stop on one of them: {', '.join(speakers)}",
            )
        )
        return
    if approver is None and node.marker is None:
        return
    # Checks come after the approver's turns, or after every turn for a marker.
    checked = [name for name in speakers if flow.slot(name) is not None and (node.marker is not None or name == approver.name)]
    last = speakers[-1] if speakers else None
    only_at_the_end = rounds == 1 and checked == [last] and flow.slot(last) is not None and flow.slot(last).hi <= 1
    if only_at_the_end:
        what = f"'{approver.name}' approves" if approver is not None else "the marker appears"
        diagnostics.append(
            warning(
                "BAM312",
                f"the conversation ends after its last turn anyway, so stopping when {what} never ends it early",
                (approver or node.marker).span,
                hint="allow more rounds with `max_rounds`, or drop the `until` clause",
            )
        )


register(Converse())
