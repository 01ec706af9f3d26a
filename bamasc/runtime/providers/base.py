"""The provider protocol: chat messages in, one completion with its usage out, and the error a failed attempt ends with."""

from __future__ import annotations

from collections import OrderedDict
from typing import Protocol, runtime_checkable

from bamasc.records import record

ROLES = ("system", "user", "assistant", "tool")

ERROR_KINDS = ("rate_limited", "server", "timeout", "connection", "malformed", "client", "auth", "not_found")
RETRYABLE_KINDS = frozenset({"rate_limited", "server", "timeout", "connection", "malformed"})
REMEMBERED_PROMPTS = 1 << 14  # prompts whose sends are counted: far more than the calls in flight at once


@record
class ToolCall:
    """A tool call a model asked for: the id its provider gave it, the tool's name as the model saw it
    (runtime/tools.ToolSpec.name) and the arguments as the model wrote them (JSON text, not checked)."""

    id: str
    name: str
    arguments: str


@record
class Message:
    role: str  # system | user | assistant | tool
    content: str
    tool_calls: tuple[ToolCall, ...] = ()  # an assistant message that asked for tools (content may be empty)
    tool_call_id: str | None = None  # a tool message: the id of the call it answers

    def __post_init__(self) -> None:
        if self.role not in ROLES:
            raise ValueError(f"message role must be one of {', '.join(ROLES)}, not {self.role!r}")


@record
class Completion:
    text: str
    prompt_tokens: int  # as the provider reports them: what it bills
    completion_tokens: int
    finish_reason: str | None = None
    cached_tokens: int = 0  # of prompt_tokens, read from the provider's cache (billed at its cache-read rate)
    cache_write_tokens: int = 0  # of prompt_tokens, written to its cache (billed at its cache-write rate)
    rate_headers: tuple[tuple[str, str], ...] = ()  # the reply's rate-limit headers, for the rate limiter
    tool_calls: tuple[ToolCall, ...] = ()  # the tools the model asked for (only when it was sent some)
    response_id: str | None = None  # the id the provider gave its reply (None: it gave none, or none is known)
    response_model: str | None = None  # the model the provider says answered (may name a dated version)


def reply_label(value: object) -> str | None:
    """A reply's id or model name as the trace keeps it: a non-empty string cut to 200 characters, else None."""
    return value[:200] if isinstance(value, str) and value else None


@record
class Decoding:
    """How a model samples its reply, sent with every call.

    The default asks for greedy decoding (temperature 0): the most
    reproducible output a provider offers. The APIs' own default, 1.0, makes
    two runs of one plan disagree. None leaves a setting to the provider.
    """

    temperature: float | None = 0.0
    top_p: float | None = None
    seed: int | None = None
    stop: tuple[str, ...] = ()


GREEDY = Decoding()


def decoding_for(role, model) -> Decoding:
    """What a call of `role` on `model` sends: the role's settings over the model's, temperature 0 by default."""
    settings = role.decoding.over(model.decoding)
    return Decoding(
        temperature=0.0 if settings.temperature is None else settings.temperature,
        top_p=settings.top_p,
        seed=settings.seed,
        stop=settings.stop or (),
    )


class ProviderError(Exception):
    """One failed attempt at a call, classified for the retry loop and the budget guard.

    `retryable` says whether the same call may succeed if tried again;
    `outcome_unknown` says whether the provider may have run (and billed) the
    call anyway, so the guard must keep the whole reservation for it.
    `rate_headers` are the answer's rate-limit headers, for the rate limiter.
    """

    def __init__(
        self,
        message: str,
        *,
        kind: str,
        retryable: bool | None = None,
        retry_after: float | None = None,
        outcome_unknown: bool = False,
        status: int | None = None,
        rate_headers: dict[str, str] | None = None,
    ) -> None:
        if kind not in ERROR_KINDS:
            raise ValueError(f"unknown provider error kind {kind!r}")
        super().__init__(message)
        self.kind = kind
        self.retryable = kind in RETRYABLE_KINDS if retryable is None else retryable
        self.retry_after = retry_after
        self.outcome_unknown = outcome_unknown
        self.status = status
        self.rate_headers = dict(rate_headers or {})

    @property
    def message(self) -> str:
        return str(self.args[0]) if self.args else ""

    def __repr__(self) -> str:
        return (
            f"ProviderError({self.message!r}, kind={self.kind!r}, retryable={self.retryable}, "
            f"retry_after={self.retry_after}, outcome_unknown={self.outcome_unknown}, status={self.status})"
        )

    def __reduce__(self):
        return (
            _rebuild_error,
            (self.message, self.kind, self.retryable, self.retry_after, self.outcome_unknown, self.status,
             self.rate_headers),
        )


