"""What the Python API and `serve` take from a caller: a path, a task with something in it, numbers where the
OpenAPI document says numbers, and a 405 that says which methods a route takes."""

from __future__ import annotations

import asyncio
import pathlib

import pytest

import bamasc
from tests.api.helpers import SOLVER


@pytest.mark.parametrize("path", [123, None, b"solver.bam", ["solver.bam"], 4.5])
def test_load_of_what_is_not_a_path_is_a_usage_error(path):
    with pytest.raises(bamasc.UsageError, match="path"):
        bamasc.load(path)


@pytest.mark.parametrize("task", ["", " ", "\n\t ", "\u3000"])
def test_an_empty_task_is_refused_before_anything_is_charged(tmp_path, task):
    source = tmp_path / "solver.bam"
    source.write_text(SOLVER, encoding="utf-8")
    plan = bamasc.load(pathlib.Path(source)).compile()
    trace = tmp_path / "trace.jsonl"
    with pytest.raises(bamasc.UsageError, match="empty"):
        plan.run_sync(task, provider=bamasc.providers.fake("echo"), trace=str(trace))
    with pytest.raises(bamasc.UsageError, match="empty"):
        plan.run_batch_sync(["What is 1 + 1?", task], provider=bamasc.providers.fake("echo"))
    assert not trace.exists() or trace.read_text(encoding="utf-8") == ""

    async def in_a_session():
        async with plan.session(provider=bamasc.providers.fake("echo")) as session:
            with pytest.raises(bamasc.UsageError, match="empty"):
                await session.run(task)

    asyncio.run(in_a_session())


def test_serve_refuses_null_numbers_and_says_which_methods_a_route_takes(tmp_path):
    httpx = pytest.importorskip("httpx")
    pytest.importorskip("starlette")
    from bamasc.serve.app import Limits, build_app
    from tests.serve.harness import TOKEN, compiled_plan

    plan = bamasc.Plan.load(compiled_plan(str(tmp_path)))
    auth = {"Authorization": f"Bearer {TOKEN}"}

    async def main():
        async with plan.session(provider=bamasc.providers.fake("echo")) as session:
            app = build_app(plan, session, TOKEN.encode(), Limits())
            async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test") as client:
                for field in ("budget", "deadline_s"):
                    reply = await client.post("/v1/tasks", headers=auth, json={"task": "What is 2 + 2?", field: None})
                    assert reply.status_code == 422 and reply.json()["error"]["field"] == field, reply.text
                wrong = await client.delete("/v1/tasks", headers=auth)
                assert wrong.status_code == 405 and wrong.headers["allow"] == "POST"
                assert (await client.post("/v1/tasks", headers=auth, json={"task": "What is 2 + 2?"})).status_code == 200

    asyncio.run(main())
