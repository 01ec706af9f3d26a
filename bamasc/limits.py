"""The largest numbers a program may hold, shared by the checks, the compiler and the command line.

Each limit sits far above any real use and far enough below where floating
point or the solver gives out that every bound computed from values within
them stays finite, and every number handed to HiGHS stays inside the range it
takes as exact (below 1e15 in its matrix, 1e20 in bounds and costs). The
language reference lists them (docs/language.md, "Limits").
"""

from __future__ import annotations

# USD per million tokens: $1 a token, a thousand times the dearest model sold today.
MAX_PRICE = 1_000_000.0
# µ$ per task, for `budget`, `budgets` and --budget, and per scope for a key's `scope_budget`: one million dollars.
MAX_BUDGET = 1e12
# µ$ per window, for a key's or a team's `budgets` (docs/language.md, "Keys and teams"): a billion dollars,
# and every whole number of µ$ up to it is exact in a float.
MAX_WINDOW_BUDGET = 1e15
# Tokens, for max_output, context and task_tokens: ten million, beyond every context window.
MAX_TOKENS = 10_000_000
# Seats, for min_agents: more than any template that binds in reasonable time can seat.
MAX_MIN_AGENTS = 10_000
# Task length classes of a system (`task_tokens = [...]`): the compiler binds every template once per class.
MAX_LENGTH_CLASSES = 16
# Tier levels: 1 is the strongest; pools use a handful.
MAX_TIER = 1_000
# Quality weights: 1.0 is the default; the solver compares totals to within 1e-7.
MAX_QUALITY = 1_000.0
# Role weights (`objective = value`): a seat is worth weight x quality, compared to within 1e-7 too.
MAX_WEIGHT = 1_000.0
# Constants and coefficients of require rows, whose counts never exceed a few thousand seats.
MAX_REQUIRE_CONSTANT = 1_000_000
# Slot-count combinations of one template (the product of its slots' ranges) that the binder
# enumerates when a template's values cannot be summarised per statement.
MAX_COUNT_VECTORS = 4096
# Slot-count combinations of the slots one flow statement names: the binder unrolls the statement
# at each, so lint refuses more (BAM503) before compile has to.
MAX_STATEMENT_UNITS = 4096
# A plan's steps, and a conversation's rounds and turns: a conversation's turn k reads turns 1..k-1,
# so its reads grow with the square of its turns.
MAX_STEPS = 64
MAX_ROUNDS = 16
MAX_TURNS = 256
# A role's tool loop: rounds that may ask for tools, tool calls per round, and tools it names. Round k
# re-sends every earlier round, so its prompts grow with the square of its rounds.
MAX_TOOL_ROUNDS = 64
MAX_TOOL_CALLS = 64
MAX_TOOLS = 128
# Seconds, for a model's `latency` (first token, and per output token), a system's `deadline` and a tool's
# `timeout`: one day.
MAX_SECONDS = 86_400.0
# A model's `tokens_per_s`: a billion, far past any server.
MAX_TOKENS_PER_S = 1e9
# A model's `rate_limit`, requests or tokens per minute: a billion, far past any provider's tier.
MAX_PER_MINUTE = 1e9
# The policy's reward constants, by absolute value; the defaults are 1, -1, 2 and 0.5.
MAX_REWARD = 1_000_000.0


def written(limit: float) -> str:
    """A limit as a message prints it: `1000000`, or `1e9`, `1e12` from a billion up."""
    return f"{limit:.0e}".replace("e+0", "e").replace("e+", "e") if limit >= 1e9 else f"{int(limit)}"
