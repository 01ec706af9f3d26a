"""`bamasc serve` started as a subprocess on the offline fake provider, and a compiled plan to serve."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading

import bamasc
from tests.api.helpers import SOLVER
from tests.conftest import ROOT

TOKEN = "s3cret-token-for-tests"
STARTUP_S = 120.0  # how long a loaded machine may take to compile the plan again and bind


def compiled_plan(folder: str) -> str:
    """The solver system's plan (budget 2000 µ$), written to `folder`/plan.json."""
    source = os.path.join(folder, "solver.bam")
    with open(source, "w", encoding="utf-8") as handle:
        handle.write(SOLVER)
    path = os.path.join(folder, "plan.json")
    bamasc.load(source).compile().save(path)
    return path


class Server:
    """One `bamasc serve` process: its URL once it listens, and everything it wrote to stderr."""

    def __init__(self, plan: str, *options: str, token: bool = True) -> None:
        env = {**os.environ, "PYTHONPATH": ROOT, "BAMASC_TEST_TOKEN": TOKEN}
        auth = ["--token-env", "BAMASC_TEST_TOKEN"] if token else ["--no-auth"]
        command = [sys.executable, "-m", "bamasc", "serve", plan, "--port", "0", *auth, *options]
        self.process = subprocess.Popen(command, cwd=os.path.dirname(plan), env=env, stdout=subprocess.DEVNULL,
                                        stderr=subprocess.PIPE, text=True)
        self.lines: list[str] = []
        self.url: str | None = None
        self._ready = threading.Event()
        threading.Thread(target=self._read, daemon=True).start()
        if not self._ready.wait(STARTUP_S) or self.url is None:
            self.kill()
            raise AssertionError("bamasc serve did not start:\n" + self.log())

    def _read(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            self.lines.append(line)
            if "serving system" in line:
                self.url = line.rsplit(" on ", 1)[1].strip()
                self._ready.set()
        self._ready.set()

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {TOKEN}"}

    def log(self) -> str:
        return "".join(self.lines)

    def kill(self) -> None:
        """kill -9: no chance to write anything more."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=60)

    def stop(self) -> int:
        """SIGTERM: a graceful stop; the exit code."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        return self.process.wait(timeout=120)
