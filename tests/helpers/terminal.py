"""A command run with its standard error on a pseudo-terminal, as a user's shell runs it."""

from __future__ import annotations

import fcntl
import os
import struct
import sys
import termios
import threading

from bamasc.cli import main


def on_a_terminal(monkeypatch, argv: list[str]) -> tuple[int, str]:
    """Run `bamasc ARGV` in this process with standard error on a pseudo-terminal 160 columns wide;
    returns its exit code and everything the terminal received."""
    leader, follower = os.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 160, 0, 0))
    received: list[bytes] = []

    def drain() -> None:  # read as it comes: a full terminal buffer would block the run
        while True:
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # the other end closed
                return
            if not chunk:
                return
            received.append(chunk)

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    terminal = os.fdopen(follower, "w", encoding="utf-8", buffering=1)
    monkeypatch.setattr(sys, "stderr", terminal)
    try:
        code = main(argv)
    finally:
        terminal.close()
        reader.join(30)
        os.close(leader)
    return code, b"".join(received).decode("utf-8", "replace")
