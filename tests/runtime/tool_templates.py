"""Random tool-using templates for the tool loop's tests, and a run of one template's task on providers given.

Each source has python tools (a module written beside it, whose tools answer
with exactly their `max_result` bytes, or, hostile, with far more, an error,
non-ASCII text or a hang past a short timeout), one or two fake models (with
a long-prompt tier now and then), and a role with random R, C and output cap.
A second, plain call before the tool-using one sometimes feeds it.
"""

from __future__ import annotations

import asyncio
import json
import random

from bamasc.plan.compile import compile_file
from bamasc.metering.guard import BudgetGuard
from bamasc.runtime.interpreter import TaskRun
from bamasc.runtime.retry import RetryPolicy
from bamasc.runtime.tools import ToolSet

NO_WAIT = RetryPolicy(max_attempts=1, base_delay=0.0, max_delay=0.0, timeout=30.0)
PARAMETERS = {"type": "object", "properties": {"q": {"type": "string", "description": "what to look up"}},
              "required": ["q"]}
TASK_TOKENS = 40
HOSTILE = (
    "    return 'é' * {n} + 'r' * 1_000_003\n",  # far past its limit, and not ASCII
    "    raise RuntimeError('down: ' + 'x' * 100_000)\n",
    "    import time\n    time.sleep(2)\n    return 'late'\n",  # past its 0.2 s timeout
    "    return {{'rows': ['r' * 50] * {n}}}\n",  # JSON, longer than its limit
)


def tools_source(rng: random.Random, module: str, chained: bool, hostile: bool = False) -> tuple[str, str]:
    """(the .bam source, the python module of its tools)."""
    count = rng.randint(1, 3)
    results = sorted(rng.choice([16, 40, 90, 200, 500]) for _ in range(count))
    # The dearest tool is also the one with the largest result, so one tool is the worst on both counts.
    prices = sorted(rng.choice([0, 0, 5, 20, 75]) for _ in range(count))
    tools, code = [], ["from __future__ import annotations\n\n"]
    for i, (limit, price) in enumerate(zip(results, prices)):
        timeout = "0.2 s" if hostile else "5 s"
        tools.append(
            f"tool t{i} {{\n  python = \"{module}:t{i}\"\n  description = \"Look something up, way {i}\"\n"
            f"  parameters = \"\"\"{json.dumps(PARAMETERS)}\"\"\"\n  max_result = {limit} tokens\n"
            f"  timeout = {timeout}\n  price = {price}\n}}\n"
        )
        body = rng.choice(HOSTILE).format(n=limit) if hostile else f"    return 'r' * {limit}\n"
        code.append(f"def t{i}(q: str):\n{body}\n\n")
    models = []
    for m in range(rng.randint(1, 2)):
        rates = rng.choice([0.5, 1.0, 3.0]), rng.choice([2.0, 5.0, 15.0])
        # A long prompt's tier at twice the rates (a cheaper one is billed below the dearest rates the bound holds).
        above = rng.choice([300, 900, 2000])
        tier = rng.choice(["", f"  long_prompt {{ above = {above}  input = {2 * rates[0]}  output = {2 * rates[1]} }}"])
        models.append(
            f"model m{m} {{\n  provider = fake\n  name = \"m{m}\"\n"
            f"  price {{ input = {rates[0]}  output = {rates[1]}\n{tier} }}\n  tier = 1\n}}\n"
        )
    rounds, calls = rng.randint(1, 4), rng.randint(1, 3)
    cap = rng.choice([32, 64, 150, 400])
    names = ", ".join(f"t{i}" for i in range(count))
    reads = " Notes: {{notes}}" if chained else ""
    roles = (
        f"role Agent {{\n  tools = [{names}]\n  max_tool_rounds = {rounds}\n  max_tool_calls = {calls}\n"
        f"  max_output = {cap}\n  prompt = \"Answer it: {{{{task}}}}{reads}\"\n}}\n"
        "role Writer {\n  max_output = 48\n  prompt = \"Write notes on: {{task}}\"\n}\n"
    )
    flow = "notes = writer(task)\n    answer agent(task, notes)" if chained else "answer agent(task)"
    slots = "  slot agent : Agent [1..1]\n" + ("  slot writer : Writer [1..1]\n" if chained else "")
    source = (
        "".join(tools) + "".join(models) + roles
        + f"topology t {{\n{slots}  flow {{\n    {flow}\n  }}\n}}\n"
        + f"system s {{\n  models = [{', '.join(f'm{m}' for m in range(len(models)))}]\n  topologies = [t]\n"
        + f"  budget = 100000000\n  task_tokens = {TASK_TOKENS}\n}}\n"
    )
    return source, "".join(code)


def compiled(tmp_path, source: str, module: str, code: str):
    """(program, system plan, its one template) of `source`, its tools' module written beside it."""
    (tmp_path / f"{module}.py").write_text(code)
    path = tmp_path / "t.bam"
    path.write_text(source)
    result = compile_file(str(path))
    assert result.plan is not None, [d.message for d in result.diagnostics]
    system = result.plan.systems[0]
    (template,) = [t for t in system.templates if t.feasible]
    return result.program, system, template


def run_task(program, system, template, providers, budget: float, task: str = "t" * TASK_TOKENS, trace=None,
             base_dir: str | None = None, retry: RetryPolicy = NO_WAIT):
    """One task on `template` with its tools started: (the TaskResult, its guard)."""

    async def main():
        guard = BudgetGuard(budget)
        async with ToolSet(program.tools.values(), base_dir=base_dir) as tools:
            run = TaskRun(program, system, template, providers, guard, "t", task, trace, retry, tools=tools)
            return await run.run(), guard

    return asyncio.run(main())


class Lines:
    """A trace that keeps its lines: reserve, call and tool."""

    def __init__(self) -> None:
        self.lines: list[dict] = []
        self.number = 0

    def reserve(self, record: dict) -> str:
        self.number += 1
        self.lines.append({"type": "reserve", "id": str(self.number), **record})
        return str(self.number)

    def call(self, record: dict) -> None:
        self.lines.append({"type": "call", **record})

    def tool(self, record: dict) -> None:
        self.lines.append({"type": "tool", **record})

    def of(self, kind: str) -> list[dict]:
        return [line for line in self.lines if line["type"] == kind]
