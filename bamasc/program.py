"""The checked program: typed declarations resolved from the AST of every loaded module."""

from __future__ import annotations

import os
from types import MappingProxyType

from bamasc.prices import Pricing
from bamasc.records import record
from bamasc.source import Span
from bamasc.syntax import ast

NO_SPANS = MappingProxyType({})
NO_TOOLS = MappingProxyType({})
NO_KEYS = MappingProxyType({})
NO_TEAMS = MappingProxyType({})

READS = ("text", "answer", "verdict", "plan", "code")
ANSWER_KINDS = ("number", "code", "boxed", "text", "json")  # json: the object a role with `output` replies
SELECTIONS = ("strongest", "cheapest", "policy")
ON_EXHAUSTED = ("best_so_far", "fail")
# When a task's budget is checked: before each call, by reserving its worst case (the default), or after
# it, stopping once spending reaches the budget (the BAMAS reference's check; metering/guard.py).
BUDGET_CHECKS = ("before", "after", "none")
# Checks that let a task pass its budget (never its bound): the reference's, and a baseline's recorded run.
UNGUARDED_CHECKS = frozenset({"after", "none"})
# What the binder maximises: seats of the strongest tiers first (the BAMAS paper's order), or the sum over
# seats of the role's weight times the model's quality for it (docs/language.md, "How the compiler binds").
OBJECTIVES = ("tiers", "value")

# Defaults a system gets when it does not say (documented in docs/language.md).
DEFAULT_TASK_TOKENS = 500
DEFAULT_MIN_AGENTS = 1

# What a tool and a role's tool loop get when they do not say (docs/language.md, "Tools").
TOOL_KINDS = ("python", "mcp")
DEFAULT_TOOL_TIMEOUT_S = 10.0
DEFAULT_MAX_SPEC_TOKENS = 400  # a tool spec the source does not fix (an MCP tool's, or one derived from type hints)
DEFAULT_MAX_TOOL_CALLS = 1

# The periods of a key's or a team's budget windows (docs/language.md, "Keys and teams"): metering/windows.py's
# PERIODS, which a test holds to the same list.
WINDOW_PERIODS = ("30s", "1m", "1h", "1d", "7d", "1mo")
# What `bamasc proxy` does with a key's call that its budgets cannot afford: refuse it, or answer it itself.
KEY_ON_EXHAUSTED = ("refuse", "answer")


@record
class DecodingSettings:
    """Decoding a model or role declares; None is not declared (a role's value overrides its model's)."""

    temperature: float | None = None
    top_p: float | None = None
    seed: int | None = None
    stop: tuple[str, ...] | None = None

    def over(self, base: DecodingSettings) -> DecodingSettings:
        """These settings, with `base` filling what they leave undeclared."""
        return DecodingSettings(
            *(mine if mine is not None else theirs for mine, theirs in zip(
                (self.temperature, self.top_p, self.seed, self.stop),
                (base.temperature, base.top_p, base.seed, base.stop),
            ))
        )


NO_DECODING = DecodingSettings()


@record
class Latency:
    """How long a model takes to answer, as its `latency { }` block declares (an upper bound, in seconds)."""

    first_token_s: float  # from sending the request to the first output token
    per_output_token_s: float  # for each further output token (1 / tokens_per_s)


@record
class RateLimit:
    """What a provider lets one key send to one model, as a `rate_limit { }` block declares; None is not declared."""

    requests_per_minute: int | None = None
    tokens_per_minute: int | None = None  # prompt plus max_tokens of each call, as the budget guard reserves them


