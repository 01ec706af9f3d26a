"""The test process's memory guard (tests/watchdog.py) stops a runaway and names it."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.conftest import ROOT
from tests.watchdog import rss_mib, threads


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="the guard reads /proc, which this system lacks")
def test_a_runaway_thread_stops_the_run_with_its_stack_and_the_test_running():
    environment = {**os.environ, "BAMASC_TEST_RSS_LIMIT_MIB": "600"}
    done = subprocess.run([sys.executable, "-m", "pytest", "-n", "0", "-p", "no:cacheprovider", "tests/watchdog_target.py"],
                          cwd=ROOT, env=environment, capture_output=True, text=True, timeout=900)
    said = done.stdout + done.stderr
    assert done.returncode == 3, said[-3000:]
    assert "past the limit of 600 MiB" in said, said[-3000:]
    assert "running: tests/watchdog_target.py::test_a_thread_left_running_grows_without_end" in said
    assert "runaway" in said  # the busy thread by name, in the CPU table and in the stacks
    assert 'in grow' in said and "Thread 0x" in said  # faulthandler's stack of the growing thread
    assert "the memory guard did not stop the run" not in said


def test_the_readings():
    assert rss_mib() > 10
    listed = threads()
    assert any(tid == os.getpid() for _, _, tid in listed)  # the main thread's id is the process's
    assert all(ticks >= 0 and name for ticks, name, _ in listed)
