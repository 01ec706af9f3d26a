"""`key` and `team` declarations (the client keys of `bamasc proxy`): the records the proxy reads, every
located diagnostic of a bad one, imports, the formatter, and nothing changed for files without them."""

from __future__ import annotations

import pytest

from bamasc.check.keys import KEY_ATTRIBUTES
from bamasc.diagnostics import CODES, render_github, render_json, render_sarif, render_text
from bamasc.fmt import format_source
from bamasc.lint import lint_paths
from bamasc.loader import load
from bamasc.check import check
from bamasc.program import KEY_ON_EXHAUSTED, WINDOW_PERIODS, Key, Team, WindowBudget
from tests.conftest import EXAMPLES
from tests.fmt.roundtrip import check_round_trip

MODEL = """\
model mini {
  provider = openai
  name     = "gpt-4.1-mini"
  api_key  = env("OPENAI_API_KEY")
  price    { input = 0.40  output = 1.60 }
  tier     = 1
}
"""
TEAM = """\
team cx {
  budgets = [window($50, "1d"), window($1000, "1mo")]
}
"""
KEY = """\
key support_bot {
  secret       = env("SUPPORT_BOT_KEY")
  team         = cx
  scope_budget = $0.05
  budgets      = [window($20, "1d")]
  models       = [mini]
  on_exhausted = answer
}
"""
CONFIG = MODEL + "\n" + TEAM + "\n" + KEY
KEY_LITERAL = "sk-0123456789abcdef0123456789abcdef"


def checked(write_bam, text: str, **files: str):
    for name, body in files.items():
        write_bam(body, name)
    path = write_bam(text)
    program, diagnostics = check(load(path))
    return program, diagnostics


# ---------------------------------------------------------------- the records


def test_a_config_gives_the_proxy_its_keys_and_teams(write_bam):
    program, diagnostics = checked(write_bam, CONFIG)
    assert diagnostics == []
    assert program.teams == {"cx": Team("cx", (WindowBudget(50_000_000, "1d"), WindowBudget(1_000_000_000, "1mo")),
                                        program.teams["cx"].span, program.teams["cx"].spans)}
    key = program.keys["support_bot"]
    assert isinstance(key, Key)
    assert (key.name, key.secret_env, key.team, key.scope_budget) == ("support_bot", "SUPPORT_BOT_KEY", "cx", 50_000)
    assert key.budgets == (WindowBudget(20_000_000, "1d"),)
    assert (key.models, key.on_exhausted) == (("mini",), "answer")
    assert (key.span.line, key.span.col) == (CONFIG.count("\n", 0, CONFIG.index("key support_bot")) + 1, 5)


def test_a_declared_key_is_the_key_the_admin_api_makes_from_the_same_json(write_bam):
    from bamasc.metering.keys import KeyPolicy, TeamPolicy, Window, read_key, read_team

    program, _ = checked(write_bam, CONFIG)
    key, team = program.keys["support_bot"], program.teams["cx"]
    # What `bamasc proxy` builds from the records (cli/proxy.py), and what its admin routes read from JSON.
    declared_key = KeyPolicy(key.name, key.team, key.scope_budget, tuple(Window(b.amount, b.per) for b in key.budgets),
                             key.models, key.on_exhausted)
    declared_team = TeamPolicy(team.name, tuple(Window(b.amount, b.per) for b in team.budgets))
    assert declared_key == read_key({"name": "support_bot", "team": "cx", "scope_budget": 50000,
                                     "budgets": [{"amount": 20000000, "per": "1d"}], "models": ["mini"],
                                     "on_exhausted": "answer"}, {"mini"})
    assert declared_team == read_team({"name": "cx", "budgets": [{"amount": 50000000, "per": "1d"},
                                                                 {"amount": 1000000000, "per": "1mo"}]})


def test_a_key_needs_only_its_secret(write_bam):
    program, diagnostics = checked(write_bam, 'key bare { secret = env("BARE_KEY") }\n')
    assert diagnostics == []
    key = program.keys["bare"]
    assert (key.team, key.scope_budget, key.budgets, key.models) == (None, None, (), ())
    assert key.on_exhausted == "refuse" == KEY_ON_EXHAUSTED[0]
    assert program.teams == {}


