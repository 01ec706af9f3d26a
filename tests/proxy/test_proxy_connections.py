"""`bamasc proxy` against connections that never finish a request, as `bamasc serve` is tested (tests/serve/test_connections.py).

A flood of connections that send nothing, half a head or a body that never
ends is answered 503 (past --max-connections), 408 (past --request-timeout) or
closed; the proxy's open files stay bounded, it logs no traceback, and an
SDK's request through it is still answered. A slow head or body gets 408, an
oversized head 431.
"""

from __future__ import annotations

import json
import os

import pytest

openai = pytest.importorskip("openai")
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
from tests.proxy.helpers import TOKEN, config_text, process_proxy, traceback_free  # noqa: E402
from tests.proxy.upstream import Upstream  # noqa: E402

FLOOD = 1500
CAP = 64  # --max-connections
AUTH = f"Authorization: Bearer {TOKEN}\r\n".encode()
HEAD = b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n" + AUTH
BODY = HEAD + b"Content-Type: application/json\r\nContent-Length: 1000000\r\n\r\n" + b'{"model": "'


@pytest.fixture(scope="module")
def upstream():
    server = Upstream(output=50).start()
    yield server
    server.stop()


@pytest.fixture
def proxy(upstream, tmp_path):
    config = tmp_path / "proxy.bam"
    config.write_text(config_text(upstream.url, budget=5000), encoding="utf-8")
    process, url = process_proxy(str(config), "--max-connections", str(CAP), "--request-timeout", "2")
    yield process, url
    if process.poll() is None:
        process.terminate()
    process.wait(timeout=120)


def _still_answers(url: str) -> None:
    client = openai.OpenAI(base_url=f"{url}/v1", api_key=TOKEN, max_retries=0, timeout=120,
                           default_headers={"x-bamasc-task": f"after-{os.urandom(4).hex()}"})
    reply = client.chat.completions.create(model="gpt-4.1-mini", messages=[{"role": "user", "content": "hi"}])
    assert reply.choices[0].message.content


def test_a_flood_of_unfinished_connections_is_refused_or_closed_and_the_proxy_keeps_serving(proxy):
    import socket

    more_open_files(FLOOD + 512)
    process, url = proxy
    _still_answers(url)
    sockets: list[socket.socket] = []
    most_files = 0
    try:
        kinds = (b"", HEAD, BODY)
        for n in range(FLOOD):
            sock = socket.create_connection(address(url), timeout=120)
            sockets.append(sock)
            try:
                if kinds[n % 3]:
                    sock.sendall(kinds[n % 3])
            except OSError:
                pass  # refused as it opened: its answer is waiting
            if n % 100 == 0:
                most_files = max(most_files, open_files(process.pid))
        most_files = max(most_files, open_files(process.pid))
        answers = read_answers(sockets)
    finally:
        for sock in sockets:
            sock.close()
    codes = [None if answer == "reset" else status_code(answer) for answer in answers]
    seen = {code: codes.count(code) for code in set(codes)}
    assert set(seen) <= {None, 408, 503}, seen
    assert seen.get(408, 0) and seen.get(503, 0), seen  # some held until too slow, some refused as they opened
    # Refused as it opened (the JSON error), or by uvicorn's own cap once a head was read (its plain text).
    bodies = {answer.partition(b"\r\n\r\n")[2] for answer, code in zip(answers, codes) if code == 503}
    ours = json.dumps({"error": {"status": 503, "field": None,
                                 "message": f"{CAP} connections are open; try again later"}}).encode()
    assert bodies <= {ours, b"Service Unavailable"} and ours in bodies, bodies
    # The connections held, up to three backlogs being refused, and the proxy's own files (its upstream pool too).
    assert most_files <= FILES_PER_CONNECTION * CAP + FILES_SPARE, f"the proxy held {most_files} files"
    _still_answers(url)
    process.terminate()
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 0 and traceback_free(stderr), stderr[-3000:]


def test_slow_and_oversized_requests_get_408_or_431(proxy):
    process, url = proxy
    body_stops = exchange(url, BODY)
    assert status_code(body_stops) == 408 and b"the body did not arrive within 2 s" in body_stops, body_stops[:300]
    head_trickles = exchange(url, HEAD, b"X-Slow: " + b"a" * 10_000)  # slowloris: each byte in time, the head not
    assert status_code(head_trickles) == 408 and b"the request's head did not arrive within 2 s" in head_trickles
    huge_head = exchange(url, HEAD + b"X-Big: " + b"a" * (20 << 10))
    assert status_code(huge_head) == 431, huge_head[:200]
    assert exchange(url, b"") == b""  # a connection that sends nothing is closed without a word
    _still_answers(url)
    process.terminate()
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 0 and traceback_free(stderr), stderr[-3000:]
