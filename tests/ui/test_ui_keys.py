"""`/ui/summary.json` on `bamasc serve` with the proxy fleet's client keys: a key sees the tasks it sent, never
another key's; the token's holder sees them all; anyone else gets 401."""

from __future__ import annotations

import asyncio
import json
import time

import pytest

httpx = pytest.importorskip("httpx")
pytest.importorskip("starlette", reason="the serve extra (starlette, uvicorn) is not installed")
pytest.importorskip("redis", reason="the redis client library (the proxy extra) is not installed")

import bamasc  # noqa: E402
from bamasc.metering.keys import KeyPolicy  # noqa: E402
from bamasc.metering.redis_keys import RedisKeyStore  # noqa: E402
from bamasc.metering.redis_ledger import RedisLedger  # noqa: E402
from bamasc.serve.app import Limits, build_app  # noqa: E402
from bamasc.serve.keys import KeyGate  # noqa: E402
from tests.proxy.fleet import REDIS_MISSING, RedisServer  # noqa: E402
from tests.serve.harness import TOKEN, compiled_plan  # noqa: E402

if REDIS_MISSING:
    pytest.skip(REDIS_MISSING, allow_module_level=True)


def test_a_key_sees_only_the_tasks_it_sent(tmp_path):
    server = RedisServer(tmp_path)
    plan = bamasc.Plan.load(compiled_plan(str(tmp_path)))
    trace = tmp_path / "trace.jsonl"

    async def main():
        fleet = RedisLedger(server.url, None, create=True)
        await fleet.open()
        store = RedisKeyStore(fleet)
        secrets = {name: await store.add_key(KeyPolicy(name, None, 1500.0)) for name in ("desk", "lab")}
        gate = KeyGate(RedisKeyStore(fleet), fleet, time.time)
        async with plan.session(trace=str(trace), provider=bamasc.providers.fake("echo")) as session:
            app = build_app(plan, session, TOKEN.encode(), Limits(), gate=gate)
            async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test") as client:
                sent = {}
                for name, secret in secrets.items():
                    for number in range(2):
                        reply = await client.post("/v1/tasks", headers={"Authorization": f"Bearer {secret}"},
                                                  json={"task": f"What is {number} + 4?"})
                        assert reply.status_code == 200, reply.text
                        sent.setdefault(name, set()).add(reply.json()["task_id"])
                views = {name: (await client.get("/ui/summary.json", headers={"Authorization": f"Bearer {secret}"}))
                         for name, secret in secrets.items()}
                everything = await client.get("/ui/summary.json", headers={"Authorization": f"Bearer {TOKEN}"})
                stranger = await client.get("/ui/summary.json", headers={"Authorization": "Bearer bk-forged"})
                shell = await client.get("/ui")
        return sent, views, everything, stranger, shell

    try:
        sent, views, everything, stranger, shell = asyncio.run(main())
    finally:
        server.kill()
    for name, view in views.items():
        assert view.status_code == 200
        shown = view.json()
        other = next(other for other in sent if other != name)
        assert {task["task_id"] for task in shown["dearest"]} == sent[name]
        assert not any(task_id in json.dumps(shown) for task_id in sent[other])
        assert shown["totals"]["tasks"] == 2
    records = [json.loads(line) for line in trace.read_text(encoding="utf-8").splitlines()]
    assert everything.json()["totals"]["tasks"] == 4
    assert everything.json()["totals"]["spent"] == pytest.approx(
        sum(record["charged"] for record in records if record["type"] in ("call", "tool")), abs=1e-6)
    assert stranger.status_code == 401
    assert shell.status_code == 200  # the page's shell holds no data
    assert not any(task_id in shell.text for ids in sent.values() for task_id in ids)
    assert "connect-src 'self'" in shell.headers["content-security-policy"]


def test_a_key_still_sees_its_tasks_after_a_restart(tmp_path):
    """serve's task lines name the key that sent each task, so a restarted server (whose memory of who sent what
    is gone) shows a key the tasks it sent before, and no other key's."""
    server = RedisServer(tmp_path)
    plan = bamasc.Plan.load(compiled_plan(str(tmp_path)))
    trace = tmp_path / "trace.jsonl"

    async def main():
        fleet = RedisLedger(server.url, None, create=True)
        await fleet.open()
        store = RedisKeyStore(fleet)
        secrets = {name: await store.add_key(KeyPolicy(name, None, 1500.0)) for name in ("desk", "lab")}
        sent: dict[str, set] = {}
        views = {}
        for life in ("before", "after"):
            gate = KeyGate(RedisKeyStore(fleet), fleet, time.time)
            async with plan.session(trace=str(trace), provider=bamasc.providers.fake("echo")) as session:
                app = build_app(plan, session, TOKEN.encode(), Limits(), gate=gate)
                async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test") as client:
                    if life == "before":
                        for name in secrets:
                            reply = await client.post("/v1/tasks", headers={"Authorization": f"Bearer {secrets[name]}"},
                                                      json={"task": f"What is {len(name)} + 4?"})
                            assert reply.status_code == 200, reply.text
                            sent.setdefault(name, set()).add(reply.json()["task_id"])
                    else:
                        views = {name: (await client.get("/ui/summary.json",
                                                         headers={"Authorization": f"Bearer {secret}"})).json()
                                 for name, secret in secrets.items()}
        return sent, views

    try:
        sent, views = asyncio.run(main())
    finally:
        server.kill()
    records = [json.loads(line) for line in trace.read_text(encoding="utf-8").splitlines()]
    assert {record["task_id"]: record.get("key") for record in records if record["type"] == "task"} == {
        task_id: name for name, ids in sent.items() for task_id in ids}
    for name, view in views.items():
        assert {task["task_id"] for task in view["dearest"]} == sent[name]
        assert all(task["key"] == name for task in view["dearest"])
        other = next(other for other in sent if other != name)
        assert not any(task_id in json.dumps(view) for task_id in sent[other])
        assert view["timeline"]["axis"] == "time"  # serve's lines carry their time
