"""Reads `env("VAR")` values: a secret a file names the variable of but never holds (a model's `api_key`,
a key's `secret`)."""

from __future__ import annotations

import re

from bamasc.check.attributes import Attributes
from bamasc.diagnostics import Diagnostic, error
from bamasc.secrets import looks_like_key
from bamasc.syntax import ast

# What a shell can export: the names env() may take.
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def env_secret(attrs: Attributes, name: str, example: str, diagnostics: list[Diagnostic],
               required: bool = False) -> str | None:
    """The variable `name = env("VAR")` names; None when absent or written any other way (with a diagnostic,
    BAM205 for a literal string, which may be the secret itself). `example` is the fix the hints show."""
    value = attrs.value(name, example if required else None)
    if value is None:
        return None
    if isinstance(value, ast.Call) and value.func == "env" and len(value.args) == 1 \
            and isinstance(value.args[0], ast.String):
        return env_name(value.args[0], example, diagnostics)
    if isinstance(value, ast.String):
        diagnostics.append(
            error(
                "BAM205",
                f"{name} is written into the source; keys belong in the environment",
                value.span,
                hint=f"write `{example}` and export the key in that variable",
                redact=(value.span,),
            )
        )
        return None
    diagnostics.append(error("BAM108", f'{name} must be `env("VAR")`', value.span))
    return None


def env_name(name: ast.String, example: str, diagnostics: list[Diagnostic]) -> str | None:
    """The variable `env("...")` names; a key pasted in its place is reported without being repeated."""
    pasted = looks_like_key(name.value) or _random_looking(name.value)
    if ENV_NAME.fullmatch(name.value) and not pasted:
        return name.value
    diagnostics.append(
        error(
            "BAM211",
            "env() is given what looks like an API key, not the name of the variable that holds it"
            if pasted
            else "env() takes the name of an environment variable: letters, digits and '_', not starting with a digit",
            name.span,
            hint=f"write `{example}` and export the key in that variable",
            # Whatever was written may be a key, so no excerpt shows it.
            redact=(name.span,),
        )
    )
    return None


def _random_looking(name: str) -> bool:
    """32 characters or more of letters and digits in one run, with lower case among them: a key in no
    known format (a hex or base-62 token). A variable name, even a long lower-case one, has words and '_'."""
    return len(name) >= 32 and name.isalnum() and any(ch.islower() for ch in name) and any(ch.isdigit() for ch in name)
