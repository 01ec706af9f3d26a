"""Reads and checks `key` and `team` declarations: the client keys of `bamasc proxy`, the teams they
belong to and their budget windows (docs/language.md, "Keys and teams").

The proxy reads the records (`Program.keys`, `Program.teams`); lint never reads a secret, only the
name of the variable that holds it.
"""

from __future__ import annotations

from bamasc.check.attributes import LIMITS_HINT, Attributes, declares, describe, did_you_mean, shown
from bamasc.check.env import env_secret
from bamasc.diagnostics import Diagnostic, Note, error
from bamasc.limits import MAX_BUDGET, MAX_WINDOW_BUDGET, written
from bamasc.program import KEY_ON_EXHAUSTED, WINDOW_PERIODS, Key, Program, Team, WindowBudget
from bamasc.source import Span
from bamasc.syntax import ast

KEY_ATTRIBUTES = declares("a key", ("secret", "team", "scope_budget", "budgets", "models", "on_exhausted"))
TEAM_ATTRIBUTES = declares("a team", ("budgets",))
SECRET_EXAMPLE = 'secret = env("SUPPORT_BOT_KEY")'
WINDOW_EXAMPLE = 'window($50, "1d")'
# How each period reads in a hint: `1m` is a minute, and a month is `1mo`.
PERIOD_WORDS = {"30s": "30 seconds", "1m": "a minute", "1h": "an hour", "1d": "a day (UTC)",
                "7d": "a week from Monday", "1mo": "a calendar month"}


def read_team(decl: ast.TeamDecl, diagnostics: list[Diagnostic]) -> Team:
    attrs = Attributes(f"team '{decl.name}'", decl.attrs, TEAM_ATTRIBUTES, diagnostics, decl.name_span)
    return Team(decl.name, _windows(attrs, diagnostics), decl.name_span, attrs.spans())


def read_key(decl: ast.KeyDecl, diagnostics: list[Diagnostic]) -> Key:
    attrs = Attributes(f"key '{decl.name}'", decl.attrs, KEY_ATTRIBUTES, diagnostics, decl.name_span)
    secret = env_secret(attrs, "secret", SECRET_EXAMPLE, diagnostics, required=True)
    scope_budget = attrs.value("scope_budget")
    if scope_budget is not None:
        scope_budget = _amount("scope_budget", scope_budget, MAX_BUDGET, diagnostics)
    models = _models(attrs, decl.name, diagnostics)
    return Key(
        name=decl.name,
        secret_env=secret or "",
        team=_team(attrs, decl.name, diagnostics),
        scope_budget=scope_budget,
        budgets=_windows(attrs, diagnostics),
        models=tuple(name for name, _ in models),
        on_exhausted=attrs.choice("on_exhausted", KEY_ON_EXHAUSTED, "refuse"),
        span=decl.name_span,
        spans=attrs.spans(),
        item_spans={"models": tuple(span for _, span in models)},
    )


def _team(attrs: Attributes, key: str, diagnostics) -> str | None:
    value = attrs.value("team")
    if value is None:
        return None
    if isinstance(value, ast.Ident):
        return value.name
    diagnostics.append(error("BAM108", f"'team' in key '{key}' must be the name of a team, not {describe(value)}",
                             value.span, hint="write `team = cx` for `team cx { ... }`"))
    return None


def _models(attrs: Attributes, key: str, diagnostics) -> tuple[tuple[str, Span], ...]:
    value = attrs.value("models")
    if isinstance(value, ast.ListValue) and not value.items:
        diagnostics.append(error("BAM108", f"'models' in key '{key}' lists no model, so the key could call none",
                                 value.span, hint="name the models it may call, or leave `models` out for every one"))
    return attrs.names("models")


# ---------------------------------------------------------------- windows and amounts


def _windows(attrs: Attributes, diagnostics) -> tuple[WindowBudget, ...]:
    """`budgets = [window($50, "1d"), ...]` (one window alone is a list of one): each valid window, one per period."""
    value = attrs.value("budgets")
    if value is None:
        return ()
    if not isinstance(value, (ast.ListValue, ast.Call)):
        diagnostics.append(error("BAM108", f"budgets must be a list of windows, such as [{WINDOW_EXAMPLE}], "
                                 f"not {describe(value)}", value.span))
        return ()
    found: dict[str, tuple[WindowBudget, Span]] = {}
    for item in value.items if isinstance(value, ast.ListValue) else (value,):
        window = _window(item, diagnostics)
        if window is None:
            continue
        first = found.get(window.per)
        if first is not None:
            diagnostics.append(error(
                "BAM703", f"two budgets over the period {window.per}", item.span, Note("the first is here", first[1]),
                hint="give one budget per period: the smaller of the two is the one that would hold",
            ))
            continue
        found[window.per] = (window, item.span)
    return tuple(window for window, _ in found.values())


