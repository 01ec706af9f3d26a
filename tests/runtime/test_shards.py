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
