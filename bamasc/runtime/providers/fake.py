"""A deterministic offline model: short canned answers, the full output cap, or seeded random choices; injected failures.

Its tokenizer is one token per UTF-8 byte plus MESSAGE_OVERHEAD_TOKENS per
message, for prompts and replies alike, so `count_prompt_tokens` is exact for
it and equals the safe bound the guard uses for unknown tokenizers. The
messages of a tool loop and the tool specs a round is sent with count as the
loop's bound counts them (runtime/tokens.py: `message_tokens`, `specs_tokens`),
and a reply's tool calls count their arguments' bytes, so a tool loop's worst
case is reached exactly. Its tool calls are runtime/providers/fake_tools.py's.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import random
import re
from bamasc.combinators.route_names import chosen_branch
from bamasc.combinators.tools import output_schema_tokens
from bamasc.runtime.providers.base import (
    ERROR_KINDS,
    GREEDY,
    Completion,
    Decoding,
    Message,
    ProviderError,
    SendCounts,
    expected_branches,
    expected_seats,
)
from bamasc.runtime.providers.fake_tools import plain_expect, tool_reply
from bamasc.runtime.structured import example_answer
from bamasc.runtime.tokens import content_bytes, safe_prompt_bound, specs_tokens

MODES = ("echo", "verbose", "random")
FILLER = " and so on"
CARD_FILLER = "x"  # grows a step card: one byte a token, and no space for `strip` to take
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


def from_model(model, env, cassette: str | None, mode: str = "echo") -> FakeProvider:
    """The fake that answers a checked model (provider `fake`, or any model under `--fake MODE`): it
    takes the time the model's `latency` block declares, so a deadline can be tried offline."""
    latency = getattr(model, "latency", None)
    delays = {} if latency is None else {
        "first_token_s": latency.first_token_s, "per_output_token_s": latency.per_output_token_s
    }
    return FakeProvider(model.name, mode=mode, **delays)