@pytest.mark.parametrize("written, micro_usd", [
    ("$0.07", 70_000), ("$0.05", 50_000), ("70000", 70_000), ("70000 µ$", 70_000), ("$1e-2", 10_000),
    ("$1_000.5", 1_000_500_000), ("$0.000001", 1), ("0.5", 0.5),
])
def test_amounts_are_the_nearest_float_to_the_written_money(write_bam, written, micro_usd):
    # `$0.07` times a million is 70000.00000000001 in floats; the ledgers add and compare these amounts.
    program, diagnostics = checked(write_bam, f'key k {{ secret = env("K")  scope_budget = {written}\n'
                                              f'  budgets = [window({written}, "1h")] }}\n')
    assert diagnostics == []
    assert program.keys["k"].scope_budget == micro_usd
    assert program.keys["k"].budgets == (WindowBudget(micro_usd, "1h"),)


def test_every_period_reads_and_one_window_needs_no_brackets(write_bam):
    windows = ", ".join(f'window(${n + 1}, "{per}")' for n, per in enumerate(WINDOW_PERIODS))
    program, diagnostics = checked(write_bam, f"team all {{ budgets = [{windows}] }}\nteam one {{ budgets = window($5, \"7d\") }}\n")
    assert diagnostics == []
    assert [budget.per for budget in program.teams["all"].budgets] == list(WINDOW_PERIODS)
    assert [budget.amount for budget in program.teams["all"].budgets] == [1e6 * (n + 1) for n in range(len(WINDOW_PERIODS))]
    assert program.teams["one"].budgets == (WindowBudget(5_000_000, "7d"),)


def test_the_periods_are_the_metering_windows():
    from bamasc.metering.windows import PERIODS, check_per

    assert WINDOW_PERIODS == tuple(PERIODS)
    assert all(check_per(per) == per for per in WINDOW_PERIODS)


def test_files_without_keys_have_none():
    for path in EXAMPLES:
        program, _ = check(load(path))
        assert (program.keys, program.teams) == ({}, {}), path


# ---------------------------------------------------------------- imports


def test_a_key_or_team_from_an_imported_file_works_like_any_declaration(write_bam):
    shared = MODEL + "\n" + TEAM
    program, diagnostics = checked(write_bam, 'import "pool.bam"\n\n' + KEY, **{"pool.bam": shared})
    assert diagnostics == []
    assert program.keys["support_bot"].team == "cx" and program.teams["cx"].span.file.endswith("pool.bam")
    # Names stay shared across files: a team declared again is BAM101, at the second declaration.
    _, diagnostics = checked(write_bam, 'import "pool.bam"\n\n' + TEAM, **{"pool.bam": shared})
    assert [(d.code, d.span.line, d.span.col) for d in diagnostics] == [("BAM101", 3, 6)]
    assert diagnostics[0].notes[0].span.file.endswith("pool.bam")


def test_a_key_in_an_imported_file_is_checked_against_the_whole_program(write_bam):
    keys = KEY.replace("team         = cx", "team         = sales")
    _, diagnostics = checked(write_bam, 'import "keys.bam"\n' + MODEL, **{"keys.bam": keys})
    assert [(d.code, d.span.file.rsplit("/", 1)[-1], d.span.line) for d in diagnostics] == [("BAM701", "keys.bam", 3)]


# ---------------------------------------------------------------- located diagnostics

