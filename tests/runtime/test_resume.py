"""The trace as a ledger across runs: what a resume reads, charges and refuses; the guard's overbilling rule."""

from __future__ import annotations

import asyncio
import json
import os
import shutil

import pytest

from bamasc.cli import main
from bamasc.plan.compile import compile_file
from bamasc.runtime.execute import ExecOptions, Task
from bamasc.runtime.workers import run_tasks
from bamasc.metering.guard import BudgetGuard
from bamasc.runtime.trace import TraceError, read_ledgers
from tests.conftest import ROOT, model_declaration

GSM8K = os.path.join(ROOT, "examples", "gsm8k.bam")


# ---------------------------------------------------------------- the guard


def test_usage_within_the_reservation_is_settled_and_the_task_goes_on():
    guard = BudgetGuard(1000)
    held = guard.reserve(model_declaration(price_input=1.0, price_output=2.0), 50, 100)
    guard.settle(held, 50, 100)
    assert guard.overbilled is None and guard.charged == pytest.approx(250)
    assert guard.reserve(model_declaration(price_input=1.0, price_output=2.0), 10, 100) is not None


@pytest.mark.parametrize(
    "prompt, completion, said",
    [(50, 101, "101 completion tokens for a cap of 100"), (51, 10, "51 prompt tokens where 50 were reserved"),
     (50, 10**15, "completion tokens")],
)
def test_usage_beyond_the_reservation_is_charged_as_billed_and_stops_every_later_call(prompt, completion, said):
    guard = BudgetGuard(10**20)
    model = model_declaration(price_input=1.0, price_output=2.0)
    held = guard.reserve(model, 50, 100)
    charge = guard.settle(held, prompt, completion)
    assert charge == pytest.approx(prompt + 2.0 * completion)  # as billed: the ledger tells the truth
    assert said in guard.overbilled
    assert guard.reserve(model, 1, 100) is None  # no further call of this task starts


def test_a_guard_resumed_with_earlier_spend_has_only_the_rest():
    guard = BudgetGuard(300, spent=250)
    assert guard.remaining == pytest.approx(50)
    held = guard.reserve(model_declaration(price_input=0.0, price_output=1.0), 0, 100)
    assert held.max_tokens == 50 and held.clamped


# ---------------------------------------------------------------- reading a trace


def write(tmp_path, *lines: str):
    path = tmp_path / "trace.jsonl"
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return str(path)


def test_a_task_spends_its_charges_and_every_open_reservation(tmp_path):
    path = write(
        tmp_path,
        '{"type": "reserve", "id": "r.1", "task_id": "a", "reserved": 40}',
        '{"type": "call", "id": "r.1", "task_id": "a", "charged": 25}',
        '{"type": "reserve", "id": "r.2", "task_id": "a", "reserved": 60}',  # in flight when the run died
        '{"type": "call", "task_id": "b", "charged": 7}',  # a line of an older trace, without reservations
        '{"type": "task", "task_id": "b"}',
    )
    ledgers = read_ledgers(path)
    assert ledgers["a"].spent == pytest.approx(85) and not ledgers["a"].finished
    assert list(ledgers["a"].open) == ["r.2"]
    assert ledgers["b"].spent == pytest.approx(7) and ledgers["b"].finished


@pytest.mark.parametrize(
    "line, said",
    [
        ("123", "not a trace record (a JSON object), but int 123"),
        ("null", "not a trace record (a JSON object), but NoneType null"),
        ('["task"]', "not a trace record"),
        ('{"type": "task"}', "task line without a task_id"),
        ('{"type": "task", "task_id": 5}', "task line without a task_id"),
        ('{"type": "call", "task_id": "a", "charged": "12"}', 'charged = "12"'),
        ('{"type": "call", "task_id": "a", "charged": -1}', "charged = -1"),
        ('{"type": "call", "task_id": "a", "charged": NaN}', "NaN is not a JSON number"),
        ('{"type": "reserve", "task_id": "a", "id": "x", "reserved": Infinity}', "Infinity is not a JSON number"),
        ('{"type": "reserve", "task_id": "a", "reserved": 3}', "reserve line without an id"),
        ('{"type": "bogus", "task_id": "a"}', 'unknown record type "bogus"'),
        ("[" * 50_000 + "]" * 50_000, "nest more than 64 levels"),
        ("{not json", "not JSON"),
    ],
)
def test_a_line_that_is_no_trace_record_stops_the_resume_with_its_place(tmp_path, line, said):
    path = write(tmp_path, '{"type": "task", "task_id": "a"}', line, '{"type": "task", "task_id": "b"}')
    with pytest.raises(TraceError) as caught:
        read_ledgers(path)
    assert f"{path}:2: " in str(caught.value) and said in str(caught.value)


def test_invalid_utf8_in_a_trace_names_the_line(tmp_path):
    path = tmp_path / "trace.jsonl"
    path.write_bytes(b'{"type": "task", "task_id": "a"}\n{"type": "task", "task_id": "\xff"}\n')
    with pytest.raises(TraceError, match=r"trace.jsonl:2: not UTF-8 \(column 30\)"):
        read_ledgers(str(path))


