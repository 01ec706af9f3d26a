"""Run-time test kit: a trace that collects its lines, the wire and rate-limit programs, and batch trace readers."""

from __future__ import annotations

import json
import os

from bamasc.plan.compile import compile_file
from bamasc.runtime.retry import RetryPolicy
from bamasc.runtime.trace import TraceWriter
from tests.helpers import ROOT


class Collect(TraceWriter):
    def __init__(self):
        super().__init__(None)
        self.calls, self.tasks = [], []

    def call(self, record):
        self.calls.append(record)

    def task(self, record):
        self.tasks.append(record)


KEY = "sk-test-never-printed-0123456789"


def program_for(tmp_path, provider: str, base_url: str):
    source = f"""
model remote {{
  provider = {provider}
  name     = "{'gpt-4o-mini' if provider == 'openai' else 'claude-3-5-haiku'}"
  base_url = "{base_url}"
  api_key  = env("BAMASC_TEST_KEY")
  price    {{ input = 0.5  output = 2.0 }}
  tier     = 1
}}
role Solver {{
  max_output = 64
  prompt     = "Solve: {{{{task}}}}"
}}
topology single {{
  slot solver : Solver [1..1]
  flow {{ answer solver(task) }}
}}
system s {{
  models     = [remote]
  topologies = [single]
  budget     = 400
  answer     = number
}}
"""
    path = tmp_path / "wire.bam"
    path.write_text(source)
    result = compile_file(str(path))
    assert result.plan is not None, [d.message for d in result.diagnostics]
    return result.plan, result.program


GSM8K = os.path.join(ROOT, "examples", "gsm8k.bam")


def charged(trace: str) -> float:
    """What the trace says the batch was charged: every call line's charge, every open reservation in full."""
    total, open_ = 0.0, {}
    for line in open(trace, encoding="utf-8"):
        if not line.endswith("\n"):
            continue
        record = json.loads(line)
        if record["type"] == "reserve":
            open_[record["id"]] = record["reserved"]
        elif record["type"] == "call":
            total += record["charged"]
            open_.pop(record.get("id"), None)
    return total + sum(open_.values())


def task_lines(trace: str) -> list[dict]:
    return [r for r in map(json.loads, open(trace, encoding="utf-8")) if r["type"] == "task"]


WINDOW = 3.0  # seconds the server and the limiter count a "minute" over
RETRY = RetryPolicy(max_attempts=4, base_delay=0.05, max_delay=WINDOW, jitter=0.0, timeout=5.0)


def compiled(tmp_path, provider: str, base_url: str, rate_limit: str = "", extra: str = "", system: str = ""):
    # A model id with no offline tokenizer: the client bounds prompts by their bytes, as the server counts them.
    source = f"""
model remote {{
  provider = {provider}
  name     = "local-model"
  base_url = "{base_url}"
  api_key  = env("BAMASC_TEST_KEY")
  price    {{ input = 0.5  output = 2.0 }}
  tier     = 1
  {rate_limit}
  {extra}
}}
role Solver {{
  max_output = 64
  prompt     = "Solve: {{{{task}}}}"
}}
topology single {{
  slot solver : Solver [1..1]
  flow {{ answer solver(task) }}
}}
system s {{
  models     = [remote]
  topologies = [single]
  budget     = 1000
  answer     = text
  {system}
}}
"""
    path = tmp_path / "limits.bam"
    path.write_text(source)
    result = compile_file(str(path))
    assert result.plan is not None, [d.message for d in result.diagnostics]
    return result.plan, result.program
