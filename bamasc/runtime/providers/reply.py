"""What a usable reply holds: the fields a provider's JSON must have and token counts as it bills them."""

from __future__ import annotations

from bamasc.runtime.providers.base import ProviderError
from bamasc.words import show


def malformed_error(*, provider: str, model: str, detail: str) -> ProviderError:
    """The call reached the model and came back unusable: it may well be billed."""
    return ProviderError(
        f"{provider} model '{model}' sent a malformed response: {detail}",
        kind="malformed",
        outcome_unknown=True,
    )


def usage_tokens(usage: object, field: str, *, provider: str, model: str, optional: bool = False) -> int:
    """`usage[field]` as a token count: a JSON integer, not negative; anything else makes the reply malformed.

    Floats, strings and booleans are refused rather than coerced: a count
    given as `19.99`, `"15"`, `true` or `Infinity` is not what any provider
    bills, and a coerced guess could charge less than was spent. `optional`
    fields may be missing or null (zero).
    """
    value = usage.get(field) if isinstance(usage, dict) else None
    if value is None and optional and isinstance(usage, dict):
        return 0
    if type(value) is not int or value < 0:
        shown = "missing" if value is None else show(value)
        raise malformed_error(
            provider=provider, model=model, detail=f"usage.{field} is {shown}, not a token count"
        )
    return value


def missing_fields(response: object, error: Exception, *, provider: str, model: str) -> ProviderError:
    """The malformed error for a reply without the fields a completion is read from; it names a missing usage."""
    detail = "no usage" if not isinstance(response, dict) or response.get("usage") is None else type(error).__name__
    return malformed_error(provider=provider, model=model, detail=f"missing fields ({detail})")
