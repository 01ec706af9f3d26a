"""The price model: a model's rates, the worst case a bound and a reservation pay, and the charge of reported usage.

Rates are USD per million tokens, so one token at rate r costs r µ$. A tier
re-prices every token of a call whose prompt has more than `above` tokens
(the providers' "cliff" tiers, e.g. twice the price above 200k prompt tokens),
its output included.

What each price is used for (docs/language.md, "Prices"):

- The worst case of a call (the proven bound, every reservation) pays, for a
  prompt of at most N tokens, the highest rates of every tier such a prompt
  could reach, and counts each prompt token at the higher of the input and
  the cached-read rate: providers cache on their own (OpenAI, DeepSeek), so a
  read is never assumed to be the cheaper one.
- Cache writes are billed only for prompts marked with `cache_control`, which
  bamasc never sends, so no bound pays for them; a reply that reports some is
  charged at the write rate, and a charge beyond the reservation stops the task.
- Cached reads are credited only when settling, with the count the provider reports.
- Batch rates are recorded, never used: bamasc makes no batch requests.
"""

from __future__ import annotations

from bamasc.records import record


@record
class PriceTier:
    """The rates of every token of a call whose prompt has more than `above` tokens."""

    above: int
    input: float
    output: float
    cache_read: float | None = None
    cache_write: float | None = None


@record
class Rates:
    """The rates one call is priced at; `above` names the tier (None: the base rates)."""

    input: float
    output: float
    cache_read: float
    cache_write: float
    above: int | None = None

    def as_dict(self) -> dict:
        return {"input": self.input, "output": self.output, "cache_read": self.cache_read,
                "cache_write": self.cache_write, "above": self.above}


@record
class Usage:
    """What a provider reports: prompt tokens in all (cached and written ones included), and of them
    how many were read from its cache or written to it."""

    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int = 0
    cache_write_tokens: int = 0


@record
class Pricing:
    """Every rate of one model. `catalog` is the catalogue entry they come from (None: written in the source)."""

    input: float
    output: float
    cache_read: float | None = None  # None: a cached read is billed as input
    cache_write: float | None = None  # None: a cache write is billed as input
    tiers: tuple[PriceTier, ...] = ()  # by `above`, ascending
    per_request: float = 0.0  # µ$ billed for each call whatever its tokens
    batch_input: float | None = None  # recorded only: bamasc uses no batch API
    batch_output: float | None = None
    catalog: str | None = None  # "provider/model" in the catalogue
    snapshot: str | None = None  # the catalogue snapshot's date (ISO)

    def rates_at(self, prompt_tokens: int) -> Rates:
        """The rates of a call whose prompt has exactly `prompt_tokens` tokens."""
        level = self._level(None)
        for tier in self.tiers:
            if prompt_tokens > tier.above:
                level = self._level(tier)
        return level

    def worst_rates(self, prompt_bound: int) -> Rates:
        """The highest rate any prompt of at most `prompt_bound` tokens could be billed, per kind of token.

        `input` already counts a cached read as the dearer of the two (see the module docstring).
        """
        levels = [self._level(None)] + [self._level(tier) for tier in self.tiers if prompt_bound > tier.above]
        top = levels[-1].above if len(levels) > 1 else None
        return Rates(
            input=max(max(level.input, level.cache_read) for level in levels),
            output=max(level.output for level in levels),
            cache_read=max(level.cache_read for level in levels),
            cache_write=max(level.cache_write for level in levels),
            above=top,
        )

    def worst_cost(self, prompt_bound: int, output_tokens: int) -> tuple[float, float]:
        """µ$ (input side, output side) that bound a call of at most this many prompt and output tokens."""
        rates = self.worst_rates(prompt_bound)
        return rates.input * prompt_bound + self.per_request, rates.output * output_tokens

    def charge(self, usage: Usage) -> tuple[float, Rates]:
        """µ$ the reported usage costs, and the rates applied (the tier its prompt reached)."""
        rates = self.rates_at(usage.prompt_tokens)
        plain = max(usage.prompt_tokens - usage.cached_tokens - usage.cache_write_tokens, 0)
        amount = (
            rates.input * plain
            + rates.cache_read * usage.cached_tokens
            + rates.cache_write * usage.cache_write_tokens
            + rates.output * usage.completion_tokens
            + self.per_request
        )
        return amount, rates

    def _level(self, tier: PriceTier | None) -> Rates:
        source = self if tier is None else tier
        cache_read = source.cache_read if source.cache_read is not None else source.input
        cache_write = source.cache_write if source.cache_write is not None else source.input
        return Rates(source.input, source.output, cache_read, cache_write, None if tier is None else tier.above)

    def record(self) -> dict:
        """The rates as the plan records them."""
        return {
            "source": "catalog" if self.catalog else "declared",
            "catalog": {"entry": self.catalog, "snapshot": self.snapshot} if self.catalog else None,
            "cache_read": self.cache_read,
            "cache_write": self.cache_write,
            "tiers": [
                {"above": t.above, "input": t.input, "output": t.output, "cache_read": t.cache_read,
                 "cache_write": t.cache_write}
                for t in self.tiers
            ],
            "per_request": self.per_request,
            "batch": {"input": self.batch_input, "output": self.batch_output} if self.batch_input is not None else None,
        }


def flat(input_rate: float, output_rate: float) -> Pricing:
    return Pricing(input_rate, output_rate)
