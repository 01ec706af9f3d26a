"""A dataset run killed with SIGKILL again and again, then resumed: no task pays twice, none is lost.

The server answers every call with its whole output cap, slowly, so that
calls are in flight whenever the run is killed. The budget fits one run of a
task (its proven bound) but not one and a half: a resume that forgot what a
task had already spent would overrun it. The trace is the only ledger; the
checks read it as a user's tool would.
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time

import pytest

from bamasc.plan.compile import compile_file
from tests.conftest import ROOT
from tests.runtime.servers import Action, openai_server  # noqa: F401 (fixture)
from tests.helpers.runtime import KEY

CHAIN = """
model remote {{
  provider = openai
  name     = "gpt-4o-mini"
  base_url = "{base_url}"
  api_key  = env("BAMASC_TEST_KEY")
  price    {{ input = 0.1  output = 2.0 }}
  tier     = 1
}}
role Solver {{
  max_output = 100
  prompt     = "Solve: {{{{task}}}} {{{{previous?}}}}"
}}
topology chain3 {{
  slot solver : Solver [3..3]
  flow {{ answer chain solver(task) }}
}}
system s {{
  models      = [remote]
  topologies  = [chain3]
  budget      = {budget}
  task_tokens = 20
  answer      = number
}}
"""

TASKS = 12
KILL_AFTER_LINES = (4, 9, 7, 12, 5)  # new trace lines each run may write before it is killed


def verbose(body) -> Action:
    cap = body.get("max_completion_tokens") or body.get("max_tokens")
    words = sum(len(str(m.get("content", "")).split()) for m in body.get("messages", []))
    return Action("slow", delay=0.05, text="#### 7 " + "word " * 10, prompt_tokens=words, completion_tokens=cap)


def write_source(tmp_path, base_url: str) -> tuple[str, float]:
    """The source, with a budget just above one run's proven bound."""
    path = tmp_path / "chain.bam"
    path.write_text(CHAIN.format(base_url=base_url, budget=100_000))
    bound = compile_file(str(path)).plan.systems[0].template("chain3").worst_case_cost
    budget = math.ceil(bound * 1.05)
    path.write_text(CHAIN.format(base_url=base_url, budget=budget))
    return str(path), float(budget)


def trace_lines(path) -> int:
    try:
        with open(path, "rb") as handle:
            return handle.read().count(b"\n")
    except FileNotFoundError:
        return 0


def run_exec(command, env, trace, kill_after: int | None) -> int | None:
    """Run `command`; SIGKILL it once the trace has grown by `kill_after` lines. The exit code, or None if killed."""
    start = trace_lines(trace)
    process = subprocess.Popen(command, env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    while process.poll() is None and time.monotonic() < deadline:
        if kill_after is not None and trace_lines(trace) - start >= kill_after:
            process.send_signal(signal.SIGKILL)
            process.communicate()
            return None
        time.sleep(0.005)
    out, err = process.communicate(timeout=60)
    assert b"Traceback" not in err, err.decode()
    return process.returncode


def test_kill_9_and_resume_never_charges_a_task_past_its_budget(openai_server, tmp_path):
    openai_server.responder = verbose
    source, budget = write_source(tmp_path, openai_server.base_url)
    dataset = tmp_path / "tasks.jsonl"
    dataset.write_text("".join(json.dumps({"id": f"t{i}", "task": f"What is {i} plus 7?"}) + "\n" for i in range(TASKS)))
    trace = tmp_path / "trace.jsonl"
    env = {**os.environ, "BAMASC_TEST_KEY": KEY}
    command = [sys.executable, "-m", "bamasc.cli", "exec", source, "--dataset", str(dataset),
               "--trace", str(trace), "--concurrency", "4"]
    killed = 0
    for kill_after in KILL_AFTER_LINES:
        code = run_exec(command + (["--resume"] if trace.exists() else []), env, trace, kill_after)
        killed += code is None
    assert killed >= 3  # the run was really cut short, more than once
    # A task resumed with too little left ends exhausted or failed (exit 1); every other ends ok.
    assert run_exec(command + ["--resume"], env, trace, None) in (0, 1)

    records = [json.loads(line) for line in trace.read_text(encoding="utf-8").splitlines() if line.strip()]
    finals: dict[str, dict] = {}
    for record in records:
        if record["type"] == "task":
            assert record["task_id"] not in finals, f"two task lines for {record['task_id']}"
            finals[record["task_id"]] = record
    assert sorted(finals) == sorted(f"t{i}" for i in range(TASKS))  # no task lost

    settled = {record.get("id") for record in records if record["type"] == "call"}
    interrupted = 0
    for task_id, final in finals.items():
        charges = sum(r["charged"] for r in records if r["type"] == "call" and r["task_id"] == task_id)
        unsettled = sum(
            r["reserved"] for r in records if r["type"] == "reserve" and r["task_id"] == task_id and r["id"] not in settled
        )
        assert unsettled == 0  # every reservation a kill left open was settled by the next run
        assert charges <= budget + 1e-6, (task_id, charges, budget)
        assert final["cost"] == pytest.approx(charges, abs=1e-3)  # the task line tells the whole spend
        assert not final["overran"]
        assert final["status"] == "ok" or (final["earlier_runs"] > 0 and final["status"] in ("exhausted", "failed"))
        interrupted += final["earlier_runs"] > 0
    assert interrupted >= 1  # some task really was resumed part-way
