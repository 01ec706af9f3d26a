"""`kill -9` a serving `bamasc serve` and restart it on the same trace: the total holds, and every answer is in the trace."""

from __future__ import annotations

import asyncio
import json

import pytest

httpx = pytest.importorskip("httpx")
pytest.importorskip("uvicorn")

from tests.serve.harness import Server, compiled_plan  # noqa: E402

TOTAL = 15_000.0  # µ$: about eight tasks at the plan's 2,000 µ$ each
PER_TASK = 2000.0


def _ledger(path: str) -> tuple[dict, dict, dict]:
    """(charged per task over call lines, open reservations by id, last task line per task)."""
    charged: dict[str, float] = {}
    reserves: dict[str, dict] = {}
    tasks: dict[str, dict] = {}
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            record = json.loads(line)
            if record["type"] == "reserve":
                reserves[record["id"]] = record
            elif record["type"] == "call":
                charged[record["task_id"]] = charged.get(record["task_id"], 0.0) + record["charged"]
                reserves.pop(record.get("id"), None)
            else:
                tasks[record["task_id"]] = record
    return charged, reserves, tasks


def _spent(path: str) -> float:
    charged, open_reservations, _ = _ledger(path)
    return sum(charged.values()) + sum(r["reserved"] for r in open_reservations.values())


async def _fire(server: Server, count: int, stop_after: int | None = None) -> list[dict]:
    """`count` tasks at once; with `stop_after`, the server is killed once that many were answered.
    Returns the answers that came back with 200 or 402."""
    answered: list[dict] = []
    async with httpx.AsyncClient(base_url=server.url, headers=server.headers, timeout=300) as client:
        async def one(n: int) -> None:
            response = await client.post("/v1/tasks", json={"task": f"What is {n} + {n}?"})
            assert response.status_code in (200, 402), response.text
            answered.append({"code": response.status_code, **response.json()})
            if stop_after is not None and len(answered) == stop_after:
                server.kill()

        outcomes = await asyncio.gather(*(one(n) for n in range(count)), return_exceptions=True)
    unexpected = [o for o in outcomes if isinstance(o, BaseException) and not isinstance(o, httpx.TransportError)]
    assert not unexpected, unexpected
    return answered


def test_kill_9_and_restart_keep_the_total_and_every_answer(tmp_path):
    plan = compiled_plan(str(tmp_path))
    # On a loaded machine the kill may land between calls, with nothing in flight: that run proves less, so
    # it is tried again on a fresh trace (the kill with calls in flight is the case under test).
    for attempt in range(4):
        trace = str(tmp_path / f"ledger-{attempt}.jsonl")
        options = ("--fake", "verbose", "--fake-latency", "0.2", "--concurrency", "4", "--total-budget",
                   f"{TOTAL:g}", "--trace", trace)
        first = Server(plan, *options)
        try:
            before = asyncio.run(_fire(first, 12, stop_after=3))
        finally:
            first.kill()
        assert len([a for a in before if a["code"] == 200]) >= 3
        _, left_open, _ = _ledger(trace)
        if left_open:
            break
    assert left_open, "tasks were in flight at the kill: their reservations are in the trace, unsettled"
    spent_at_kill = _spent(trace)
    assert spent_at_kill <= TOTAL

    second = Server(plan, *options)
    try:
        budget = httpx.get(f"{second.url}/v1/budget", headers=second.headers).json()
        # What the killed server charged, and held for calls in flight, counts against the total.
        assert budget["spent"] == pytest.approx(spent_at_kill)
        assert budget["left"] == pytest.approx(TOTAL - spent_at_kill)
        # A task the killed server answered is read back from the trace, its calls included.
        earlier = next(a for a in before if a["code"] == 200)
        shown = httpx.get(f"{second.url}/v1/tasks/{earlier['task_id']}", headers=second.headers).json()
        assert (shown["status"], shown["cost"]) == (earlier["status"], earlier["cost"])
        assert sum(call["charged"] for call in shown["calls"]) == pytest.approx(earlier["cost"])
        after = asyncio.run(_fire(second, 12))
        assert any(a["code"] == 402 and a["status"] == "skipped_total" for a in after), "the total ran out"
    finally:
        assert second.stop() == 0
    assert "Traceback" not in first.log() + second.log()

    charged, left_open, tasks = _ledger(trace)
    assert not left_open, "the restart settled every reservation the kill left open, in full"
    assert sum(charged.values()) <= TOTAL + 1e-6
    assert all(spent <= PER_TASK + 1e-6 for spent in charged.values())
    interrupted = [t for t in tasks.values() if t["status"] == "interrupted"]
    assert interrupted and all(charged.get(t["task_id"], 0) == pytest.approx(t["cost"]) for t in interrupted)
    for answer in before + after:
        line = tasks.get(answer["task_id"])
        assert line is not None, f"task {answer['task_id']} was answered but is not in the trace"
        assert (line["status"], line["answer"]) == (answer["status"], answer["answer"])
        assert line["cost"] == pytest.approx(answer["cost"])