GOOD = {
    "secret": 'env("SUPPORT_BOT_KEY")', "team": "cx", "scope_budget": "50000 µ$",
    "budgets": '[window($20, "1d")]', "models": "[mini]", "on_exhausted": "answer",
}
# (attribute, bad value, code, the text the diagnostic points at): one bad attribute at a time in an
# otherwise valid key. A window's cases also run in a team's budgets.
WINDOWS = [
    ('window($5, "1day")', "BAM702", '"1day"'),
    ('window($5, "1M")', "BAM702", '"1M"'),
    ('window($5, oneday)', "BAM702", "oneday"),
    ('window($5, 1)', "BAM702", "1"),
    ('window("1d", $5)', "BAM702", 'window("1d", $5)'),
    ('window($5)', "BAM702", "window($5)"),
    ('window($5, "1d", "1h")', "BAM702", 'window($5, "1d", "1h")'),
    ('windows($5, "1d")', "BAM702", 'windows($5, "1d")'),
    ("$5", "BAM702", "$5"),
    ('[window($5, "1d")]', "BAM702", '[window($5, "1d")]'),
    ('window($0, "1d")', "BAM403", "$0"),
    ('window(-3, "1d")', "BAM403", "-3"),
    ('window($1e-400, "1d")', "BAM403", "$1e-400"),
    ('window($1e999, "1d")', "BAM210", "$1e999"),
    ('window(2e15, "1d")', "BAM210", "2e15"),
    ('window(5 $/Mtok, "1d")', "BAM208", "5 $/Mtok"),
    ('window(5 tokens, "1d")', "BAM208", "5 tokens"),
    ('window("5", "1d")', "BAM108", '"5"'),
    ('window(five, "1d")', "BAM108", "five"),
]
CASES = [
    ("secret", f'"{KEY_LITERAL}"', "BAM205", f'"{KEY_LITERAL}"'),
    ("secret", "SUPPORT_BOT_KEY", "BAM108", "SUPPORT_BOT_KEY"),
    ("secret", "env(SUPPORT_BOT_KEY)", "BAM108", "env(SUPPORT_BOT_KEY)"),
    ("secret", 'env("A", "B")', "BAM108", 'env("A", "B")'),
    ("secret", 'secret("SUPPORT_BOT_KEY")', "BAM108", 'secret("SUPPORT_BOT_KEY")'),
    ("secret", 'env("SUPPORT-BOT-KEY")', "BAM211", '"SUPPORT-BOT-KEY"'),
    ("secret", f'env("{KEY_LITERAL}")', "BAM211", f'"{KEY_LITERAL}"'),
    ("secret", 'env("OPENAI_API_KEY")', "BAM704", 'env("OPENAI_API_KEY")'),
    ("team", '"cx"', "BAM108", '"cx"'),
    ("team", "[cx]", "BAM108", "[cx]"),
    ("team", "sales", "BAM701", "sales"),
    ("scope_budget", "$0", "BAM403", "$0"),
    ("scope_budget", "-5", "BAM403", "-5"),
    ("scope_budget", "$1e999", "BAM210", "$1e999"),
    ("scope_budget", "1e13", "BAM210", "1e13"),
    ("scope_budget", "5 $/Mtok", "BAM208", "5 $/Mtok"),
    ("scope_budget", '"$0.05"', "BAM108", '"$0.05"'),
    ("scope_budget", "[$0.05]", "BAM108", "[$0.05]"),
    ("budgets", "7", "BAM108", "7"),
    ("budgets", '"1d"', "BAM108", '"1d"'),
    ("budgets", '[window($20, "1d"), window($30, "1d")]', "BAM703", 'window($30, "1d")'),
    ("models", "[]", "BAM108", "[]"),
    ("models", "[mini, maxi]", "BAM102", "maxi"),
    ("models", '["mini"]', "BAM108", '"mini"'),
    ("on_exhausted", "fail", "BAM110", "fail"),
    ("on_exhausted", "best_so_far", "BAM110", "best_so_far"),
    ("on_exhausted", '"refuse"', "BAM108", '"refuse"'),
    ("colour", "blue", "BAM106", "colour"),
    ("secret", None, "BAM107", "support_bot"),
    *(("budgets", f"[{window}]", code, at) for window, code, at in WINDOWS),
    *(("budgets", window, code, at) for window, code, at in WINDOWS if window.startswith("window")),  # a list of one
]
TEAM_CASES = [
    *((f"budgets = [{window}]", code, at) for window, code, at in WINDOWS),
    ('budgets = [window($50, "1d"), window($60, "1d")]', "BAM703", 'window($60, "1d")'),
    ("members = [support_bot]", "BAM106", "members"),
    ("budgets { daily = $50 }", "BAM108", "budgets { daily = $50 }"),
]


