"""Raw-socket clients for the connection tests of `bamasc serve` and `bamasc proxy`, and the server's open files."""

from __future__ import annotations

import errno
import os
import selectors
import socket
import threading
import time
from urllib.parse import urlsplit

import pytest

SETTLE_S = 600.0  # how long every connection may take to be answered or closed on a loaded machine


def open_files(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def address(url: str) -> tuple[str, int]:
    parts = urlsplit(url)
    return parts.hostname, parts.port


def status_code(received: bytes) -> int | None:
    """The status of the response received (None: closed without a word)."""
    if not received:
        return None
    assert received.startswith(b"HTTP/1.1 "), received[:120]
    return int(received[9:12])


def read_answers(sockets: list[socket.socket]) -> list[bytes | str]:
    """What each socket received until the server closed it ("reset" where it reset the connection)."""
    received: list[bytes | str] = [b""] * len(sockets)
    selector = selectors.DefaultSelector()
    for index, sock in enumerate(sockets):
        sock.setblocking(False)
        selector.register(sock, selectors.EVENT_READ, index)
    open_count = len(sockets)
    give_up = time.monotonic() + SETTLE_S
    while open_count and time.monotonic() < give_up:
        for key, _ in selector.select(timeout=5):
            index, sock = key.data, key.fileobj
            try:
                data = sock.recv(65536)
            except BlockingIOError:
                continue
            except OSError as problem:
                assert problem.errno in (errno.ECONNRESET, errno.EPIPE), problem
                received[index], data = "reset", b""
            if data:
                received[index] += data
                continue
            selector.unregister(sock)
            open_count -= 1
    selector.close()
    assert not open_count, f"{open_count} of {len(sockets)} connections were neither answered nor closed"
    return received


def more_open_files(needed: int) -> None:
    resource = pytest.importorskip("resource")
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < needed:
        pytest.skip(f"the hard limit on open files (ulimit -Hn: {hard}) is below the {needed} this test opens")
    if soft != resource.RLIM_INFINITY and soft < needed:
        resource.setrlimit(resource.RLIMIT_NOFILE, (needed, hard))


def exchange(url: str, head: bytes, trickle: bytes = b"") -> bytes:
    """Send `head`, then `trickle` a byte at a time (a thread, until the server stops reading), and read all
    that the server answers until it closes the connection."""
    sock = socket.create_connection(address(url), timeout=120)
    sock.sendall(head)
    stop = threading.Event()

    def drip() -> None:
        for byte in trickle:
            if stop.wait(0.2):
                return
            try:
                sock.sendall(bytes([byte]))
            except OSError:
                return

    dripping = threading.Thread(target=drip, daemon=True)
    dripping.start()
    received = b""
    try:
        while True:
            data = sock.recv(65536)
            if not data:
                break
            received += data
    except ConnectionResetError:
        pass
    finally:
        stop.set()
        dripping.join()
        sock.close()
    return received
