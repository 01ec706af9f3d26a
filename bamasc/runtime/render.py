"""A prompt as a call sends it: the role's text with its placeholders filled, and text no request can carry."""

from __future__ import annotations

import re

PLACEHOLDER = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)(\??)\s*\}\}")


class MissingPlaceholder(Exception):
    """A required placeholder has no value in this call."""


def render(prompt: str, inputs: dict[str, str], where: str = "") -> str:
    """The prompt text `prompt` with its placeholders filled; only `{{name?}}` may render empty.

    Lint proves every call fills its role's required placeholders (BAM212),
    so a missing one means the plan and the interpreter disagree: sending
    the prompt with a hole in it would spend money on the wrong question.
    """

    def fill(match: re.Match) -> str:
        name, optional = match.group(1), match.group(2)
        value = inputs.get(name)
        if value is not None:
            return value
        if optional:
            return ""
        raise MissingPlaceholder(f"{where}required placeholder '{{{{{name}}}}}' has no value in this call; run `bamasc lint`")

    return PLACEHOLDER.sub(fill, prompt)


def numbered(texts) -> str:
    """Outputs shown as a list: `[1] ` before each, a blank line between (ir/tokens.list_tokens counts it)."""
    return "\n\n".join(f"[{i + 1}] {text}" for i, text in enumerate(texts))


def lone_surrogate(text: str) -> int | None:
    """The index of the first character of `text` that UTF-8 cannot encode (a lone surrogate, U+D800 to U+DFFF);
    None when it all encodes.

    Such text is valid in a Python string, in JSON as a `\\ud800` escape and in
    a command's arguments (bytes that are not UTF-8 decode to U+DC80 to U+DCFF),
    but no request body can carry it: the SDKs fail to encode it and send nothing.
    """
    if text.isascii():  # constant time in CPython
        return None
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as problem:
        return problem.start
    return None


def unencodable(text: str, what: str) -> str | None:
    """Why `text` (`what` it is, as a message names it) cannot be sent; None when it can."""
    at = lone_surrogate(text)
    if at is None:
        return None
    return (f"{what} holds a lone surrogate (U+{ord(text[at]):04X} at character {at + 1}), "
            "which cannot be encoded as UTF-8, so no request can carry it")


def unsendable(messages) -> str | None:
    """Why `messages` cannot be sent: the first of their texts that UTF-8 cannot encode; None when they can."""
    for number, message in enumerate(messages, 1):
        texts = [message.content] + [text for call in message.tool_calls for text in (call.id, call.arguments)]
        for text in texts:
            problem = unencodable(text, f"message {number} of the prompt ({message.role})")
            if problem is not None:
                return problem
    return None