def _window(item: ast.Value, diagnostics) -> WindowBudget | None:
    """One `window(amount, "per")`, or None with a diagnostic."""
    if not isinstance(item, ast.Call) or item.func != "window":
        what = f"{item.func}(...)" if isinstance(item, ast.Call) else describe(item)
        hint = did_you_mean(item.func, ("window",)) if isinstance(item, ast.Call) else None
        diagnostics.append(error("BAM702", f'a budget is `window(amount, "per")`, not {what}', item.span,
                                 hint=hint or f"for $50 a day, write {WINDOW_EXAMPLE}"))
        return None
    if len(item.args) != 2:
        diagnostics.append(error("BAM702", f"window takes two values, an amount and a period, not {len(item.args)}",
                                 item.span, hint=f"for $50 a day, write {WINDOW_EXAMPLE}"))
        return None
    amount, per = item.args
    if isinstance(amount, ast.String) and isinstance(per, (ast.Money, ast.Number)):
        diagnostics.append(error("BAM702", "a window takes its amount first, then its period", item.span,
                                 hint=f"write window({_text(per)}, {amount.raw})"))
        return None
    if not isinstance(per, ast.String) or per.value not in WINDOW_PERIODS:
        written_per = shown(per.raw) if isinstance(per, ast.String) else describe(per)
        diagnostics.append(error(
            "BAM702", f"a window's period is one of {', '.join(WINDOW_PERIODS)}, not {written_per}", per.span,
            hint="; ".join(f'"{period}" is {words}' for period, words in PERIOD_WORDS.items()),
        ))
        return None
    micro_usd = _amount("a window's amount", amount, MAX_WINDOW_BUDGET, diagnostics)
    return None if micro_usd is None else WindowBudget(micro_usd, per.value)


def _amount(what: str, value: ast.Value, limit: float, diagnostics) -> float | None:
    """µ$ from `$0.05`, `50000` or `50000 µ$`: finite, above zero and within `limit`; None with a diagnostic."""
    if isinstance(value, ast.Money):
        amount, as_written = _micro_usd(value), shown(value.text)
    elif isinstance(value, ast.Number) and value.unit in (None, "µ$"):
        amount, as_written = value.value, f"{shown(value.text)} µ$"
    elif isinstance(value, ast.Number):
        diagnostics.append(error("BAM208", f"{what} is an amount of money ($ before the number, or µ$), not "
                                 f"{value.unit}", value.span, hint=f"write `${value.value:g}` or `{value.value:g} µ$`"))
        return None
    else:
        diagnostics.append(error("BAM108", f"{what} must be an amount of money, such as $0.05, not "
                                 f"{describe(value)}", value.span))
        return None
    if amount > limit:  # infinity too: `1e999` reads as one
        diagnostics.append(error("BAM210", f"{what} is {as_written}, above the limit of {written(limit)} µ$ "
                                 f"(${limit / 1_000_000:,.0f})", value.span, hint=LIMITS_HINT))
        return None
    if amount <= 0:
        diagnostics.append(error("BAM403", f"{what} must be above zero, not {as_written}", value.span,
                                 hint="leave the budget out for none"))
        return None
    return amount


def _micro_usd(money: ast.Money) -> float:
    """The µ$ of `$0.07`, read from its digits with the decimal point moved, so that it is the float nearest the
    exact amount (70000.0, where 0.07 * 1e6 is 70000.00000000001): the proxy's ledgers add and compare them."""
    mantissa, _, exponent = money.text[1:].replace("_", "").lower().partition("e")
    return float(f"{mantissa}e{int(exponent or 0) + 6}")


def _text(value: ast.Money | ast.Number) -> str:
    return value.text if isinstance(value, ast.Money) or value.unit is None else f"{value.text} {value.unit}"


# ---------------------------------------------------------------- across declarations


def check_keys(program: Program) -> list[Diagnostic]:
    """Each key's team and models are declared, and no two secrets share a variable."""
    diagnostics = []
    # Who reads each variable first: models may share a provider's key, but no key may read one.
    secrets: dict[str, tuple[str, Span]] = {}
    for model in program.models.values():
        if model.api_key_env:
            secrets.setdefault(model.api_key_env, (f"model '{model.name}'", model.spans.get("api_key", model.span)))
    for key in program.keys.values():
        if key.team is not None and key.team not in program.teams:
            diagnostics.append(error("BAM701", f"key '{key.name}' names team '{key.team}', which is not declared",
                                     key.spans["team"], hint=did_you_mean(key.team, program.teams)
                                     or f"declare `team {key.team} {{ budgets = [{WINDOW_EXAMPLE}] }}`"))
        for name, span in zip(key.models, key.item_spans.get("models", ())):
            if name not in program.models:
                diagnostics.append(error("BAM102", f"unknown model '{name}'", span,
                                         hint=did_you_mean(name, program.models)))
        if not key.secret_env:
            continue
        first = secrets.get(key.secret_env)
        if first is not None:
            diagnostics.append(error(
                "BAM704", f"key '{key.name}' reads its secret from ${key.secret_env}, as {first[0]} does",
                key.spans["secret"], Note(f"{first[0]} reads it here", first[1]),
                hint="give each key a variable of its own: a client holding one key must not hold another's, "
                     "nor a provider's",
            ))
            continue
        secrets[key.secret_env] = (f"key '{key.name}'", key.spans["secret"])
    return diagnostics