@record
class Model:
    name: str
    provider: str
    model_id: str
    price_input: float  # USD per million input tokens
    price_output: float  # USD per million output tokens
    tier: int  # 1 is the strongest
    base_url: str | None
    api_key_env: str | None
    max_output: int | None
    context: int | None
    tokenizer: str | None
    quality: dict[str, float]  # per role name; roles not listed get default_quality
    default_quality: float
    span: Span
    spans: dict[str, Span] = NO_SPANS
    decoding: DecodingSettings = NO_DECODING
    latency: Latency | None = None  # None: the model declares none, so no deadline can be proven on it
    pricing: Pricing | None = None  # every rate (cache, tiers); None: price_input and price_output alone
    rate_limit: RateLimit | None = None  # None: none declared (the provider's headers may still set one at run time)
    # `fallback = [a, b]`: models a call goes to, in order, when this model's provider keeps failing
    # (docs/language.md, "Fallbacks"); the spans of the names as written.
    fallbacks: tuple[str, ...] = ()
    fallback_spans: tuple[Span, ...] = ()

    def prices(self) -> Pricing:
        """The model's price model; price_input and price_output are its base rates."""
        return self.pricing if self.pricing is not None else Pricing(self.price_input, self.price_output)

    def quality_for(self, role: str) -> float:
        return self.quality.get(role, self.default_quality)


@record
class Tool:
    """A `tool` declaration: one Python callable, or the tools of one MCP server (docs/language.md, "Tools")."""

    name: str
    kind: str  # TOOL_KINDS: "python" | "mcp"
    target: str  # "module:name" (python), or the command line that starts the server (mcp)
    description: str | None  # what the model is told it does; an MCP server describes its own tools
    parameters: dict | None  # the JSON Schema of its arguments; None: derived from type hints, or the server's
    allow: tuple[str, ...]  # mcp: the server's tools a role may name as `NAME.tool`
    max_result: int  # tokens a result is cut to (marker included)
    timeout_s: float  # the longest one call may take
    price: float  # µ$ per call
    span: Span
    spans: dict[str, Span] = NO_SPANS
    max_spec: int = DEFAULT_MAX_SPEC_TOKENS  # tokens of a spec the source does not fix (name, description, schema)


@record
class Role:
    name: str
    prompt: str
    system: str | None
    max_output: int | None  # the largest cap of a range `max_output = lo..hi`
    reads: str
    span: Span
    spans: dict[str, Span] = NO_SPANS
    decoding: DecodingSettings = NO_DECODING
    tools: tuple[str, ...] = ()  # as written: "lookup_order", "files.read_file"
    max_tool_rounds: int = 0  # model calls that may ask for tools, before one final call without; 0: no tools
    max_tool_calls: int = DEFAULT_MAX_TOOL_CALLS  # tool calls one round may ask for
    output_schema: dict | None = None  # `output = json("""...""")`: the JSON Schema its reply must hold to
    item_spans: dict[str, tuple[Span, ...]] = NO_SPANS  # "tools": the span of each name in `tools`
    # What the bound of its calls needs of its tools (combinators/tools.ToolLoop), resolved once every
    # tool is read (check/tools.py); None when it has none.
    loop: object = None
    # `max_output = lo..hi`: lo, the smallest cap the binder may pick for a seat (optimize/caps.py); None: fixed.
    min_output: int | None = None
    weight: float | None = None  # what a seat of it is worth under `objective = value`; None: the default rule
    # `history = N`: the most tokens of a thread's earlier turns `{{history}}` shows (cut to it before the call;
    # every call's input bound counts it); None: the role shows no history.
    history: int | None = None


@record
class Slot:
    name: str
    role: str
    lo: int
    hi: int
    span: Span
    role_span: Span


@record
class Topology:
    name: str
    slots: tuple[Slot, ...]
    requires: tuple[ast.RequireDecl, ...]
    flow: tuple[ast.Bind | ast.AnswerStmt, ...]
    span: Span
    file: str

    def slot(self, name: str) -> Slot | None:
        return next((s for s in self.slots if s.name == name), None)


@record
class Selection:
    kind: str  # strongest | cheapest | policy
    path: str | None = None