def _key(attribute: str, value: str | None) -> str:
    lines = [f"  {name} = {GOOD[name]}" for name in KEY_ATTRIBUTES if name != attribute]
    if value is not None:
        lines.append(f"  {attribute} = {value}")
    return "key support_bot {\n" + "\n".join(lines) + "\n}\n"


def _located(write_bam, source: str, code: str, at: str, start: int = 0):
    """Lint `source`; its one diagnostic has `code` and starts where `at` is written (once from `start`)."""
    assert source.count(at, start) == 1, f"{at!r} must be written once"
    result = lint_paths([write_bam(source)])
    (diagnostic,) = result.diagnostics
    index = source.index(at, start)
    line, col = source.count("\n", 0, index) + 1, index - source.rfind("\n", 0, index)
    assert (diagnostic.code, diagnostic.span.line, diagnostic.span.col) == (code, line, col), diagnostic.message
    assert diagnostic.message and diagnostic.severity == "error"
    for text in (render_text(result.diagnostics, result.sources), render_json(result.diagnostics, ["main.bam"]),
                 render_sarif(result.diagnostics), render_github(result.diagnostics)):
        assert KEY_LITERAL[8:20] not in text  # a secret written in the file is never printed back
    return diagnostic


@pytest.mark.parametrize("attribute, value, code, at", CASES, ids=lambda v: str(v)[:24])
def test_each_bad_key_attribute_is_one_located_diagnostic(write_bam, attribute, value, code, at):
    source = MODEL + "\n" + TEAM + "\n" + _key(attribute, value)
    _located(write_bam, source, code, at, start=source.index("key support_bot"))


@pytest.mark.parametrize("line, code, at", TEAM_CASES, ids=lambda v: str(v)[:24])
def test_each_bad_team_attribute_is_one_located_diagnostic(write_bam, line, code, at):
    _located(write_bam, f"team cx {{\n  {line}\n}}\n", code, at)


def test_the_cases_cover_every_code_of_keys_and_teams():
    shown = {code for _, _, code, _ in CASES} | {code for _, code, _ in TEAM_CASES}
    assert {code for code in CODES if code.startswith("BAM7")} <= shown
    assert {"BAM102", "BAM106", "BAM107", "BAM108", "BAM110", "BAM205", "BAM208", "BAM210", "BAM211", "BAM403"} <= shown


def test_two_keys_may_not_share_a_secret(write_bam):
    source = 'key a { secret = env("SHARED") }\nkey b { secret = env("SHARED") }\nkey c { secret = env("OWN") }\n'
    diagnostic = _located(write_bam, source, "BAM704", 'env("SHARED") }\nkey c')
    assert (diagnostic.notes[0].span.line, diagnostic.notes[0].span.col) == (1, 18)


def test_an_unclosed_key_is_named_in_the_syntax_error(write_bam):
    result = lint_paths([write_bam('key support_bot {\n  secret = env("K")\n\nteam cx { }\n')])
    (diagnostic,) = result.diagnostics
    assert diagnostic.code == "BAM002" and "key block 'support_bot'" in diagnostic.message
    assert (diagnostic.span.line, diagnostic.notes[0].span.line) == (4, 1)


# ---------------------------------------------------------------- the formatter


def test_fmt_lays_keys_and_teams_out_canonically():
    messy = ('key   support_bot{secret=env("SUPPORT_BOT_KEY")\nteam=cx   // the support team\n'
             'budgets=[window($20,"1d"),\nwindow(  $500 ,"1mo")]}\nteam cx{budgets=[window($50,"1d")]}')
    formatted = format_source(messy)
    assert formatted == (
        "key support_bot {\n"
        '  secret = env("SUPPORT_BOT_KEY")\n'
        "  team   = cx  // the support team\n"
        "  budgets = [\n"
        '    window($20, "1d"),\n'
        '    window($500, "1mo"),\n'
        "  ]\n"
        "}\n"
        "\n"
        'team cx { budgets = [window($50, "1d")] }\n'
    )
    check_round_trip(messy, formatted)


def test_fmt_round_trips_the_config():
    assert format_source(CONFIG) == CONFIG
    check_round_trip(CONFIG, format_source(CONFIG))