@pytest.mark.parametrize("line", ["123", "null", '{"type": "task"}'])
def test_exec_resume_on_a_bad_trace_is_an_error_not_a_traceback(tmp_path, capsys, line):
    shutil.copy(GSM8K, tmp_path / "gsm8k.bam")
    data = tmp_path / "tasks.jsonl"
    data.write_text('{"id": "a", "question": "What is 1 plus 1?"}\n')
    trace = write(tmp_path, line, '{"type": "task", "task_id": "zz"}')
    code = main(["exec", str(tmp_path / "gsm8k.bam"), "--dataset", str(data), "--fake", "echo",
                 "--trace", trace, "--resume"])
    err = capsys.readouterr().err
    assert code == 1 and "Traceback" not in err
    assert f"{trace}:1:" in err
    assert open(trace).read().count("\n") == 2  # nothing appended to a trace that could not be read


# ---------------------------------------------------------------- dataset rows


@pytest.mark.parametrize(
    "row, said",
    [
        (b'{"id": "a", "task": "\xff"}', "d.jsonl:2: not UTF-8 (column 22)"),
        (b"[" * 100_000 + b"]" * 100_000, "d.jsonl:2: not a usable row"),
        (b'{"id": ' + b"9" * 5000 + b', "task": "x"}', "d.jsonl:2: not a usable number"),
        (b"123", "d.jsonl:2: a row must be a JSON object"),
    ],
    ids=["utf8", "nesting", "digits", "scalar"],
)
def test_a_bad_dataset_row_is_an_error_with_its_place_or_skipped(tmp_path, capsys, row, said):
    shutil.copy(GSM8K, tmp_path / "gsm8k.bam")
    data = tmp_path / "d.jsonl"
    data.write_bytes(b'{"id": "ok", "task": "What is 1 plus 1?"}\n' + row + b"\n")
    args = ["exec", str(tmp_path / "gsm8k.bam"), "--dataset", str(data), "--fake", "echo"]
    assert main(args) == 1
    err = capsys.readouterr().err
    assert said in err and "Traceback" not in err
    assert main(args + ["--skip-bad-rows"]) == 0
    captured = capsys.readouterr()
    assert "tasks run: 1" in captured.out and said in captured.err


# ---------------------------------------------------------------- resuming through the library


class Broken:
    """A provider with a defect: it raises what no provider should."""

    name = "broken"

    def count_prompt_tokens(self, messages):
        return None

    async def complete(self, messages, max_tokens, *, timeout, decoding=None, expect="text"):
        raise ZeroDivisionError("a defect")

    async def aclose(self):
        pass


def compiled():
    result = compile_file(GSM8K)
    return result.plan, result.program


def test_a_resumed_task_starts_from_what_the_trace_holds_and_settles_open_reservations(tmp_path):
    plan, program = compiled()
    system = plan.systems[0]
    trace = write(
        tmp_path,
        '{"type": "reserve", "id": "old.1", "task_id": "a", "node": "n", "model": "m", "attempt": 1, "reserved": %f}'
        % (system.budget - 1),
    )
    options = ExecOptions(trace_path=trace, resume=True, fake_mode="verbose")
    results, _, _ = asyncio.run(run_tasks(plan, program, None, [Task("a", "What is 2 plus 2?")], options))
    (result,) = results
    # One µ$ was left: not even a useful minimum fits, so nothing more was spent.
    assert result.cost == pytest.approx(system.budget - 1) and result.status in ("failed", "exhausted")
    records = [json.loads(line) for line in open(trace)]
    settled = [r for r in records if r["type"] == "call" and r.get("id") == "old.1"]
    assert len(settled) == 1 and settled[0]["charged"] == pytest.approx(system.budget - 1)
    assert settled[0]["error"].startswith("interrupted")
    assert read_ledgers(trace)["a"].spent == pytest.approx(system.budget - 1)


def test_a_provider_defect_ends_that_task_only_and_every_task_gets_its_line(tmp_path, monkeypatch):
    plan, program = compiled()
    import bamasc.runtime.execute as execute

    monkeypatch.setattr(execute, "make_providers", lambda program, system, options, models=None: {
        name: Broken() for name in program.systems[system].models
    })
    trace = str(tmp_path / "trace.jsonl")
    tasks = [Task(f"t{i}", "What is 2 plus 2?") for i in range(5)]
    results, _, _ = asyncio.run(run_tasks(plan, program, None, tasks, ExecOptions(trace_path=trace)))
    assert [r.status for r in results] == ["error"] * 5
    assert all("unexpected ZeroDivisionError" in r.error for r in results)
    records = [json.loads(line) for line in open(trace)]
    assert sorted(r["task_id"] for r in records if r["type"] == "task") == [t.id for t in tasks]
    calls = [r for r in records if r["type"] == "call"]
    assert calls and all(c["charged"] == c["reserved"] > 0 for c in calls)  # it may have billed: kept whole



def test_a_trace_in_use_by_another_run_is_refused(tmp_path, capsys):
    from bamasc.runtime.trace import TraceWriter

    shutil.copy(GSM8K, tmp_path / "gsm8k.bam")
    data = tmp_path / "tasks.jsonl"
    data.write_text('{"id": "a", "question": "What is 1 plus 1?"}\n')
    trace = str(tmp_path / "trace.jsonl")
    other = TraceWriter(trace)  # another run holds it
    try:
        code = main(["exec", str(tmp_path / "gsm8k.bam"), "--dataset", str(data), "--fake", "echo",
                     "--trace", trace, "--resume"])
        assert code == 1 and "in use by another bamasc run" in capsys.readouterr().err
    finally:
        other.close()
    assert open(trace).read() == ""  # nothing was run, nothing written
    assert main(["exec", str(tmp_path / "gsm8k.bam"), "--dataset", str(data), "--fake", "echo", "--trace", trace]) == 0
