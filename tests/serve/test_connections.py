"""`bamasc serve` against connections that never finish a request: 10,000 at once, slow heads, slow bodies, huge heads.

Each is answered (503 past the connection cap, 408 when too slow, 431 when its
head is too large) or closed, the server's open files and memory stay
bounded, its log holds no traceback, and it serves a normal request after.
"""

from __future__ import annotations

import json
import socket

import pytest

httpx = pytest.importorskip("httpx")
pytest.importorskip("uvicorn")

from bamasc.http.connections import FILES_PER_CONNECTION, FILES_SPARE  # noqa: E402
from tests.helpers.connections import (  # noqa: E402
    address,
    exchange,
    more_open_files,
    open_files,
    read_answers,
    status_code,
)
from tests.serve.harness import TOKEN, Server, compiled_plan  # noqa: E402

FLOOD = 10_000
MAX_PENDING = 64
CAP = (MAX_PENDING + 256) * 2  # connections the server holds: --max-pending + 256 requests, twice (serve/main.py)
REQUEST_S = "2"  # --request-timeout: short, so the test does not wait long for the server to give up on a request
AUTH = f"Authorization: Bearer {TOKEN}\r\n".encode()
SLOW_HEAD = b"POST /v1/tasks HTTP/1.1\r\nHost: x\r\n" + AUTH
SLOW_BODY = SLOW_HEAD + b"Content-Type: application/json\r\nContent-Length: 1000000\r\n\r\n" + b'{"task": "'


def _status(pid: int, field: str) -> int:
    with open(f"/proc/{pid}/status", encoding="ascii") as handle:
        for line in handle:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise AssertionError(f"no {field}")


def _error(received: bytes) -> dict:
    """The JSON error of a refusal."""
    return json.loads(received.partition(b"\r\n\r\n")[2])["error"]


def test_ten_thousand_connections_are_refused_or_closed_and_the_server_keeps_serving(tmp_path):
    more_open_files(FLOOD + 512)
    server = Server(compiled_plan(str(tmp_path)), "--fake", "echo", "--max-pending", str(MAX_PENDING),
                    "--request-timeout", REQUEST_S, "--trace", str(tmp_path / "trace.jsonl"))
    sockets: list[socket.socket] = []
    try:
        pid = server.process.pid
        assert httpx.post(f"{server.url}/v1/tasks", json={"task": "What is 1 + 1?"}, headers=server.headers,
                          timeout=120).status_code == 200
        before_kib = _status(pid, "VmRSS")
        most_files = 0
        # A third idle, a third with half a head, a third with a head and the start of a body that never ends.
        kinds = (b"", SLOW_HEAD, SLOW_BODY)
        for n in range(FLOOD):
            sock = socket.create_connection(address(server.url), timeout=120)
            sockets.append(sock)
            try:
                if kinds[n % 3]:
                    sock.sendall(kinds[n % 3])
            except OSError:
                pass  # refused as it opened: its answer is waiting
            if n % 500 == 0:
                most_files = max(most_files, open_files(pid))
        most_files = max(most_files, open_files(pid))
        grown_mib = (_status(pid, "VmHWM") - before_kib) / 1024
        answers = read_answers(sockets)
        codes = [None if answer == "reset" else status_code(answer) for answer in answers]
        seen = {code: codes.count(code) for code in set(codes)}
        assert set(seen) <= {None, 408, 503}, seen
        assert seen.get(408, 0) and seen.get(503, 0), seen  # some held until too slow, some refused as they opened
        assert all(code is None for code, kind in zip(codes, range(FLOOD)) if kind % 3 == 0 and code != 503)
        # Each connection held, and up to three backlogs (as many again, each) accepted by asyncio and being refused.
        assert most_files <= FILES_PER_CONNECTION * CAP + FILES_SPARE, f"the server held {most_files} files with {FLOOD} connections open"
        assert grown_mib < 64, f"the server's peak memory grew by {grown_mib:.0f} MiB under {FLOOD} connections"
        still = httpx.post(f"{server.url}/v1/tasks", json={"task": "What is 2 + 2?"}, headers=server.headers, timeout=120)
        assert still.status_code == 200 and still.json()["status"] == "ok", still.text
        metrics = httpx.get(f"{server.url}/metrics", headers=server.headers, timeout=120).text
        counted = {int(line.split('"')[1]): float(line.split()[-1]) for line in metrics.splitlines()
                   if line.startswith("bamasc_http_responses_total{")}
        # A client that had sent its head may see a reset instead of the answer: the server counts every answer.
        assert counted[503] >= seen[503] and counted[408] >= seen[408], (counted, seen)
    finally:
        for sock in sockets:
            sock.close()
        code = server.stop()
    assert code == 0
    assert "Traceback" not in server.log(), server.log()[-3000:]


def test_slow_and_oversized_requests_get_408_or_431_and_the_server_keeps_serving(tmp_path):
    server = Server(compiled_plan(str(tmp_path)), "--fake", "echo", "--request-timeout", REQUEST_S,
                    "--trace", str(tmp_path / "trace.jsonl"))
    try:
        body_stops = exchange(server.url, SLOW_BODY)
        assert status_code(body_stops) == 408 and _error(body_stops)["message"] == "the body did not arrive within 2 s"
        body_trickles = exchange(server.url, SLOW_BODY, b"x" * 10_000)  # every byte late, none too late
        assert body_trickles.startswith(b"HTTP/1.1 408"), body_trickles[:200]
        head_trickles = exchange(server.url, SLOW_HEAD, b"X-Slow: " + b"a" * 10_000)  # slowloris
        assert status_code(head_trickles) == 408 and _error(head_trickles)["message"].startswith("the request's head")
        huge_head = exchange(server.url, SLOW_HEAD + b"X-Big: " + b"a" * (20 << 10))  # a head not done at 16 KiB
        assert status_code(huge_head) == 431, huge_head[:200]
        assert exchange(server.url, b"") == b""  # a connection that sends nothing is closed without a word
        still = httpx.post(f"{server.url}/v1/tasks", json={"task": "What is 1 + 1?"}, headers=server.headers,
                           timeout=120)
        assert still.status_code == 200 and still.json()["status"] == "ok", still.text
        metrics = httpx.get(f"{server.url}/metrics", headers=server.headers, timeout=120).text
        assert 'bamasc_http_responses_total{code="408"} 3.0' in metrics and 'code="431"} 1.0' in metrics, metrics
    finally:
        code = server.stop()
    assert code == 0
    assert "Traceback" not in server.log(), server.log()