class FakeProvider:
    """Answers without a network.

    mode "echo" gives a short reply shaped by the prompt; "verbose" gives the
    worst case (critics reject, planners emit every step that fits, routers name
    the costliest branch, dynamic planners give each step its seat in the costliest cards
    and have it read every step before it) and pads that reply to exactly `max_tokens` tokens,
    the worst case the budget guard must survive. "random" draws every choice
    from the seed (critics approve or reject, planners emit one step or more,
    routers name any branch or none) and pads to a random length up to
    `max_tokens`. In echo mode a router names the costliest branch too. `reply`
    fixes the text instead. With `fail_rate` > 0 a seeded draw
    fails some calls with one of `fail_kinds`; the draw depends on the seed,
    the prompt and how many times this prompt was sent before, so a run is
    reproducible however its calls interleave, and a retry draws afresh.

    Each reply takes `first_token_s` plus `per_output_token_s` for every token
    it holds (a failure, `first_token_s`): the delays a model's `latency { }`
    block declares, so a run shows what a deadline does. A reply that would take
    the attempt's `timeout` or longer waits that long and fails as a timeout.
    """

    def __init__(
        self,
        name: str,
        mode: str = "echo",
        seed: int = 0,
        fail_rate: float = 0.0,
        fail_kinds: tuple[str, ...] = ("server",),
        first_token_s: float = 0.0,
        per_output_token_s: float = 0.0,
        reply: str | None = None,
    ) -> None:
        if mode not in MODES:
            raise ValueError(f"fake mode must be one of {', '.join(MODES)}, not {mode!r}")
        if not 0.0 <= fail_rate <= 1.0:
            raise ValueError("fail_rate must be between 0 and 1")
        unknown = [kind for kind in fail_kinds if kind not in ERROR_KINDS]
        if unknown or not fail_kinds:
            raise ValueError(f"fail_kinds must be non-empty and among {', '.join(ERROR_KINDS)}")
        self.name = name
        self.mode = mode
        self.seed = seed
        self.fail_rate = fail_rate
        self.fail_kinds = tuple(fail_kinds)
        if not (first_token_s >= 0 and per_output_token_s >= 0):
            raise ValueError("fake delays must be zero or more seconds")
        self.first_token_s = first_token_s
        self.per_output_token_s = per_output_token_s
        self.reply = reply
        self.calls = 0
        self._sent = SendCounts()  # sends per prompt, for the failure draw

    def __repr__(self) -> str:
        return f"FakeProvider(name={self.name!r}, mode={self.mode!r}, seed={self.seed})"

    def count_prompt_tokens(self, messages: list[Message]) -> int:
        return safe_prompt_bound(messages)

    async def complete(
        self, messages: list[Message], max_tokens: int, *, timeout: float, decoding: Decoding = GREEDY,
        expect: str = "text", tools: tuple = (), output_schema: dict | None = None,
    ) -> Completion:
        # Offline answers are deterministic whatever the sampling settings.
        if max_tokens < 1:
            raise ProviderError(
                f"fake model '{self.name}' rejected the request: max_tokens must be at least 1",
                kind="client",
                status=400,
            )
        self.calls += 1
        prompt_key = _prompt_hash(self.name, messages, max_tokens)
        attempt = self._sent.take(prompt_key)
        rng = random.Random(f"{self.seed}:{prompt_key}:{attempt}")
        if self.fail_rate and rng.random() < self.fail_rate:
            await self._wait(self.first_token_s, timeout)
            raise _injected(self.name, rng.choice(self.fail_kinds))
        prompt_tokens = self.count_prompt_tokens(messages) + specs_tokens(tools)
        if output_schema is not None:  # sent as one more tool would be (runtime/structured.py)
            prompt_tokens += output_schema_tokens(output_schema)
        asking = tool_reply(self.mode, messages, tools, max_tokens, expect, rng) if tools and self.reply is None else None
        if asking is not None:  # a round that asks for tools: its text and its calls' arguments are its reply
            text, calls = asking
            completion_tokens = content_bytes(text) + sum(content_bytes(call.arguments) for call in calls)
            await self._wait(self.first_token_s + self.per_output_token_s * completion_tokens, timeout)
            return Completion(text, prompt_tokens, completion_tokens, "tool_calls", tool_calls=calls)
        # What the caller asked is in its own messages (a tool loop's answers to tool calls come after them).
        expect = plain_expect(expect)
        messages = [message for message in messages if message.role in ("system", "user")] or messages
        held = None if output_schema is None or self.reply is not None else _held_reply(
            output_schema, max_tokens if self.mode == "verbose" else rng.randint(0, max_tokens) if self.mode == "random"
            else 0, expect, self.mode, rng)
        if held is not None:  # a reply held to the role's output schema, at its full cap in verbose mode
            text = held
        elif self.reply is not None:
            text = self.reply
        elif self.mode == "verbose":
            text = worst_case_reply(messages, max_tokens, expect)
        elif self.mode == "random":
            text = random_reply(messages, max_tokens, expect, rng)
        else:
            text = echo_reply(messages, expect)
        encoded = text.encode("utf-8", "surrogatepass")
        truncated = len(encoded) > max_tokens
        if truncated:
            text = encoded[:max_tokens].decode("utf-8", "ignore")
        if self.mode == "verbose" and held is None:  # a held reply is padded already, with the spaces JSON allows
            text = _pad(text, max_tokens)
        elif self.mode == "random" and self.reply is None and held is None:
            used = len(text.encode("utf-8"))
            text = _pad(text, rng.randint(used, max_tokens)) if used < max_tokens else text
        completion_tokens = len(text.encode("utf-8", "surrogatepass"))
        finish_reason = "length" if truncated or self.mode == "verbose" else "stop"
        await self._wait(self.first_token_s + self.per_output_token_s * completion_tokens, timeout)
        return Completion(text, prompt_tokens, completion_tokens, finish_reason)

    async def _wait(self, seconds: float, timeout: float) -> None:
        """Take `seconds` to answer, or fail as a timeout after `timeout` if that is not longer."""
        if seconds <= 0:
            return
        if seconds >= timeout:
            await asyncio.sleep(timeout)
            raise ProviderError(
                f"fake model '{self.name}' timed out after {timeout:g} s waiting for the answer",
                kind="timeout",
                outcome_unknown=True,
            )
        await asyncio.sleep(seconds)

    async def aclose(self) -> None:
        return None


def _held_reply(schema: dict, size: int, expect: str, mode: str, rng: random.Random) -> str | None:
    """A reply held to a role's output schema. A router's names the branch its mode takes (the
    costliest, or in random mode any or none) where the schema allows one that does, as a plain
    reply would: the dry run's worst case is the costliest branch whatever values the schema lists."""
    branches = expected_branches(expect)
    if branches is None:
        return example_answer(schema, size)
    target = rng.choice(branches if "" in branches else [*branches, ""]) if mode == "random" else branches[0]
    return example_answer(schema, size, prefer=lambda text: chosen_branch(text, tuple(branches), "") == target,
                          word=target)


def _asks(prompt: str, expect: str) -> str:
    """What the caller will read from the reply: `expect` when the role says (its `reads`);
    for a role that reads plain text, what its prompt seems to ask for."""
    if expect != "text":
        if expected_seats(expect) is not None:
            return "cards"
        return "branch" if expected_branches(expect) is not None else expect
    if "CONCLUSION" in prompt:
        return "verdict"
    if "step card" in prompt or "JSON list" in prompt:
        return "plan"
    return "text"


