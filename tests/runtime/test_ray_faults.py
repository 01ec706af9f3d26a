"""`--engine ray` with its parts killed: a runner actor, the ledger actor and the driver, each with `kill -9` in
the middle of a run, then resumed with both engines. Whatever died, the trace is one ledger: every task's
charges stay within its budget and every run's within its total, as the provider billed them too; each task
ends with one final line; no reservation is left open; no run prints a traceback.

The runs are `bamasc exec` processes joining one local Ray instance started here; an honest local server
answers every call at its full output cap, slowly enough that calls are in flight at each kill, and counts
what it billed each task.
"""

from __future__ import annotations

import glob
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time

import pytest

from tests.conftest import ROOT
from tests.runtime.servers import Action, ScriptedServer
from tests.helpers.runtime import KEY

ray = pytest.importorskip("ray", reason="Ray is not installed (the ray extra)")
if not sys.platform.startswith("linux"):
    pytest.skip("actor processes are found by their titles in /proc", allow_module_level=True)

SOURCE = """
model remote {{
  provider = openai
  name     = "gpt-4o-mini"
  base_url = "{base_url}"
  api_key  = env("BAMASC_TEST_KEY")
  price    {{ input = 0.1  output = 2.0 }}
  tier     = 1
}}
role Solver {{
  max_output = 400
  prompt     = "Solve: {{{{task}}}} {{{{previous?}}}}"
}}
topology chain {{
  slot solver : Solver [1..3]
  flow {{ answer chain solver(task) }}
}}
system s {{
  models      = [remote]
  topologies  = [chain]
  budget      = 3000
  budgets     = [1000, 3000]
  task_tokens = 20
  answer      = number
}}
"""
BUDGET = 3000.0
TASKS = 16
FINAL_STATUSES = ("ok", "exhausted", "failed", "overbilled")


class HonestServer:
    """Bills what it reports (the prompt's words and the whole output cap) at the source's prices, per task."""

    def __init__(self) -> None:
        self.billed: dict[str, float] = {}
        self.lock = threading.Lock()
        self.server = ScriptedServer("openai")
        self.server.responder = self.answer

    def answer(self, body) -> Action:
        cap = body.get("max_completion_tokens") or body.get("max_tokens")
        text = " ".join(str(m.get("content", "")) for m in body.get("messages", []))
        words = len(text.split())
        task = "t" + re.search(r"task (\d+)", text).group(1)
        with self.lock:
            self.billed[task] = self.billed.get(task, 0.0) + 0.1 * words + 2.0 * cap
        return Action("slow", delay=0.15, text="#### 7 " + "word " * 10, prompt_tokens=words, completion_tokens=cap)


@pytest.fixture(scope="module")
def cluster():
    """A local Ray instance whose workers have the test's API key, and its address for the runs to join."""
    from bamasc.runtime.ray_engine import RayUnavailable, start_ray

    saved = os.environ.get("BAMASC_TEST_KEY")
    os.environ["BAMASC_TEST_KEY"] = KEY  # actor processes take the environment the instance starts with
    try:
        started = start_ray(None, 2)
    except RayUnavailable as problem:
        pytest.skip(f"Ray cannot start here: {problem}")
    finally:
        if saved is None:
            del os.environ["BAMASC_TEST_KEY"]
        else:
            os.environ["BAMASC_TEST_KEY"] = saved
    yield ray.get_runtime_context().gcs_address
    if started:
        ray.shutdown()


def _pids(title: str) -> list[int]:
    """Processes whose title (Ray names an actor's process `ray::Class` or `ray::Class.method`) starts so."""
    found = []
    for path in glob.glob("/proc/[0-9]*/cmdline"):
        try:
            with open(path, "rb") as handle:
                command = handle.read().split(b"\0")[0].decode(errors="replace")
        except OSError:
            continue
        if command == title or command.startswith(title + ".") or command.startswith(title + " "):
            found.append(int(path.split("/")[2]))
    return found


def _lines(trace: str) -> int:
    """Lines written so far to the trace and its shards."""
    count = 0
    for path in [trace, *glob.glob(trace + ".shard-*")]:
        try:
            with open(path, "rb") as handle:
                count += handle.read().count(b"\n")
        except FileNotFoundError:
            pass
    return count


