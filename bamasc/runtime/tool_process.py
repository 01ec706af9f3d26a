"""A tool server's child process: started in its own process group, read one bounded line at a time, stopped for sure.

The server speaks newline-delimited JSON-RPC on stdin and stdout (MCP's stdio
transport). A line longer than MAX_MESSAGE_BYTES is skipped as it streams in,
never held whole. stderr is kept to its last STDERR_KEEP_BYTES. Stopping
closes stdin, waits GRACE_S for the server to exit, then sends SIGTERM and
after GRACE_S more SIGKILL to its whole process group; on a cancellation
(Ctrl-C) the group gets SIGKILL at once, and a process left at interpreter
exit gets it then. POSIX only.
"""

from __future__ import annotations

import asyncio
import atexit
import os
import signal

MAX_MESSAGE_BYTES = 64 << 20
STDERR_KEEP_BYTES = 16 << 10
GRACE_S = 2.0
_READ_BYTES = 1 << 16
_POLL_S = 0.01
_LIVE: set[ChildProcess] = set()


class Oversized:
    """A line from the server over MAX_MESSAGE_BYTES, skipped; `size` is its length in bytes."""

    def __init__(self, size: int):
        self.size = size


class ChildProcess:
    """One started server process and the task that drains its stderr."""

    def __init__(self, process: asyncio.subprocess.Process):
        self.process = process
        self.pid = process.pid
        self._buffer = bytearray()
        self._searched = 0  # bytes of the buffer already searched for a newline
        self._skipping = 0  # bytes of an oversized line skipped so far (0: not skipping)
        self._stderr = bytearray()
        self._stderr_dropped = 0
        self._stderr_task = asyncio.ensure_future(self._drain_stderr())
        self._stopped = False
        _LIVE.add(self)

    @classmethod
    async def start(cls, argv: list[str], cwd: str | None, env: dict[str, str]) -> ChildProcess:
        process = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            cwd=cwd,
            env=env,
            start_new_session=True,  # its own process group: Ctrl-C does not reach it, a kill reaches all of it
        )
        return cls(process)

    @property
    def returncode(self) -> int | None:
        return self.process.returncode

    async def read_line(self) -> bytes | Oversized | None:
        """The next line from stdout without its newline, an Oversized marker, or None at the end of the output."""
        stdout = self.process.stdout
        while True:
            newline = self._buffer.find(b"\n", self._searched)
            if newline >= 0:
                with memoryview(self._buffer) as view:
                    line = bytes(view[:newline])  # one copy: a 20 MB line is not copied twice
                del self._buffer[: newline + 1]
                self._searched = 0
                if self._skipping:
                    size, self._skipping = self._skipping + len(line), 0
                    return Oversized(size)
                return line
            self._searched = len(self._buffer)
            if self._skipping or len(self._buffer) > MAX_MESSAGE_BYTES:
                self._skipping += len(self._buffer)
                self._buffer.clear()
                self._searched = 0
            chunk = await stdout.read(_READ_BYTES)
            if not chunk:
                return None
            self._buffer += chunk

    async def write(self, data: bytes) -> None:
        self.process.stdin.write(data)
        await self.process.stdin.drain()

    async def _drain_stderr(self) -> None:
        stderr = self.process.stderr
        while chunk := await stderr.read(_READ_BYTES):
            self._stderr += chunk
            extra = len(self._stderr) - STDERR_KEEP_BYTES
            if extra > 0:
                del self._stderr[:extra]
                self._stderr_dropped += extra

    async def settle_stderr(self, timeout_s: float) -> None:
        """Once the process has exited, wait (at most `timeout_s`) for the rest of its stderr to be read."""
        if self.process.returncode is not None:
            await asyncio.wait({self._stderr_task}, timeout=timeout_s)

    def stderr_text(self) -> str:
        """What the server wrote to stderr, its last STDERR_KEEP_BYTES (decoded leniently)."""
        text = bytes(self._stderr).decode("utf-8", "replace")
        return f"[{self._stderr_dropped} bytes before this dropped]\n{text}" if self._stderr_dropped else text

    async def wait_exit(self, timeout_s: float) -> bool:
        """Whether the process exits within `timeout_s` (polled: `wait()` would also wait for its pipes to close)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while self.process.returncode is None:
            if loop.time() >= deadline:
                return False
            await asyncio.sleep(_POLL_S)
        return True

    async def stop(self) -> None:
        """Close stdin, then SIGTERM and SIGKILL to the group if it lingers; SIGKILL at once if cancelled."""
        if self._stopped:
            return
        try:
            try:
                self.process.stdin.close()
            except (OSError, RuntimeError):
                pass
            if not await self.wait_exit(GRACE_S):
                self._signal(signal.SIGTERM)
                if not await self.wait_exit(GRACE_S):
                    self._signal(signal.SIGKILL)
                    await self.wait_exit(GRACE_S)
        finally:
            # Whatever the server started in its group goes too; and on a cancellation this is the only step.
            self.kill_now()
            self._stderr_task.cancel()
            transport = getattr(self.process, "_transport", None)
            if transport is not None:  # close the pipes now, not at garbage collection
                transport.close()

    def kill_now(self) -> None:
        """SIGKILL to the whole process group, now (synchronous: safe in a finally or at exit)."""
        self._signal(signal.SIGKILL)
        self._stopped = True
        _LIVE.discard(self)

    def _signal(self, number: int) -> None:
        if self._stopped:
            return
        try:
            os.killpg(self.pid, number)  # the group's id is the leader's pid (start_new_session)
        except (ProcessLookupError, PermissionError):
            pass


def running() -> list[ChildProcess]:
    """The server processes started and not yet stopped, in this interpreter."""
    return list(_LIVE)


@atexit.register
def _kill_leftovers() -> None:
    """A server whose run ended without stopping it (its event loop torn down) is killed as the interpreter exits."""
    for child in list(_LIVE):
        child.kill_now()