def echo_reply(messages: list[Message], expect: str = "text") -> str:
    """A short answer in the format the last message asks for (the stdlib roles' formats).

    The role's `reads` decides first: a planner re-planning after a rejection
    has the critic's verdict in its prompt, yet still owes step cards."""
    prompt = messages[-1].content if messages else ""
    numbers = _NUMBER.findall(prompt)
    number = numbers[-1] if numbers else "42"
    asks = _asks(prompt, expect)
    if asks == "branch":
        return _naming(expected_branches(expect)[0])
    if asks == "cards":
        return json.dumps([{"step": "Solve it.", "by": expected_seats(expect)[0][1][0]}])  # the first seat declared
    if asks == "verdict":
        return "The reasoning checks out.\nCONCLUSION: CORRECT"
    if asks == "plan":
        return json.dumps([{"step": "Restate the problem."}, {"step": "Compute the result."}])
    if "```python" in prompt or "Python function" in prompt:
        return "```python\ndef solution(*args):\n    return None\n```"
    if "\\boxed" in prompt:
        return f"Working through it.\nThe answer is \\boxed{{{number}}}."
    if "####" in prompt:
        return f"Working through it.\n#### {number}"
    digest = hashlib.sha256(prompt.encode("utf-8", "surrogatepass")).hexdigest()[:8]
    return f"fake reply {digest}"


def worst_case_reply(messages: list[Message], max_tokens: int, expect: str = "text") -> str:
    """What makes a flow spend the most: critics reject, planners emit as many steps as fit."""
    prompt = messages[-1].content if messages else ""
    asks = _asks(prompt, expect)
    if asks == "branch":
        return _naming(expected_branches(expect)[0])
    if asks == "cards":  # every step on its seat in the costliest cards, reading every step before it
        steps = [(i, dearest, list(range(1, i + 1))) for i, (dearest, _) in enumerate(expected_seats(expect))]
        return _longest_first(_cards(steps, max_tokens), max_tokens)
    if asks == "verdict":
        return "CONCLUSION: INCORRECT - the fake critic rejects every draft, so every round runs."
    if asks == "plan":
        steps: list[str] = []
        while len(json.dumps(steps + [str(len(steps) + 1)])) <= max_tokens and len(steps) < 64:
            steps.append(str(len(steps) + 1))
        return _longest_first(json.dumps(steps), max_tokens)
    return echo_reply(messages, expect)


def random_reply(messages: list[Message], max_tokens: int, expect: str, rng: random.Random) -> str:
    """A reply whose choices are drawn from `rng`: any branch or none, approval or rejection, a plan
    of one step or more (up to what fits)."""
    prompt = messages[-1].content if messages else ""
    asks = _asks(prompt, expect)
    if asks == "branch":
        names = expected_branches(expect)
        return _naming(rng.choice(names if "" in names else [*names, ""]))
    if asks == "cards":
        steps = expected_seats(expect)
        drawn = [(i, rng.choice(seats), sorted(rng.sample(range(1, i + 1), rng.randint(0, i))))
                 for i, (_, seats) in enumerate(steps[: rng.randint(1, len(steps))])]
        return _cards(drawn, max_tokens)
    if asks == "verdict":
        return rng.choice(("CONCLUSION: CORRECT", "CONCLUSION: INCORRECT - the fake critic drew a rejection."))
    if asks == "plan":
        fits = json.loads(worst_case_reply(messages, max_tokens, expect))
        return json.dumps(fits[: rng.randint(1, max(1, len(fits)))])
    return echo_reply(messages, expect)


def _cards(steps, max_tokens: int) -> str:
    """Dynamic step cards (index, seat, reads), as many from the first as fit in `max_tokens`."""
    cards: list[dict] = []
    for i, seat, reads in steps:
        card = {"step": str(i + 1), "by": seat, "reads": reads}
        if cards and len(_compact(cards + [card])) > max_tokens:
            break
        cards.append(card)
    return _compact(cards)


def _longest_first(cards: str, max_tokens: int) -> str:
    """The cards with the first one's text grown until the plan fills `max_tokens` bytes: the
    steps' cards share the plan's length, and the bound counts it once, in a step's card."""
    value = json.loads(cards)
    missing = max_tokens - len(cards.encode("utf-8"))
    if not value or missing <= 0:
        return cards
    first = value[0]
    if isinstance(first, dict):
        first["step"] += CARD_FILLER * missing
        return _compact(value)
    value[0] = first + CARD_FILLER * missing
    return json.dumps(value)


def _compact(value) -> str:
    return json.dumps(value, separators=(",", ":"))


def _naming(branch: str) -> str:
    """A router's reply naming `branch`; "" (the fallback) names none."""
    return branch if branch else "-"


def _pad(text: str, max_tokens: int) -> str:
    """`text` padded with ASCII filler (one token per byte) to exactly `max_tokens` bytes."""
    missing = max_tokens - len(text.encode("utf-8"))
    if missing <= 0:
        return text
    repeats = -(-missing // len(FILLER))
    return text + (FILLER * repeats)[:missing]


def _prompt_hash(name: str, messages: list[Message], max_tokens: int) -> str:
    payload = json.dumps([name, [[m.role, m.content] for m in messages], max_tokens], ensure_ascii=False)
    return hashlib.sha256(payload.encode("utf-8", "surrogatepass")).hexdigest()


def _injected(name: str, kind: str) -> ProviderError:
    statuses = {"rate_limited": 429, "server": 500, "client": 400, "auth": 401, "not_found": 404}
    return ProviderError(
        f"fake model '{name}' failed on purpose ({kind})",
        kind=kind,
        outcome_unknown=kind in ("timeout", "connection", "malformed"),
        status=statuses.get(kind),
    )