def _rebuild_error(message, kind, retryable, retry_after, outcome_unknown, status, rate_headers=None) -> ProviderError:
    return ProviderError(
        message, kind=kind, retryable=retryable, retry_after=retry_after, outcome_unknown=outcome_unknown, status=status,
        rate_headers=rate_headers,
    )


@runtime_checkable
class Provider(Protocol):
    """One model endpoint. `complete` makes exactly one attempt; retries belong to the caller."""

    name: str  # the model's name in the .bam source

    async def complete(
        self, messages: list[Message], max_tokens: int, *, timeout: float, decoding: Decoding = GREEDY,
        expect: str = "text", tools: tuple = (), output_schema: dict | None = None,
    ) -> Completion:
        """One attempt. `expect` is what the caller reads from the reply, the role's
        `reads` (text, answer, verdict, plan, code), or for a route's router
        `branch_expect(...)`; a real model is not told it. `tools` (runtime/tools.ToolSpec) are
        the tools the model may ask for in this round; none, and it must not ask for any.
        `output_schema` (a role's `output`) is the JSON Schema its answer must hold to, sent by the
        provider's own mechanism; the completion's text is then that JSON (runtime/structured.py
        checks it). Callers pass `tools` and `output_schema` only when they have them, so a
        provider that takes neither keeps working for roles without them."""
        ...

    def count_prompt_tokens(self, messages: list[Message]) -> int | None: ...

    async def aclose(self) -> None: ...


BRANCH_EXPECT = "branch:"


def branch_expect(decision) -> str:
    """What a router's call expects (a plan's PlanDecision): `branch:` and its branch names, the
    costliest first (first declared on a tie), the fallback written empty (a reply naming none).
    Only the offline fake reads it: its worst case names the costliest branch."""
    ranked = sorted(decision.branches, key=lambda branch: -branch.cost)
    return BRANCH_EXPECT + ",".join("" if b.name == decision.fallback else b.name for b in ranked)


CARDS_EXPECT = "cards:"


def expectations(decisions) -> dict[str, str]:
    """What each router and dynamic planner call expects, by call id, from a plan's decisions:
    `branch_expect` for a router; for a planner, `cards:` and per step its seat in the costliest cards, `:` and
    its seats as declared, steps apart by `|`. Only the offline fake reads them (its worst case
    gives every step that seat)."""
    from bamasc.combinators.dynamic import seat_step

    found = {}
    steps: dict[str, dict[int, str]] = {}
    for decision in decisions:
        at = seat_step(decision.id)
        if at is None:
            found[decision.id] = branch_expect(decision)
        else:
            seats = ",".join(branch.name for branch in decision.branches)
            steps.setdefault(at[0], {})[at[1]] = f"{decision.worst_case_branch}:{seats}"
    for plan, seats in steps.items():
        found[plan] = CARDS_EXPECT + "|".join(seats[step] for step in sorted(seats))
    return found


def expected_seats(expect: str) -> list[tuple[str, list[str]]] | None:
    """Per step of a dynamic planner's expect, its seat in the costliest cards and its seats; None for any other expect."""
    if not expect.startswith(CARDS_EXPECT):
        return None
    steps = [step.partition(":") for step in expect[len(CARDS_EXPECT):].split("|")]
    return [(costliest, seats.split(",")) for costliest, _, seats in steps]


def expected_branches(expect: str) -> list[str] | None:
    """The branch names of a `branch_expect` string ("" for the fallback); None for any other expect."""
    return expect[len(BRANCH_EXPECT):].split(",") if expect.startswith(BRANCH_EXPECT) else None


class SendCounts:
    """How many times each prompt (by key) was sent, for a provider that draws a retry's seed or failure from it.
    The least recently sent prompts are forgotten past `kept`, so a server that runs a million tasks does not
    keep every prompt it ever sent; a forgotten prompt counts from 0 again, as a rerun does."""

    def __init__(self, kept: int = REMEMBERED_PROMPTS) -> None:
        self.kept = kept
        self._sent: OrderedDict[str, int] = OrderedDict()

    def __len__(self) -> int:
        return len(self._sent)

    def take(self, key: str) -> int:
        """The number of earlier sends of `key` (0 the first time); counts this one."""
        earlier = self._sent.pop(key, 0)
        self._sent[key] = earlier + 1
        if len(self._sent) > self.kept:
            self._sent.popitem(last=False)
        return earlier
