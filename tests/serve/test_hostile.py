"""A running `bamasc serve` under hostile traffic: refused with 4xx, memory bounded, no traceback, still serving."""

from __future__ import annotations

import asyncio
import socket
from urllib.parse import urlsplit

import pytest

httpx = pytest.importorskip("httpx")
pytest.importorskip("uvicorn")

from tests.helpers.metrics import promtool_check  # noqa: E402
from tests.serve.harness import TOKEN, Server, compiled_plan  # noqa: E402

CAP = 65_536


def _rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status", encoding="ascii") as handle:
        for line in handle:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS")


def _raw(url: str, head: bytes, body_chunks=()) -> bytes:
    """Send raw bytes (the body may be refused half-way), then read what the server answered."""
    parts = urlsplit(url)
    with socket.create_connection((parts.hostname, parts.port), timeout=60) as sock:
        try:
            sock.sendall(head)
            for chunk in body_chunks:
                sock.sendall(chunk)
        except OSError:
            pass  # the server stopped reading: its answer is waiting
        received = b""
        try:
            while b"\r\n\r\n" not in received:
                data = sock.recv(65536)
                if not data:
                    break
                received += data
        except OSError:
            pass
    return received


def test_hostile_traffic_is_refused_and_the_server_keeps_serving(tmp_path):
    server = Server(compiled_plan(str(tmp_path)), "--fake", "echo", "--max-body", str(CAP), "--max-pending", "64",
                    "--trace", str(tmp_path / "trace.jsonl"))
    try:
        auth = f"Authorization: Bearer {TOKEN}\r\n".encode()
        # A body announced far past the cap is refused before it is read.
        huge = _raw(server.url, b"POST /v1/tasks HTTP/1.1\r\nHost: x\r\n" + auth + b"Content-Length: 500000000\r\n\r\n")
        assert huge.startswith(b"HTTP/1.1 413"), huge[:200]
        before = _rss_kib(server.process.pid)
        # A chunked body with no length: reading stops at the cap, however much is sent.
        chunk = b"%x\r\n%s\r\n" % (CAP, b"a" * CAP)
        for _ in range(5):
            streamed = _raw(server.url, b"POST /v1/tasks HTTP/1.1\r\nHost: x\r\n" + auth
                            + b"Transfer-Encoding: chunked\r\n\r\n", [chunk] * 160)
            assert streamed.startswith(b"HTTP/1.1 413"), streamed[:200]
        garbage = _raw(server.url, b"\x00\xffNOT HTTP AT ALL\r\n\r\n")
        assert garbage.startswith(b"HTTP/1.1 400"), garbage[:200]
        # Many idle connections at once take no task and stop nobody else.
        address = (urlsplit(server.url).hostname, urlsplit(server.url).port)
        idle = [socket.create_connection(address, timeout=60) for _ in range(200)]

        async def flood() -> list[int]:
            limits = httpx.Limits(max_connections=100)
            async with httpx.AsyncClient(base_url=server.url, timeout=120, limits=limits) as client:
                bodies = [b'{"task": "x", "budget": NaN}', b'{"task": "x", "budget": 1e308}', b'{"task": "x", "budget": -1}',
                          b"[" * 5000, b'{"task": 7}', b'{"task": "x", "extra": 1}']
                hostile = [client.post("/v1/tasks", content=bodies[n % len(bodies)], headers=server.headers)
                           for n in range(300)]
                unauthorised = [client.post("/v1/tasks", json={"task": "x"}) for _ in range(100)]
                responses = await asyncio.gather(*hostile, *unauthorised)
                return [r.status_code for r in responses]

        codes = asyncio.run(flood())
        for sock in idle:
            sock.close()
        assert codes[:300] and all(400 <= code < 500 for code in codes[:300]), sorted(set(codes[:300]))
        assert set(codes[300:]) == {401}
        grown_mib = (_rss_kib(server.process.pid) - before) / 1024
        assert grown_mib < 64, f"the server grew by {grown_mib:.0f} MiB on refused requests"
        still = httpx.post(f"{server.url}/v1/tasks", json={"task": "What is 1 + 1?"}, headers=server.headers, timeout=120)
        assert still.status_code == 200 and still.json()["status"] == "ok"
        metrics = httpx.get(f"{server.url}/metrics", headers=server.headers).text
        assert 'bamasc_tasks_total{status="ok"} 1.0' in metrics
        promtool_check(metrics)  # the running server's scrape, its connection layer's refusals counted in it
    finally:
        code = server.stop()
    assert code == 0
    assert "Traceback" not in server.log(), server.log()


def test_serving_without_a_token_needs_no_auth_said_out_loud(tmp_path):
    plan = compiled_plan(str(tmp_path))
    server = Server(plan, "--fake", "echo", token=False)
    try:
        assert httpx.get(f"{server.url}/v1/budget").status_code == 200
    finally:
        server.stop()
    assert "warning: serving without authentication" in server.log()


def test_serve_refuses_what_it_cannot_serve(tmp_path):
    import os
    import subprocess
    import sys

    from tests.conftest import ROOT

    plan = compiled_plan(str(tmp_path))
    env = {k: v for k, v in os.environ.items() if k != "BAMASC_TEST_UNSET"}
    env["PYTHONPATH"] = ROOT

    def serve(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "bamasc", "serve", *args], cwd=str(tmp_path), env=env,
                              capture_output=True, text=True, timeout=300)

    no_auth_choice = serve(plan, "--fake", "echo")
    assert no_auth_choice.returncode == 2 and "--token-env VAR" in no_auth_choice.stderr
    assert "--no-auth" in no_auth_choice.stderr and "Traceback" not in no_auth_choice.stderr
    unset = serve(plan, "--token-env", "BAMASC_TEST_UNSET", "--fake", "echo")
    assert unset.returncode == 2 and "BAMASC_TEST_UNSET" in unset.stderr
    source = serve(str(tmp_path / "solver.bam"), "--no-auth")
    assert source.returncode == 2 and "bamasc compile" in source.stderr
    with open(plan, encoding="utf-8") as handle:
        text = handle.read()
    with open(plan, "w", encoding="utf-8") as handle:
        handle.write(text.replace('"budget": 2000', '"budget": 3000', 1))
    tampered = serve(plan, "--no-auth", "--fake", "echo")
    assert tampered.returncode == 1 and "bamasc: error:" in tampered.stderr and "Traceback" not in tampered.stderr


def test_without_the_extra_serve_says_how_to_install_it(tmp_path):
    import os
    import subprocess
    import sys

    from tests.conftest import ROOT

    plan = compiled_plan(str(tmp_path))
    script = ("import sys; sys.modules['starlette'] = None; sys.modules['uvicorn'] = None; "
              f"from bamasc.cli import main; sys.exit(main(['serve', {plan!r}, '--no-auth']))")
    done = subprocess.run([sys.executable, "-c", script], cwd=str(tmp_path), env={**os.environ, "PYTHONPATH": ROOT},
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 1
    assert "pip install 'bamasc[serve]'" in done.stderr and "Traceback" not in done.stderr
