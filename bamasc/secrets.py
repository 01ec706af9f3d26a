"""What an API key looks like, and how text that may hold one is masked before it is printed.

The shapes are the published prefixes of the providers a `.bam` file can name
and of the key stores people paste from. A match must contain a digit, so
that words such as `task-management-and-scheduling` are not taken for keys.

Text a server sent (an error message that echoes the request) may hold a key
encoded: `redact` also masks a base64 or URL-encoded run that decodes to
something key-shaped, and each known secret in those encodings. It does not
look further (a key encoded twice, compressed or encrypted is not found).
"""

from __future__ import annotations

import base64
import binascii
import functools
import re
import urllib.parse

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


# A run of base64 (standard or URL-safe) long enough to hold a key: the shortest shape above is 19 characters.
_BASE64_RUN = r"[A-Za-z0-9+/_-]{24,}={0,2}"
# A run of URL-encoded text with at least one escape.
_PERCENT_RUN = r"(?:%[0-9A-Fa-f]{2}|[A-Za-z0-9._~+-])*%[0-9A-Fa-f]{2}(?:%[0-9A-Fa-f]{2}|[A-Za-z0-9._~+-])*"
# A known secret shorter than this is not masked: it would match ordinary words.
MIN_SECRET = 8


def redact(text: str, secrets=()) -> str:
    """`text` from outside (a server's error message) with every key in it masked: key-shaped parts, plain,
    base64 or URL-encoded, and each of `secrets` (the API keys sent) in any of those encodings."""
    for secret in secrets:
        if secret and len(secret) >= MIN_SECRET:
            for form in sorted(_encodings(secret), key=len, reverse=True):
                text = text.replace(form, "*" * len(form))
    text = mask_keys(text)
    for pattern in (_PERCENT_RUN, _BASE64_RUN):
        text = _compiled(pattern).sub(_masked_if_key, text)
    return text


def _masked_if_key(match: re.Match) -> str:
    run = match.group()
    return _masked(run) if any(looks_like_key(decoded) for decoded in _decodings(run)) else run


def _decodings(run: str):
    """What `run` may stand for: URL-decoded if it has an escape, else base64-decoded at each alignment
    (the run may start inside the encoded text, or with a letter that is not part of it)."""
    if "%" in run:
        yield urllib.parse.unquote(run)
        return
    body = run.rstrip("=").replace("-", "+").replace("_", "/")
    for skip in range(4):
        part = body[skip:]
        part = part[: len(part) - len(part) % 4] if len(part) % 4 == 1 else part
        try:
            raw = base64.b64decode(part + "=" * (-len(part) % 4), validate=True)
        except (binascii.Error, ValueError):
            continue
        yield raw.decode("latin-1")


@functools.cache
def _encodings(secret: str) -> frozenset[str]:
    """The forms `secret` takes when a server echoes it: plain, URL-encoded, and base64 (standard and URL-safe)
    wherever it falls in the encoded text, as the characters that only its bytes decide."""
    raw = secret.encode("utf-8")
    forms = {secret, urllib.parse.quote(secret, safe=""), urllib.parse.quote(secret, safe="").lower()}
    forms.add("".join(f"%{byte:02X}" for byte in raw))  # every byte escaped, as some clients do
    for offset in range(3):
        encoded = base64.b64encode(bytes(offset) + raw).decode("ascii").rstrip("=")
        first = -(-offset * 8 // 6)  # characters that hold bits of the padding before it
        last = (offset + len(raw)) * 8 // 6  # characters whose bits are all known
        core = encoded[first:last]
        if len(core) >= MIN_SECRET:
            forms.update((core, core.replace("+", "-").replace("/", "_")))
    return frozenset(forms)


@functools.cache
def _compiled(pattern: str) -> re.Pattern:
    return re.compile(pattern)
