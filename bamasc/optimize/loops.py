"""The template MILP's prices for a seat whose role has tools: every round of its loop (combinators/tools.py).

A tool-using call sends its own prompt (its role's text, the task, what it
reads) once per round, R + 1 times, and emits at most its output cap each
time; each round also adds what the loop puts before it (the specs, and every
earlier round's tool calls and results), and the rounds may call tools. So the
builder bills every rate of such a seat R + 1 times (`rounds`, which its
`rates` multiply by, what it reads included), adds per call what the rounds
add beyond its own prompt and the tool calls' price (`loop_cost`), and takes
the seat's rates at its longest round's prompt (`longest_round`), at or above
the rates each round is billed at: the budget row stays at or above the exact
bound (ir/bounds.py), and equal to it on models without price tiers.
"""

from __future__ import annotations


class ToolRounds:
    """Mixed into the template MILP's builder (optimize/template.py), whose `loops`, `cap` and rates it reads."""

    loops: list  # per slot: its role's ToolLoop, or None

    def rounds(self, seat) -> int:
        """How many times a call at `seat` is sent: once, or once per round of its tool loop."""
        loop = self.loops[seat[0]]
        return 1 if loop is None else loop.rounds + 1

    def longest_round(self, seat) -> int:
        """The most a round of a call at `seat` adds to its own prompt (0 without tools)."""
        loop = self.loops[seat[0]]
        return 0 if loop is None else loop.longest_extra(int(self.most_tokens(seat)))

    def loop_cost(self, seat, m: int) -> float:
        """µ$ a tool-using call at `seat` on model m pays beyond its rounds' own prompt and output: the
        tokens its rounds add (ToolLoop.extra_tokens) at its input rate, and its tool calls (0 without tools)."""
        loop = self.loops[seat[0]]
        if loop is None:
            return 0.0
        pricing = self.pool[m].prices()
        rate = pricing.worst_rates(self.most_prompt(seat) if pricing.tiers else 0).input
        return rate * loop.extra_tokens(self.cap[seat[0]][m]) + loop.tool_cost