@record
class RewardConstants:
    """The policy's reward (docs/policy.md): task_weight * (success or failure) + budget_weight *
    (efficiency * (1 - cost/budget) on a success within the budget, minus overflow past it);
    `infeasible` for a template with no binding at the budget."""

    success: float = 1.0
    failure: float = -1.0
    overflow: float = 2.0
    efficiency: float = 0.5
    infeasible: float | None = None  # None: the failure reward
    task_weight: float = 1.0
    budget_weight: float = 1.0


DEFAULT_REWARD = RewardConstants()


@record
class System:
    name: str
    models: tuple[str, ...]
    topologies: tuple[str, ...]
    budget: float | None  # µ$ per task
    budgets: tuple[float, ...]  # µ$; budgets to sweep, benchmark and collect at
    task_tokens: int
    min_agents: int
    answer: str
    select: Selection
    on_exhausted: str
    span: Span
    spans: dict[str, Span] = NO_SPANS
    item_spans: dict[str, tuple[Span, ...]] = NO_SPANS
    reward: RewardConstants = DEFAULT_REWARD  # constants for training a policy (the `reward` block)
    deadline: float | None = None  # seconds per task; None: no deadline
    budget_check: str = "before"  # BUDGET_CHECKS; "after" or "none" only where the system says so
    # `task_tokens = [256, 1024, 4096]`: every length class, ascending; `task_tokens` is the first. () for one.
    length_classes: tuple[int, ...] = ()

    @property
    def classes(self) -> tuple[int, ...]:
        """The task lengths (tokens) the compiler binds each template for, ascending."""
        return self.length_classes or (self.task_tokens,)
    objective: str = "tiers"  # OBJECTIVES: what the binder maximises

    def checkpoint_path(self) -> str | None:
        """The file `select = policy("PATH")` names, relative to the file that declares the system."""
        if not self.select.path:
            return None
        return os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(self.span.file)), self.select.path))


@record
class WindowBudget:
    """`window(amount, "per")`: at most `amount` spent in each window of the period `per` (metering/windows.py)."""

    amount: float  # µ$
    per: str  # WINDOW_PERIODS


@record
class Team:
    """A `team` declaration: budgets that every key naming the team spends from together."""

    name: str
    budgets: tuple[WindowBudget, ...]
    span: Span
    spans: dict[str, Span] = NO_SPANS


@record
class Key:
    """A `key` declaration: a client key of `bamasc proxy`, what it may call and what it may spend."""

    name: str
    secret_env: str  # the environment variable that holds the key's secret ("" only in a program with errors)
    team: str | None  # the team whose budgets it also spends from
    scope_budget: float | None  # µ$: the most one scope (X-Bamasc-Task) of its requests may have; None: no ceiling
    budgets: tuple[WindowBudget, ...]  # its own windows
    models: tuple[str, ...]  # the models it may call, by their names in the file; (): every model
    on_exhausted: str  # KEY_ON_EXHAUSTED
    span: Span
    spans: dict[str, Span] = NO_SPANS
    item_spans: dict[str, tuple[Span, ...]] = NO_SPANS  # "models": the span of each name


@record
class Program:
    """Everything declared across the root file and its imports, by name, in source order."""

    models: dict[str, Model]
    roles: dict[str, Role]
    topologies: dict[str, Topology]
    systems: dict[str, System]
    root_files: tuple[str, ...]
    source_texts: dict[str, str]  # every file the program was built from, as read (its bytes: `.encode()`)
    tools: dict[str, Tool] = NO_TOOLS  # `tool` declarations by name
    teams: dict[str, Team] = NO_TEAMS  # `team` declarations by name (bamasc proxy's budgets)
    keys: dict[str, Key] = NO_KEYS  # `key` declarations by name (bamasc proxy's client keys)

    def with_fallbacks(self, names) -> list[str]:
        """`names` and every fallback each one names (those a run may call, and so must make providers for),
        each once, sorted; a name the program does not declare is left as it is, for its caller to refuse."""
        found = set(names)
        for name in list(found):
            model = self.models.get(name)
            found.update(model.fallbacks if model is not None else ())
        return sorted(found)
