"""Which answers a provider surely did not bill: the one rule every surface ends a hold by.

A reply that refused the request itself (a 4xx, 429 included) was not
processed, so its hold is released. So was an overload answer (503, and
Anthropic's 529), which a provider sends before it runs anything. Anything
else may have been billed: a request timeout (408) or a conflict (409) may
come after the work, a 500 after the model ran, a gateway's 502 or 504 in
front of a server that went on; those keep their whole hold, as an answer
that never came does.
"""

from __future__ import annotations

# Statuses a provider answers with before it runs anything.
OVERLOADED = frozenset({503, 529})


def surely_unbilled(status: int) -> bool:
    """Whether an error reply with HTTP `status` was surely not billed (its hold is released; else kept)."""
    return (400 <= status < 500 and status not in (408, 409)) or status in OVERLOADED
