"""Reads typed values out of attribute lists, reporting unknown, duplicate, missing and ill-typed ones."""

from __future__ import annotations

from bamasc.diagnostics import Diagnostic, Note, error
from bamasc.limits import MAX_TOKENS, written
from bamasc.source import Span
from bamasc.syntax import ast

LIMITS_HINT = 'the limits are listed in docs/language.md, "Limits"'


# What users coming from the SDKs write for an attribute, and the attribute they mean: spelling alone would
# suggest `max_tool_rounds` for `max_tokens`, where the cap of a reply is `max_output`.
# A system prompt (`system_prompt`, the Agents SDK's `instructions`) is a role's `system` message.
SDK_WORDS = {"max_tokens": "max_output", "max_completion_tokens": "max_output", "max_output_tokens": "max_output",
             "max_new_tokens": "max_output", "n_predict": "max_output", "system": "prompt",
             "system_prompt": "system", "instructions": "system", "api_base": "base_url", "base_uri": "base_url"}


def did_you_mean(name: str, options) -> str | None:
    import difflib

    options = list(options)
    meant = SDK_WORDS.get(name.lower())
    if meant in options:
        return f"did you mean '{meant}'? (`{name}` is what the SDKs call it)"
    elsewhere = _blocks_taking(name)
    if elsewhere and name not in options:
        return f"'{name}' is an attribute of {elsewhere}, not of this block: move it there"
    # `OpenAI` for `openai`: a difference in case alone is the likeliest slip, and
    # difflib, which compares characters exactly, misses short names like it.
    same_letters = [option for option in options if option.lower() == name.lower()]
    close = same_letters or difflib.get_close_matches(name, options, n=1, cutoff=0.6)
    return f"did you mean '{close[0]}'?" if close else None


# The attributes of each kind of declaration, as its reader declares them (`declares`): what tells a user
# that `temperature`, written in a system, belongs in a model or a role.
BLOCKS: dict[str, tuple[str, ...]] = {}


def declares(kind: str, names: tuple[str, ...]) -> tuple[str, ...]:
    """`names`, the attributes of declarations of `kind` ("a model"), kept for `did_you_mean`."""
    BLOCKS[kind] = names
    return names


def _blocks_taking(name: str) -> str:
    """The kinds of declaration that take attribute `name` ("a model or a role"), "" for none."""
    found = [kind for kind, names in BLOCKS.items() if name in names]
    return ", ".join(found[:-1]) + " or " + found[-1] if len(found) > 1 else "".join(found)


def shown(text: str, width: int = 40) -> str:
    """A literal as a message quotes it: a number 400 digits long is cut short."""
    return text if len(text) <= width else text[: width - 3] + "..."


def out_of_range(what: str, number: ast.Number, limit: float, unit: str = "") -> Diagnostic:
    """BAM210 for a number above its limit (an infinite one too: `1e999` reads as infinity)."""
    return error(
        "BAM210",
        f"{what} is {shown(number.text)}{unit}, above the limit of {written(limit)}{unit}",
        number.span,
        hint=LIMITS_HINT,
    )


def describe(value: ast.Value) -> str:
    return {
        ast.Number: "a number",
        ast.Money: "a dollar amount",
        ast.String: "a string",
        ast.Ident: "a name",
        ast.ListValue: "a list",
        ast.RangeValue: "a range",
        ast.Call: "a call",
        ast.Block: "a block",
    }[type(value)]


