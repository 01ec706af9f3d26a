"""A scope's budget in the trace: the `budget` line written when a request sets or tightens it, read back by a
restart, accepted by every trace reader as a line that moves no money; and what a trace holds under lost
ledgers, by run (metering/redis_ledger.py's `lost_runs`), on a hand-computed trace."""

from __future__ import annotations

import asyncio
import json

import pytest

from bamasc.metering.afford import Cost
from bamasc.metering.ledger import LocalLedger, scope_limits
from bamasc.metering.redis_ledger import lost_runs
from bamasc.metering.refusals import BudgetExhausted
from bamasc.runtime.trace import TraceError, TraceWriter, read_ledgers

CALL = Cost(input_cost=10.0, output_rate=1.0, choices=1, requested=100)


def _lines(path) -> list[dict]:
    return [json.loads(line) for line in open(path, encoding="utf-8")]


def test_a_budget_set_or_tightened_is_written_before_the_answer_and_kept_by_a_restart(tmp_path):
    path = str(tmp_path / "trace.jsonl")

    async def first_run():
        ledger = LocalLedger(trace=TraceWriter(path))
        hold = await ledger.reserve("s", 1000.0, "m", CALL)
        await ledger.close(hold, 110.0, {})
        await ledger.reserve("s", 2000.0, "m", CALL)  # a looser budget is no change: no line
        with pytest.raises(BudgetExhausted):
            await ledger.reserve("s", 150.0, "m", CALL)  # tightened below what is spent and held: refused
        ledger.trace.close()  # the process dies here

    asyncio.run(first_run())
    assert [(line["type"], line.get("budget")) for line in _lines(path) if line["type"] == "budget"] == \
        [("budget", 1000.0), ("budget", 150.0)]
    assert scope_limits(path) == {"s": (150.0, None)}

    async def second_run():
        ledger = LocalLedger(trace=TraceWriter(path), earlier=read_ledgers(path), limits=scope_limits(path))
        with pytest.raises(BudgetExhausted) as refused:
            await ledger.reserve("s", 5000.0, "m", CALL)
        ledger.trace.close()
        return refused.value.error

    assert "of its budget of 150 µ$" in asyncio.run(second_run())
    assert sum(line["type"] == "budget" for line in _lines(path)) == 2  # the restart's 5000 changed nothing


def test_every_trace_reader_takes_a_budget_line_as_moving_no_money(tmp_path):
    path = tmp_path / "trace.jsonl"
    records = [
        {"type": "budget", "run": "r", "task_id": "s", "budget": 500},
        {"type": "reserve", "id": "r.1", "task_id": "s", "model": "m", "reserved": 40.0, "budget": 500},
        {"type": "call", "id": "r.1", "task_id": "s", "model": "m", "provider": "openai", "model_id": "gpt-4.1-mini",
         "reserved": 40.0, "charged": 25.0, "prompt_tokens": 5, "completion_tokens": 10},
        {"type": "budget", "run": "r", "task_id": "refused-only", "budget": 20},
    ]
    path.write_text("".join(json.dumps(record) + "\n" for record in records), encoding="utf-8")
    ledgers = read_ledgers(str(path))
    assert ledgers["s"].spent == 25.0 and not ledgers["s"].finished
    assert ledgers["refused-only"].spent == 0.0 and not ledgers["refused-only"].finished
    for bad in (-1, "500", None):
        path.write_text(json.dumps({"type": "budget", "task_id": "s", "budget": bad}) + "\n", encoding="utf-8")
        with pytest.raises(TraceError, match=r"trace.jsonl:1: budget line with budget"):
            read_ledgers(str(path))


def test_a_trace_with_budget_lines_exports_a_span_per_attempt(tmp_path):
    pytest.importorskip("opentelemetry.sdk", reason="the otel extra is not installed")
    from bamasc.runtime.otel import build_spans, read_records

    path = tmp_path / "trace.jsonl"
    records = [
        {"type": "budget", "run": "r", "task_id": "s", "budget": 500},
        {"type": "reserve", "id": "r.1", "task_id": "s", "model": "m", "reserved": 40.0},
        {"type": "call", "id": "r.1", "task_id": "s", "model": "m", "provider": "openai", "model_id": "gpt-4.1-mini",
         "reserved": 40.0, "charged": 25.0, "prompt_tokens": 5, "completion_tokens": 10},
        {"type": "budget", "run": "r", "task_id": "refused-only", "budget": 20},
    ]
    path.write_text("".join(json.dumps(record) + "\n" for record in records), encoding="utf-8")
    names = sorted(span.name for span in build_spans(read_records(str(path))))
    assert names == ["chat gpt-4.1-mini", "invoke_agent", "invoke_workflow"]  # nothing for the scope that only had a budget


def test_what_a_trace_holds_under_lost_ledgers_is_counted_per_run(tmp_path):
    """Hand-computed: run a spent under the lost epoch OLD, run b under the live one NOW, run c under none."""
    path = tmp_path / "trace.jsonl"
    records = [
        {"type": "budget", "run": "a", "task_id": "s", "budget": 900, "epoch": "OLD"},
        {"type": "reserve", "id": "a.1", "task_id": "s", "reserved": 300.0, "budget": 900, "epoch": "OLD"},
        {"type": "call", "id": "a.1", "task_id": "s", "reserved": 300.0, "charged": 120.5, "epoch": "OLD"},
        {"type": "reserve", "id": "a.2", "task_id": "s", "reserved": 200.0, "budget": 900, "epoch": "OLD"},
        {"type": "reserve", "id": "a.3", "task_id": "t", "reserved": 50.0, "budget": 700, "epoch": "OLD"},
        {"type": "call", "id": "a.3", "task_id": "t", "reserved": 50.0, "charged": 80.0, "epoch": "OLD",
         "error": "overbilled: m billed 80 completion tokens for a cap of 40"},
        {"type": "budget", "run": "a", "task_id": "s", "budget": 400, "epoch": "OLD"},
        {"type": "reserve", "id": "b.1", "task_id": "s", "reserved": 999.0, "budget": 400, "epoch": "NOW"},
        {"type": "reserve", "id": "c.1", "task_id": "s", "reserved": 10.0, "budget": 650},
        {"type": "call", "id": "c.1", "task_id": "s", "reserved": 10.0, "charged": 7.25},
    ]
    path.write_text("".join(json.dumps(record) + "\n" for record in records) + '{"type": "call", "id"',
                    encoding="utf-8")  # and a torn last line
    runs = {run.member: run for run in lost_runs([str(path)], "NOW")}
    assert runs == {run.member: run for run in lost_runs([str(path), str(path)], "NOW")}  # a trace given twice
    assert set(runs) == {"OLD/a", "/c"}
    # a.1 charged 120.5, a.2 open (200 in full); t's overbilled call charged 80
    assert runs["OLD/a"].spent == {"s": 320.5, "t": 80.0}
    assert runs["OLD/a"].limits == {"s": (400.0, None), "t": (700.0, "m billed 80 completion tokens for a cap of 40")}
    assert runs["/c"].spent == {"s": 7.25} and runs["/c"].limits == {"s": (650.0, None)}
