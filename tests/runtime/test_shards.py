"""Trace shards merged into their trace: grouped by task id, every line kept, a torn last line dropped, a shard
in use refused."""

from __future__ import annotations

import json

import pytest

from bamasc.runtime.shards import merge_shards, shard_path, shards_of
from bamasc.runtime.trace import TraceError, TraceWriter, read_ledgers


def _line(kind: str, task: str, **fields) -> str:
    return json.dumps({"type": kind, "task_id": task, **fields}) + "\n"


def test_shards_merge_by_task_keeping_every_line(tmp_path):
    trace = str(tmp_path / "run.jsonl")
    first, second = shard_path(trace, 0), shard_path(trace, 10)
    with open(first, "w") as handle:
        handle.write(_line("reserve", "a", id="r.1", reserved=5.0) + _line("reserve", "b", id="r.2", reserved=7.0)
                     + _line("call", "a", id="r.1", charged=2.0) + _line("call", "b", id="r.2", charged=3.0)
                     + _line("task", "b", status="ok") + _line("task", "a", status="ok"))
    with open(second, "w") as handle:
        handle.write(_line("reserve", "c", id="s.1", reserved=9.0) + '{"type": "call", "task_id": "c", "cha')
    (tmp_path / "run.jsonl.shard-x").write_text("not a shard of this run")
    assert shards_of(trace) == [first, second]  # by number, and only numbered ones
    writer = TraceWriter(trace)
    assert sum(map(len, merge_shards(writer, shards_of(trace)).values())) == 7
    writer.close()
    tasks = [json.loads(line)["task_id"] for line in open(trace)]
    assert tasks == ["a", "a", "a", "b", "b", "b", "c"]
    ledgers = read_ledgers(trace)
    assert ledgers["a"].charged == 2.0 and ledgers["b"].finished and ledgers["c"].spent == 9.0  # open: in full
    assert shards_of(trace) == [] and (tmp_path / "run.jsonl.shard-x").exists()


def test_a_shard_still_written_is_not_taken(tmp_path):
    trace = str(tmp_path / "run.jsonl")
    live = TraceWriter(shard_path(trace, 0))  # a runner still writing it
    live.task({"task_id": "a", "status": "ok"})
    writer = TraceWriter(trace)
    with pytest.raises(TraceError, match="in use"):
        merge_shards(writer, shards_of(trace))
    writer.close()
    live.close()
    assert shards_of(trace) == [shard_path(trace, 0)] and open(trace).read() == ""


def test_a_merge_cut_short_by_a_kill_is_finished_once_by_the_next(tmp_path):
    """A run killed after appending part of its shards, before removing them: the next merge adds only the rest."""
    trace = str(tmp_path / "run.jsonl")
    lines = [_line("reserve", "a", id="r.1", reserved=5.0), _line("call", "a", id="r.1", charged=2.0),
             _line("reserve", "a", id="r.2", reserved=6.0), _line("task", "a", status="ok")]
    with open(shard_path(trace, 0), "w") as handle:
        handle.writelines(lines)
    with open(trace, "w") as handle:
        handle.writelines(lines[:2] + [lines[2][:20]])  # the kill came in the middle of the third line
    writer = TraceWriter(trace)
    merge_shards(writer, shards_of(trace))
    writer.close()
    assert open(trace).readlines() == lines
    assert read_ledgers(trace)["a"].spent == pytest.approx(2.0 + 6.0)


def test_a_local_resume_counts_a_killed_ray_runs_shards(tmp_path):
    """Shards a killed Ray run left are merged by the local engine before it reads the trace."""
    import asyncio

    from bamasc.plan.compile import compile_file
    from bamasc.runtime.execute import ExecOptions, Task
    from bamasc.runtime.workers import run_tasks
    from tests.helpers.runtime import GSM8K

    compiled = compile_file(GSM8K)
    trace = str(tmp_path / "trace.jsonl")
    with open(shard_path(trace, 3), "w") as handle:  # q0 was in flight with the whole budget but 1 µ$ reserved
        handle.write(_line("reserve", "q0", id="dead.1", node="n", model="m", attempt=1,
                           reserved=compiled.plan.systems[0].budget - 1))
    options = ExecOptions(fake_mode="verbose", trace_path=trace, resume=True)
    results, _, _ = asyncio.run(run_tasks(compiled.plan, compiled.program, None, [Task("q0", "What is 1 plus 1?")],
                                          options))
    assert shards_of(trace) == [] and results[0].cost == pytest.approx(compiled.plan.systems[0].budget - 1)
    assert read_ledgers(trace)["q0"].open == {}  # its open reservation was settled, in full