class Attributes:
    """The attributes of one declaration or block, checked against the names it allows."""

    def __init__(self, what: str, items, allowed, diagnostics: list[Diagnostic], span: Span):
        self.what = what
        self.span = span
        self.diagnostics = diagnostics
        self.items: dict[str, ast.Attr | ast.Block] = {}
        for item in items:
            if item.name not in allowed:
                diagnostics.append(
                    error(
                        "BAM106",
                        f"{what} has no attribute '{item.name}'",
                        item.name_span,
                        hint=did_you_mean(item.name, allowed) or f"allowed: {', '.join(allowed)}",
                    )
                )
            elif item.name in self.items:
                diagnostics.append(
                    error(
                        "BAM109",
                        f"attribute '{item.name}' is given twice in {what}",
                        item.name_span,
                        Note("first given here", self.items[item.name].name_span),
                    )
                )
            else:
                self.items[item.name] = item

    def span_of(self, name: str) -> Span:
        item = self.items.get(name)
        if item is None:
            return self.span
        return item.value.span if isinstance(item, ast.Attr) else item.span

    def spans(self) -> dict[str, Span]:
        return {name: self.span_of(name) for name in self.items}

    def missing(self, name: str, example: str) -> None:
        self.diagnostics.append(
            error("BAM107", f"{self.what} is missing '{name}'", self.span, hint=f"add `{example}`")
        )

    def _wrong(self, name: str, value, expected: str) -> None:
        self.diagnostics.append(
            error("BAM108", f"'{name}' in {self.what} must be {expected}, not {describe(value)}", value.span)
        )

    def value(self, name: str, required: str | None = None):
        """The raw value of `name` (None if absent; if `required`, report it with that example)."""
        item = self.items.get(name)
        if item is None:
            if required:
                self.missing(name, required)
            return None
        if isinstance(item, ast.Block):
            self._wrong(name, item, "a value")
            return None
        return item.value

    def block(self, name: str, required: str | None = None) -> ast.Block | None:
        item = self.items.get(name)
        if item is None:
            if required:
                self.missing(name, required)
            return None
        if not isinstance(item, ast.Block):
            self.diagnostics.append(
                error("BAM108", f"'{name}' in {self.what} must be a block `{name} {{ ... }}`", item.value.span)
            )
            return None
        return item

    def string(self, name: str, required: str | None = None) -> str | None:
        value = self.value(name, required)
        if value is None:
            return None
        if not isinstance(value, ast.String):
            self._wrong(name, value, "a string")
            return None
        return value.value

    def number(self, name: str, required: str | None = None) -> ast.Number | None:
        value = self.value(name, required)
        if value is None:
            return None
        if not isinstance(value, ast.Number):
            self._wrong(name, value, "a number")
            return None
        return value

    def token_count(self, name: str, required: str | None = None) -> int | None:
        """A positive integer number of tokens, with no unit or the unit `tokens`."""
        number = self.number(name, required)
        return None if number is None else self.tokens_of(name, number)

    def token_counts(self, name: str) -> tuple[int, ...] | None:
        """One token count, or a list of them (`[256, 1024]`): each valid one, in ascending order and once;
        None when the attribute is absent or names none."""
        value = self.value(name)
        if value is None:
            return None
        if isinstance(value, ast.ListValue):
            if not value.items:
                self.diagnostics.append(error("BAM108", f"'{name}' must list token counts, such as [256, 1024]",
                                              value.span))
                return None
            counts = []
            for item in value.items:
                if not isinstance(item, ast.Number):
                    self.diagnostics.append(error("BAM108", f"each of '{name}' must be a token count", item.span))
                elif (count := self.tokens_of(name, item)) is not None:
                    counts.append(count)
            return tuple(sorted(set(counts))) or None
        if not isinstance(value, ast.Number):
            self._wrong(name, value, "a token count or a list of them")
            return None
        count = self.tokens_of(name, value)
        return None if count is None else (count,)

    def token_range(self, name: str) -> tuple[int, int] | None:
        """`name = n` or `name = lo..hi` in tokens: (n, n) or (lo, hi), or None when absent or wrong."""
        value = self.value(name)
        if not isinstance(value, ast.RangeValue):
            count = self.token_count(name)
            return None if count is None else (count, count)
        lo, hi = self.tokens_of(name, value.lo), self.tokens_of(name, value.hi)
        if lo is None or hi is None:
            return None
        if lo > hi:
            self.diagnostics.append(
                error("BAM207", f"'{name}' = {lo}..{hi}: the low end is above the high end", value.span,
                      hint=f"write {hi}..{lo}")
            )
            return None
        return lo, hi

    def tokens_of(self, name: str, number) -> int | None:
        """`number` as a positive whole number of tokens, or None with a diagnostic."""
        if not isinstance(number, ast.Number):
            self._wrong(name, number, "a number of tokens")
            return None
        if number.unit not in (None, "tokens"):
            self.diagnostics.append(
                error("BAM208", f"'{name}' is a token count and takes no unit, not {number.unit}", number.span)
            )
            return None
        if number.value > MAX_TOKENS:
            self.diagnostics.append(out_of_range(f"'{name}'", number, MAX_TOKENS, " tokens"))
            return None
        if not number.is_integer or number.value < 1:
            self.diagnostics.append(
                error(
                    "BAM207", f"'{name}' must be a positive whole number of tokens, not {shown(number.text)}", number.span
                )
            )
            return None
        return int(number.value)

    def choice(self, name: str, options, default: str) -> str:
        value = self.value(name)
        if value is None:
            return default
        if not isinstance(value, ast.Ident):
            self._wrong(name, value, "one of " + ", ".join(options))
            return default
        if value.name not in options:
            self.diagnostics.append(
                error(
                    "BAM110",
                    f"'{value.name}' is not a valid {name}",
                    value.span,
                    hint=" ".join(filter(None, (did_you_mean(value.name, options), f"choose one of: {', '.join(options)}"))),
                )
            )
            return default
        return value.name

    def names(self, name: str) -> tuple[tuple[str, Span], ...]:
        """A list of names `[a, b]` (a single bare name is accepted as a list of one)."""
        value = self.value(name)
        if value is None:
            return ()
        items = value.items if isinstance(value, ast.ListValue) else (value,)
        result = []
        for item in items:
            if isinstance(item, ast.Ident):
                result.append((item.name, item.span))
            else:
                self._wrong(name, item, "a list of names")
        return tuple(result)
