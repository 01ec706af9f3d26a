"""Prompt bounds calibrated by what was billed: a prompt that extends one the upstream already billed is bounded by
that count, plus a safe bound of what is new, plus a margin.

Where a model's tokenizer is not known, a prompt is bounded by its UTF-8
bytes (about four times its tokens), and a scope or a task stops with a
quarter to half of its budget left. In an agent loop most of each prompt was
sent before, and the upstream said what it billed for it. So a prompt Q is
bounded by

    billed(P) + sum of the safe bounds of Q's items after P's + CALIBRATION_MARGIN_TOKENS

where P is an earlier prompt of the same scope (or task) and model, sent with
the same context (everything but the growing list: the tool specs, the
system text, the output format, the other request fields), whose items
(messages, or Responses input items) are the first items of Q. That is
checked exactly, never assumed: each prompt is read as a chain of digests
(BLAKE2b over the context, then over each item's canonical JSON in turn), and
P matches only when Q's digest after as many items as P has equals P's own.
An earlier message that differs in one byte, a tool spec that changed, an
item inserted or removed: no match, and the prompt keeps its safe bound. A
calibrated bound is never above the safe bound (`bound` takes the smaller).

Why it holds (docs/proxy.md, "Calibrated prompt bounds", has the argument in
full): every chat format bamasc supports frames each message between special
tokens, which byte-level BPE never merges across, so a prompt's tokens are
the sum of its context's, its messages' and the reply's priming, and
T(Q) - T(P) is exactly the tokens of Q's new messages, each at most its
bytes plus MESSAGE_OVERHEAD_TOKENS. The margin covers a template that frames
the message that was last in P differently once another follows it, and the
priming moved behind the new ones.

What was billed is read only from a settled attempt whose usage stayed
within its bound (`Learn`): one charged as overbilled or kept unknown teaches
nothing. A lying upstream cannot break the ledger through it: the settle
still charges the reported usage, and a prompt billed above its calibrated
bound is overbilling (metering/afford.py: `bill`), which closes the scope or
the task as before. An upstream that under-reports P's prompt also
under-charged it by as much as it may later bill Q above Q's calibrated bound.

Memory stays bounded: per scope and model, the REMEMBERED_PER_SCOPE most
recent prompts; at most REMEMBERED_SCOPES scopes, the least recently used
forgotten first. Each is a 32-byte digest and two counts. The memory is one
process's: a request served by another process of a fleet finds nothing and
keeps its safe bound.
"""

from __future__ import annotations

import hashlib
import json
from collections import OrderedDict
from collections.abc import Iterable

from bamasc.metering.admission import Admission, Attempt
from bamasc.records import record

# Tokens a calibrated bound adds once, past what was billed and the new items' safe bounds (see the docstring).
CALIBRATION_MARGIN_TOKENS = 16
REMEMBERED_PER_SCOPE = 8  # billed prompts kept per scope and model, the most recent
REMEMBERED_SCOPES = 4096  # scopes (and models) remembered at once, the least recently used forgotten first
_DIGEST = 32


@record
class Prompt:
    """A prompt as calibration reads it: the digest of its context and of each growing prefix of its items, and the
    safe bound of each item."""

    prefixes: tuple[bytes, ...]  # prefixes[i]: the digest of the context and the first i items (0 to n)
    item_bounds: tuple[int, ...]  # a safe bound of each item's tokens, its framing included

    @property
    def length(self) -> int:
        return len(self.item_bounds)


def canonical(value: object) -> bytes:
    """One JSON text per value: keys sorted, no spaces, every character as itself (a lone surrogate too)."""
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":")).encode("utf-8", "surrogatepass")


def prompt_of(context: bytes, items: Iterable[tuple[bytes, int]]) -> Prompt:
    """The `Prompt` of a context (its canonical bytes) and its items (each item's canonical bytes and safe bound)."""
    digest = hashlib.blake2b(b"context\0" + context, digest_size=_DIGEST).digest()
    prefixes, bounds = [digest], []
    for text, bound in items:
        item = hashlib.blake2b(b"item\0" + text, digest_size=_DIGEST).digest()
        digest = hashlib.blake2b(digest + item, digest_size=_DIGEST).digest()
        prefixes.append(digest)
        bounds.append(bound)
    return Prompt(tuple(prefixes), tuple(bounds))


@record
class Billed:
    """A prompt the upstream billed: the digest of all of it, its items, and the prompt tokens it reported."""

    digest: bytes
    length: int
    tokens: int


class Calibration:
    """The billed prompts of recent calls, per (scope, model), and the bounds they calibrate."""

    def __init__(self, per_scope: int = REMEMBERED_PER_SCOPE, scopes: int = REMEMBERED_SCOPES) -> None:
        self.per_scope = per_scope
        self.scopes = scopes
        self._billed: OrderedDict[tuple[str, str], list[Billed]] = OrderedDict()

    def bound(self, scope: str, model: str, prompt: Prompt, safe: int) -> int:
        """The prompt's bound: the least of `safe` and what each remembered prompt it extends calibrates."""
        best = safe
        for billed in self._billed.get((scope, model), ()):
            if billed.length <= prompt.length and prompt.prefixes[billed.length] == billed.digest:
                new = sum(prompt.item_bounds[billed.length:])
                best = min(best, billed.tokens + new + CALIBRATION_MARGIN_TOKENS)
        return best

    def learn(self, scope: str, model: str, prompt: Prompt, tokens: int) -> None:
        """Remember that the upstream billed `tokens` prompt tokens for `prompt`."""
        key = (scope, model)
        known = self._billed.pop(key, [])
        digest = prompt.prefixes[-1]
        earlier = [billed for billed in known if billed.digest == digest]
        # The same prompt billed twice at two counts: an inconsistent upstream, so the larger one is kept.
        tokens = max([tokens, *(billed.tokens for billed in earlier)])
        known = [billed for billed in known if billed.digest != digest]
        known.append(Billed(digest, prompt.length, tokens))
        self._billed[key] = known[max(0, len(known) - self.per_scope):]  # per_scope = 0 remembers nothing
        while len(self._billed) > self.scopes:
            self._billed.popitem(last=False)

    def __len__(self) -> int:
        """Billed prompts remembered, over every scope."""
        return sum(len(known) for known in self._billed.values())


class Learn(Admission):
    """The link that remembers what an attempt's prompt was billed, once it settles within its bound.

    It comes first in a chain, so it settles last: an overbilled settle has
    set `attempt.error` by then, and teaches nothing."""

    def __init__(self, calibration: Calibration, scope: str, prompt: Prompt, *lesser: Prompt) -> None:
        self.calibration, self.scope, self.prompt = calibration, scope, prompt
        # Prompts the same bill bounds: the one sent less a section of its context that only adds tokens (a tool
        # loop's specs, which its final round is sent without).
        self.lesser = lesser

    async def settle(self, attempt: Attempt, usage) -> None:
        if usage is None or attempt.error is not None or usage.prompt_tokens > attempt.prompt_tokens:
            return
        for prompt in (self.prompt, *self.lesser):
            self.calibration.learn(self.scope, attempt.model.name, prompt, usage.prompt_tokens)
