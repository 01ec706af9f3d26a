"""The tool loop: what the language knows about a call whose role has tools, and its worst case.

A call of a role with tools (R = `max_tool_rounds`, C = `max_tool_calls`, cap =
the call's output cap) makes up to R + 1 model calls, its *rounds*, on its seat
and under its one node id:

- rounds 0..R-1 are sent with the tools' specs and may each ask for up to C
  tool calls; round R, the final one, is sent without tools;
- round k's prompt is the call's own prompt (its role's text, the task and the
  outputs it reads, as for any call), plus S, the specs' tokens (k < R), plus
  for each earlier round its tool-call message (at most cap tokens) and its C
  results (each at most the largest `max_result` of the role's tools, plus
  RESULT_FRAMING);
- every round emits at most cap tokens, and the call's answer is the text of
  the last round made, so a call that reads it reads at most cap tokens.

So the call's worst case is the sum over its rounds of each one's worst case,
priced at the rates its own prompt could be billed at (a tier it may cross
included), plus R × C tool calls at the dearest tool's price; its worst-case
latency is R + 1 attempts one after another plus R rounds of tool calls, each
round's calls running together, so each as long as the longest timeout. A
role without tools has no loop, and its calls are bounded as before.

Sizes are bounded the way every prompt is (ir/tokens.py): a byte is at least a
token. The runtime sends what this module bounds and refuses what it cannot
bound: a spec the source does not fix (an MCP tool's, or one derived from type
hints) longer than its `max_spec`, a result longer than its `max_result`.
"""

from __future__ import annotations

from bamasc.prices import Pricing
from bamasc.program import Role, Tool
from bamasc.records import record

# A tool result re-sent in a later round's prompt, beyond its text: its message's framing (8), a share of
# the assistant message that asked for it (8; a round asks for at least one call), the call's id, which
# both the call and its result carry (2 × 40 bytes: the providers' ids are about 30), and the tool's name
# (64 bytes, the providers' limit for a function's name).
RESULT_FRAMING = 160
# One tool's spec beyond the bytes of its name, description and parameters: the JSON or text that wraps
# them in any provider's form (`{"type": "function", "function": {"name": ..., "description": ...,
# "parameters": ...}}` is 63 bytes around them).
TOOL_SPEC_FRAMING = 64
# A prompt sent with tools, once: the instructions a provider adds for calling them (Anthropic's tool-use
# system prompt is 264 to 530 tokens by model; OpenAI's namespace around the functions, some tens).
TOOLS_FRAMING = 600


def canonical_json(value) -> str:
    """A schema as the bound counts it and the runtime sends it: compact, keys sorted."""
    import json

    return json.dumps(value, separators=(",", ":"), sort_keys=True, ensure_ascii=False)


def spec_bytes(name: str, description: str | None, parameters: dict | None) -> int:
    """The UTF-8 bytes of one tool's spec as the model sees it: its name, description and parameters."""
    text = name + (description or "") + (canonical_json(parameters) if parameters is not None else "")
    return len(text.encode("utf-8"))


def fixed_spec(tool: Tool) -> bool:
    """Does the source fix the tool's whole spec (a python tool with its `parameters`)? Else `max_spec` bounds it."""
    return tool.kind == "python" and tool.parameters is not None


def spec_tokens(tool: Tool) -> int:
    """The tokens one of the tool's specs may take in a prompt, its framing included."""
    if fixed_spec(tool):
        return spec_bytes(tool.name, tool.description, tool.parameters) + TOOL_SPEC_FRAMING
    return tool.max_spec + TOOL_SPEC_FRAMING


def output_schema_tokens(schema: dict) -> int:
    """The tokens a structured output adds to each prompt of its role: the schema, sent as one tool would be
    (an Anthropic model is made to answer through a forced tool), with that tool's framing."""
    return len(canonical_json(schema).encode("utf-8")) + TOOL_SPEC_FRAMING + TOOLS_FRAMING


@record
class ToolLoop:
    """A tool-using role's loop, as its bound needs it (this module's docstring)."""

    rounds: int  # R: rounds that may ask for tools; one final round follows without them
    calls: int  # C: tool calls one round may ask for
    spec_tokens: int  # S: the specs sent with each round but the last, TOOLS_FRAMING included
    result_tokens: int  # the most one tool result takes in a later prompt: the largest max_result + RESULT_FRAMING
    price: float  # µ$ of the dearest tool call
    timeout_s: float  # the longest a tool call may take
    tools: tuple[str, ...]  # the tools as the role names them

    def round_tokens(self, k: int, cap: int) -> int:
        """What round k's prompt holds beyond the call's own prompt."""
        specs = self.spec_tokens if k < self.rounds else 0
        return specs + k * (cap + self.calls * self.result_tokens)

    def prompts(self, own: int, cap: int) -> tuple[int, ...]:
        """The prompt bound of each round, 0..R, of a call whose own prompt is at most `own` tokens."""
        return tuple(own + self.round_tokens(k, cap) for k in range(self.rounds + 1))

    def extra_tokens(self, cap: int) -> int:
        """Σ over the rounds of what each adds to the call's own prompt: R·S + R(R+1)/2 · (cap + C · result)."""
        return sum(self.round_tokens(k, cap) for k in range(self.rounds + 1))

    def longest_extra(self, cap: int) -> int:
        """The most any one round adds to the call's own prompt."""
        return max(self.round_tokens(k, cap) for k in range(self.rounds + 1))

    @property
    def tool_cost(self) -> float:
        """µ$ of the tool calls a call may make: R rounds of C calls at the dearest price."""
        return self.rounds * self.calls * self.price

    def cost(self, pricing: Pricing, own: int, cap: int) -> tuple[float, float, float]:
        """(input µ$, output µ$, µ$ per token of the call's own prompt) over every round: each round at the
        dearest rates a prompt of its length could be billed (`Pricing.worst_cost`). The last is what
        a token the call reads costs, sent once per round."""
        input_cost = output_cost = per_token = 0.0
        for prompt in self.prompts(own, cap):
            rates = pricing.worst_rates(prompt)
            input_cost += rates.input * prompt + pricing.per_request
            output_cost += rates.output * cap
            per_token += rates.input
        return input_cost, output_cost, per_token

    def latency_s(self, attempt_s: float) -> float:
        """R + 1 attempts of `attempt_s` one after another, and between them R rounds of tool calls."""
        return (self.rounds + 1) * attempt_s + self.rounds * self.timeout_s


def build_loop(role: Role, tools: list[Tool]) -> ToolLoop:
    """The loop of `role`, whose `tools` name `tools` (one entry per name, in order; an MCP server's entry
    once per tool of it the role names)."""
    specs = sum(spec_tokens(tool) for tool in tools)
    return ToolLoop(
        rounds=role.max_tool_rounds,
        calls=role.max_tool_calls,
        spec_tokens=TOOLS_FRAMING + specs,
        result_tokens=max(tool.max_result for tool in tools) + RESULT_FRAMING,
        price=max(tool.price for tool in tools),
        timeout_s=max(tool.timeout_s for tool in tools),
        tools=role.tools,
    )
