"""What an API key looks like, and how text that may hold one is masked before it is printed.

The shapes are the published prefixes of the providers a `.bam` file can name
and of the key stores people paste from. A match must contain a digit, so
that words such as `task-management-and-scheduling` are not taken for keys.
"""

from __future__ import annotations

import functools
import re

_KEY_PATTERN = r"""(?<![A-Za-z0-9_-])(?:
        sk-[A-Za-z0-9_-]{16,}            # OpenAI, Anthropic (sk-ant-), DeepSeek, OpenRouter (sk-or-)
      | sk_(?:live|test)_[A-Za-z0-9]{16,}
      | gh[oprsu]_[A-Za-z0-9]{20,}       # GitHub tokens
      | github_pat_[A-Za-z0-9_]{20,}
      | xox[abprs]-[A-Za-z0-9-]{10,}     # Slack
      | (?:AKIA|ASIA)[0-9A-Z]{16}        # AWS access key ids
      | AIza[0-9A-Za-z_-]{30,}           # Google
      | hf_[A-Za-z0-9]{20,}              # Hugging Face
      | gsk_[A-Za-z0-9]{20,}             # Groq
      | r8_[A-Za-z0-9]{20,}              # Replicate
      | (?:pplx|xai)-[A-Za-z0-9]{20,}    # Perplexity, xAI
    )(?![A-Za-z0-9_-])"""
# Characters of a key left visible: its provider prefix says which key it was.
VISIBLE_PREFIX = 3


def looks_like_key(text: str) -> bool:
    """Whether `text` holds something shaped like an API key."""
    return bool(key_ranges(text))


def key_ranges(text: str) -> list[tuple[int, int]]:
    """(start, end) offsets of every key-shaped part of `text`."""
    if not any(ch.isdigit() for ch in text):  # every key has a digit: most names and URLs need no regex
        return []
    return [match.span() for match in _key().finditer(text) if _is_key(match.group())]


def mask_keys(text: str) -> str:
    """`text` with every key-shaped part masked, keeping its length so that carets stay aligned."""
    for start, end in reversed(key_ranges(text)):
        text = text[:start] + _masked(text[start:end]) + text[end:]
    return text


def mask_span(text: str, start: int, end: int) -> str:
    """`text` with columns start..end (0-based, end exclusive) masked, quotes and spaces left as they are."""
    inside = "".join(ch if ch in "\"' \t" else "*" for ch in text[start:end])
    return text[:start] + inside + text[end:]


@functools.cache
def _key() -> re.Pattern:
    # Compiled on first use: `bamasc lint` on a file with no digit in a URL or env() never needs it.
    return re.compile(_KEY_PATTERN, re.VERBOSE)


def _is_key(candidate: str) -> bool:
    return any(ch.isdigit() for ch in candidate)


def _masked(key: str) -> str:
    return key[:VISIBLE_PREFIX] + "*" * (len(key) - VISIBLE_PREFIX)
