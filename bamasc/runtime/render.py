"""A prompt as a call sends it: the role's text with its placeholders filled."""

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