class Batch:
    def __init__(self, tmp_path, address: str, server: HonestServer) -> None:
        self.trace = str(tmp_path / "trace.jsonl")
        self.server = server
        source = tmp_path / "s.bam"
        source.write_text(SOURCE.format(base_url=server.server.base_url))
        data = tmp_path / "tasks.jsonl"
        data.write_text("".join(json.dumps({"id": f"t{i}", "task": f"What is task {i} plus 7?"}) + "\n"
                                for i in range(TASKS)))
        self.command = [sys.executable, "-m", "bamasc.cli", "exec", str(source), "--dataset", str(data),
                        "--trace", self.trace, "--concurrency", "3"]
        self.ray = ["--engine", "ray", "--actors", "2", "--ray-address", address]
        self.env = {**os.environ, "BAMASC_TEST_KEY": KEY}

    def run(self, total: float, *, ray_engine: bool, resume: bool, kill: str | None = None,
            after_lines: int = 0) -> tuple[int | None, str, str]:
        """One `exec`; with `kill`, the process of that title (`ray::Runner`, `ray::Ledger`) or the driver
        (`driver`) is sent SIGKILL once the trace and its shards have grown by `after_lines`."""
        command = [*self.command, "--total-budget", f"{total:g}", *(self.ray if ray_engine else []),
                   *(["--resume"] if resume else [])]
        start = _lines(self.trace)
        process = subprocess.Popen(command, cwd=ROOT, env=self.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        if kill is not None:
            deadline = time.monotonic() + 180
            while process.poll() is None and _lines(self.trace) - start < after_lines and time.monotonic() < deadline:
                time.sleep(0.01)
            if process.poll() is not None:
                raise AssertionError(f"the run ended before the kill: {process.communicate()[1].decode()[-2000:]}")
            if kill == "driver":
                process.send_signal(signal.SIGKILL)
            else:
                victims = _pids(kill)
                assert victims, f"no {kill} process"
                os.kill(victims[0], signal.SIGKILL)
        out, err = process.communicate(timeout=300)
        out, err = out.decode(), err.decode()
        assert "Traceback" not in err and "Traceback" not in out, err
        return (None if kill == "driver" else process.returncode), out, err

    def records(self) -> list[dict]:
        with open(self.trace, encoding="utf-8") as handle:
            return [json.loads(line) for line in handle if line.endswith("\n")]

    def check(self, total: float, *, whole: bool = False) -> dict:
        """The ledger's promises over every trace line (and shard left): per task and per batch, as the
        provider billed them too; with `whole`, every task has ended and no reservation is open."""
        records = self.records()
        for shard in glob.glob(self.trace + ".shard-*"):
            with open(shard, encoding="utf-8") as handle:
                records += [json.loads(line) for line in handle if line.endswith("\n")]
        spent: dict[str, float] = {}
        open_: dict[str, tuple[str, float]] = {}
        finals: dict[str, int] = {}
        for record in records:
            task = record["task_id"]
            if record["type"] == "reserve":
                open_[record["id"]] = (task, record["reserved"])
            elif record["type"] == "call":
                spent[task] = spent.get(task, 0.0) + record["charged"]
                open_.pop(record.get("id"), None)
            elif record["status"] in FINAL_STATUSES:
                finals[task] = finals.get(task, 0) + 1
        for task, reserved in open_.values():
            spent[task] = spent.get(task, 0.0) + reserved  # an attempt nobody saw end: charged in full
        for task, amount in spent.items():
            assert amount <= BUDGET + 1e-6, (task, amount)
        assert sum(spent.values()) <= total + 1e-6
        for task, amount in self.server.billed.items():
            assert amount <= spent.get(task, 0.0) + 1e-6, (task, amount)  # the trace holds all that was billed
        assert all(count == 1 for count in finals.values()), finals  # no task finished twice
        if whole:
            assert sorted(finals) == sorted(f"t{i}" for i in range(TASKS))  # none lost
            assert not open_  # every reservation a kill left open was settled by a resume
        return spent


def test_kill_9_of_a_runner_the_ledger_and_the_driver_then_resumes_on_both_engines(cluster, tmp_path):
    server = HonestServer()
    server.server.start()
    try:
        batch = Batch(tmp_path, cluster, server)
        # A runner dies: the driver goes on with the other, and its tasks in flight are marked interrupted.
        code, out, _ = batch.run(12_000, ray_engine=True, resume=False, kill="ray::Runner", after_lines=12)
        assert code == 1 and "interrupted" in out
        assert not glob.glob(batch.trace + ".shard-*")  # merged, the dead runner's too
        batch.check(12_000)
        interrupted = [r for r in batch.records() if r["type"] == "task" and r["status"] == "interrupted"]
        assert interrupted and all(r["cost"] >= r["earlier_runs"] for r in interrupted)

        # The ledger dies: tasks running end under their guards, no other starts, the run says so.
        code, _, err = batch.run(24_000, ray_engine=True, resume=True, kill="ray::Ledger", after_lines=6)
        assert code == 1 and "stopped early" in err and "ledger" in err
        assert not glob.glob(batch.trace + ".shard-*")
        batch.check(24_000)

        # The driver dies: its actors go with it and leave their shards, which the local resume merges first.
        batch.run(36_000, ray_engine=True, resume=True, kill="driver", after_lines=6)
        batch.check(36_000)
        code, _, _ = batch.run(42_000, ray_engine=False, resume=True)
        assert code in (0, 1, 3) and not glob.glob(batch.trace + ".shard-*")
        batch.check(42_000)

        # A Ray resume with room for every task finishes the batch; a local one then finds nothing to do.
        final = TASKS * BUDGET
        code, _, _ = batch.run(final, ray_engine=True, resume=True)
        assert code in (0, 1)  # 1: a task resumed with too little left ends `failed`
        code, out, _ = batch.run(final, ray_engine=False, resume=True)
        assert code in (0, 1) and "nothing to run" in out
        spent = batch.check(final, whole=True)
        last = {r["task_id"]: r for r in batch.records() if r["type"] == "task"}
        for task, line in last.items():
            assert line["cost"] == pytest.approx(spent[task], abs=1e-3)  # the task line tells the whole spend
            assert line["overran"] is False
        assert any(line["earlier_runs"] > 0 for line in last.values())  # some task really was resumed part-way
    finally:
        server.server.close()
