"""What a provider's rate-limit headers say: each limit, what is left of it, and when it is whole again.

OpenAI sends `x-ratelimit-{limit,remaining,reset}-{requests,tokens}`, the
reset as a duration (`6m0s`, `1s`, `20ms`). Anthropic sends
`anthropic-ratelimit-{requests,tokens,input-tokens,output-tokens}-{limit,remaining,reset}`,
the reset as an RFC 3339 time; its `tokens-*` are the most restrictive limit
in effect, and stand for the input and output ones when it sends them. A
header that does not parse (garbage, NaN, a negative count) is ignored, as if
it had not been sent, and named in `RateHeaders.unreadable`.
"""

from __future__ import annotations

import datetime
import email.utils
import math
import re
import time
from collections.abc import Mapping

from bamasc.provider_registry import RATE_HEADER_FAMILIES
from bamasc.records import record

RATE_HEADER_PREFIXES = tuple(f"{family}-" for family in RATE_HEADER_FAMILIES)
RETRY_HEADERS = ("retry-after", "retry-after-ms")

_DURATION = re.compile(r"(?:(\d+(?:\.\d+)?)h)?(?:(\d+(?:\.\d+)?)m(?!s))?(?:(\d+(?:\.\d+)?)s)?(?:(\d+(?:\.\d+)?)ms)?")


@record
class Window:
    """One limit as a header reports it; None where the header was absent or unreadable."""

    limit: float | None = None
    remaining: float | None = None
    reset_s: float | None = None  # seconds until the limit is whole again


@record
class RateHeaders:
    requests: Window = Window()
    tokens: Window = Window()
    unreadable: tuple[tuple[str, str], ...] = ()  # (name, value) of each limit header sent but not read

    @property
    def empty(self) -> bool:
        return self.requests == Window() and self.tokens == Window() and not self.unreadable


def rate_headers(headers: Mapping[str, str] | None) -> dict[str, str]:
    """The headers a limiter reads, names lower-cased: small and plain, to pass across processes."""
    if not headers:
        return {}
    kept = {}
    for name, value in headers.items():
        lowered = name.lower()
        if lowered.startswith(RATE_HEADER_PREFIXES) or lowered in RETRY_HEADERS:
            kept[lowered] = str(value)[:200]
    return kept


def read_rate_headers(headers: Mapping[str, str], *, now: float | None = None) -> RateHeaders:
    """The limits `headers` report (names in any case); `now` is the wall clock for Anthropic's reset times."""
    lowered = {name.lower(): value for name, value in headers.items()}
    now = time.time() if now is None else now
    openai = {
        dimension: Window(
            _count(lowered.get(f"x-ratelimit-limit-{dimension}")),
            _count(lowered.get(f"x-ratelimit-remaining-{dimension}")),
            parse_duration(lowered.get(f"x-ratelimit-reset-{dimension}")),
        )
        for dimension in ("requests", "tokens")
    }
    anthropic = {
        name: Window(
            _count(lowered.get(f"anthropic-ratelimit-{name}-limit")),
            _count(lowered.get(f"anthropic-ratelimit-{name}-remaining")),
            _until(lowered.get(f"anthropic-ratelimit-{name}-reset"), now),
        )
        for name in ("requests", "tokens", "input-tokens", "output-tokens")
    }
    tokens = anthropic["tokens"]
    if tokens == Window():
        tokens = _tightest(anthropic["input-tokens"], anthropic["output-tokens"])
    unreadable = tuple(
        (name, str(value)[:40]) for name, value in sorted(lowered.items())
        if name.startswith(RATE_HEADER_PREFIXES) and _is_count(name) and _count(value) is None
    )
    return RateHeaders(
        requests=_first(openai["requests"], anthropic["requests"]),
        tokens=_first(openai["tokens"], tokens),
        unreadable=unreadable,
    )


def _is_count(name: str) -> bool:
    """Whether a rate-limit header holds a count (a limit or what is left of it), not a reset time."""
    return "-limit" in name or "-remaining" in name


def parse_duration(text: str | None) -> float | None:
    """Seconds in an OpenAI reset duration (`1h2m3.5s`, `6m0s`, `20ms`, or plain seconds); None if unreadable."""
    if text is None:
        return None
    text = text.strip()
    try:
        seconds = float(text)
    except ValueError:
        match = _DURATION.fullmatch(text)
        if not text or match is None:
            return None
        hours, minutes, whole, milli = (float(part) if part else 0.0 for part in match.groups())
        seconds = hours * 3600 + minutes * 60 + whole + milli / 1000
    return seconds if math.isfinite(seconds) and seconds >= 0 else None


def _until(text: str | None, now: float) -> float | None:
    """Seconds from `now` to an RFC 3339 time; 0 for one already past."""
    if text is None:
        return None
    try:
        when = datetime.datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        return None
    if when.tzinfo is None:
        return None
    return max(0.0, when.timestamp() - now)


def _count(text: str | None) -> float | None:
    if text is None:
        return None
    try:
        value = float(text.strip())
    except ValueError:
        return None
    return value if math.isfinite(value) and value >= 0 else None


def _first(*windows: Window) -> Window:
    return next((window for window in windows if window != Window()), Window())


def _tightest(*windows: Window) -> Window:
    """The window with the least left (then the lowest limit): the one that binds first."""
    known = [window for window in windows if window != Window()]
    if not known:
        return Window()
    return min(known, key=lambda w: (math.inf if w.remaining is None else w.remaining,
                                     math.inf if w.limit is None else w.limit))


def parse_retry_after(headers: Mapping[str, str] | None, *, now: float | None = None) -> float | None:
    """Seconds to wait from a Retry-After header (delta-seconds or HTTP date), or `retry-after-ms`.

    Returns None when there is no usable header. A date in the past gives 0.
    """
    if not headers:
        return None
    lowered = {key.lower(): value for key, value in headers.items()}
    milliseconds = lowered.get("retry-after-ms")
    if milliseconds is not None:
        try:
            value = float(milliseconds) / 1000.0
        except ValueError:
            value = None
        if value is not None and math.isfinite(value) and value >= 0:
            return value
    raw = lowered.get("retry-after")
    if raw is None:
        return None
    raw = raw.strip()
    try:
        seconds = float(raw)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(raw)
        except (TypeError, ValueError, IndexError):
            return None
        if when is None or when.tzinfo is None:
            return None
        seconds = when.timestamp() - (time.time() if now is None else now)
        return max(0.0, seconds)
    if not math.isfinite(seconds) or seconds < 0:
        return None
    return seconds
