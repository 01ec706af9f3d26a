"""A provider's rate limits, as a responder for the scripted servers: requests and tokens per sliding window.

`SlidingWindow` answers each request as a provider over its limits does:
within them, a normal reply with the provider's rate-limit headers; beyond
either, a 429 with Retry-After (the time until enough of the window has
passed) and the same headers. A request's tokens are what OpenAI documents
it counts against a limit when the request arrives: the prompt's estimate
plus `max_tokens`; the estimate here is the prompt's UTF-8 bytes plus 8 per
message, the bound a client without the model's tokenizer reserves. The
window and the limits are parameters, so a test can scale a minute down.
"""

from __future__ import annotations

import datetime
import math
import threading
import time
from collections import deque

from tests.runtime.servers import Action, ScriptedServer, status

MESSAGE_OVERHEAD = 8


def request_tokens(body) -> int:
    """A request's prompt bytes (8 more per message, the system prompt included) plus its max_tokens."""
    if not isinstance(body, dict):
        return 0
    messages = list(body.get("messages") or [])
    if body.get("system"):
        messages.append({"content": body["system"]})
    prompt = sum(len(str(m.get("content", "")).encode()) + MESSAGE_OVERHEAD for m in messages if isinstance(m, dict))
    cap = body.get("max_completion_tokens", body.get("max_tokens")) or 0
    return prompt + int(cap)


class SlidingWindow:
    """At most `requests` requests and `tokens` tokens in any `window_s` seconds; None leaves one unlimited."""

    def __init__(self, flavor: str, *, requests: int | None = None, tokens: int | None = None,
                 window_s: float = 60.0, headers: bool = True, report_limits: bool = True):
        self.flavor = flavor
        self.requests = requests
        self.tokens = tokens
        self.window_s = window_s
        self.headers = headers  # send the rate-limit headers at all
        self.report_limits = report_limits  # send the `limit` headers (else only remaining and reset)
        self.lock = threading.Lock()
        self.log: deque[tuple[float, int]] = deque()  # (arrival, tokens) of each accepted request in the window
        self.used_tokens = 0
        self.accepted: list[tuple[float, int]] = []  # every accepted request, for the tests' own checks
        self.refused: list[float] = []

    def __call__(self, body) -> Action:
        cost = request_tokens(body)
        with self.lock:
            now = time.monotonic()
            while self.log and self.log[0][0] <= now - self.window_s:
                self.used_tokens -= self.log.popleft()[1]
            over_requests = self.requests is not None and len(self.log) + 1 > self.requests
            over_tokens = self.tokens is not None and self.used_tokens + cost > self.tokens
            if over_requests or over_tokens:
                self.refused.append(now)
                wait = self._retry_after(now, cost)
                return status(429, headers={**self._headers(now), "retry-after": f"{wait:.3f}",
                                            "retry-after-ms": str(math.ceil(wait * 1000))})
            self.log.append((now, cost))
            self.used_tokens += cost
            self.accepted.append((now, cost))
            return Action("reply", headers=tuple(self._headers(now).items()))

    def _retry_after(self, now: float, cost: int) -> float:
        """Seconds until enough of the window's oldest requests have left it for this one to fit."""
        leaving = []
        if self.requests is not None and len(self.log) + 1 > self.requests:
            leaving.append(self.log[len(self.log) - self.requests][0])
        if self.tokens is not None and self.used_tokens + cost > self.tokens:
            needed, freed = self.used_tokens + cost - self.tokens, 0
            for arrival, tokens in self.log:
                freed += tokens
                if freed >= needed:
                    leaving.append(arrival)
                    break
            else:
                return self.window_s  # larger than the whole limit: it never fits
        return max(0.0, max(leaving) + self.window_s - now)

    def _headers(self, now: float) -> dict[str, str]:
        if not self.headers:
            return {}
        reset = self.log[0][0] + self.window_s - now if self.log else 0.0
        values = {}
        for dimension, limit, used in (("requests", self.requests, len(self.log)), ("tokens", self.tokens, self.used_tokens)):
            if limit is None:
                continue
            values[dimension] = (limit, max(0, limit - used), max(0.0, reset))
        if self.flavor == "openai":
            headers = {}
            for dimension, (limit, left, after) in values.items():
                if self.report_limits:
                    headers[f"x-ratelimit-limit-{dimension}"] = str(limit)
                headers[f"x-ratelimit-remaining-{dimension}"] = str(left)
                headers[f"x-ratelimit-reset-{dimension}"] = f"{after * 1000:.0f}ms"
            return headers
        headers = {}
        for dimension, (limit, left, after) in values.items():
            when = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=after)
            if self.report_limits:
                headers[f"anthropic-ratelimit-{dimension}-limit"] = str(limit)
            headers[f"anthropic-ratelimit-{dimension}-remaining"] = str(left)
            headers[f"anthropic-ratelimit-{dimension}-reset"] = when.isoformat().replace("+00:00", "Z")
        return headers

    def most_in_any_window(self) -> tuple[int, int]:
        """The most requests, and tokens, this server accepted in any `window_s` (a check on itself)."""
        times = self.accepted
        most_requests = most_tokens = 0
        start = tokens = 0
        for end, (arrival, cost) in enumerate(times):
            tokens += cost
            while times[start][0] <= arrival - self.window_s:
                tokens -= times[start][1]
                start += 1
            most_requests = max(most_requests, end - start + 1)
            most_tokens = max(most_tokens, tokens)
        return most_requests, most_tokens


def limited_server(flavor: str, **limits) -> tuple[ScriptedServer, SlidingWindow]:
    """A started server of `flavor` answering through a SlidingWindow of `limits`; close it when done."""
    window = SlidingWindow(flavor, **limits)
    server = ScriptedServer(flavor, responder=window).start()
    return server, window
