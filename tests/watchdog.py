"""A guard on the test process's memory: a runaway is stopped and named, not left to the kernel's OOM killer.

The suite needs about 2.5 GiB. If something in the test process (a test, or a
thread one left running) grows it past the limit, the kernel would kill the
process with SIGKILL and say nothing of why. Instead this guard, a thread that
reads /proc every two seconds, writes to the real stderr the test running,
the tests after which memory grew most, each thread's CPU time and name, and
every Python thread's stack, then ends the run with exit code 3.

The limit is 8 GiB, or BAMASC_TEST_RSS_LIMIT_MIB (0 turns the guard off).
"""

from __future__ import annotations

import faulthandler
import heapq
import os
import threading
import time

LIMIT_MIB = int(os.environ.get("BAMASC_TEST_RSS_LIMIT_MIB", str(8 << 10)))
PERIOD_S = 2.0
KEPT_GROWERS = 8  # the tests after which memory grew most


def rss_mib() -> int:
    """Resident memory of this process, MiB (0 where /proc is not there)."""
    try:
        with open("/proc/self/statm", encoding="ascii") as handle:
            pages = int(handle.read().split()[1])
    except OSError:
        return 0
    return pages * os.sysconf("SC_PAGE_SIZE") >> 20


def threads() -> list[tuple[int, str, int]]:
    """(CPU ticks, name, thread id) of every thread of this process, busiest first."""
    found = []
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/stat", encoding="ascii", errors="replace") as handle:
                stat = handle.read()
        except OSError:
            continue  # ended meanwhile
        name = stat[stat.index("(") + 1:stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2:].split()
        found.append((int(fields[11]) + int(fields[12]), name, int(tid)))  # utime + stime
    return sorted(found, reverse=True)


class Watchdog:
    def __init__(self, stderr_fd: int) -> None:
        self.out = os.fdopen(stderr_fd, "w", buffering=1, encoding="utf-8", errors="replace")
        self.current = "(between tests)"
        self.last_rss = rss_mib()
        self.growers: list[tuple[int, str]] = []  # a min-heap of (MiB grown, test)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._watch, name="bamasc-test-watchdog", daemon=True)

    def test_started(self, nodeid: str) -> None:
        self.current = nodeid

    def test_finished(self, nodeid: str) -> None:
        rss = rss_mib()
        grown, self.last_rss = rss - self.last_rss, rss
        if grown > 0:
            heapq.heappush(self.growers, (grown, nodeid))
            if len(self.growers) > KEPT_GROWERS:
                heapq.heappop(self.growers)
        self.current = "(between tests)"

    def _watch(self) -> None:
        while not self.stop.wait(PERIOD_S):
            rss = rss_mib()
            if rss > LIMIT_MIB:
                self._report(rss)
                os._exit(3)

    def _report(self, rss: int) -> None:
        write = self.out.write
        write(f"\n\ntests: the test process holds {rss} MiB, past the limit of {LIMIT_MIB} MiB "
              "(BAMASC_TEST_RSS_LIMIT_MIB); the run stops here.\n")
        write(f"tests: running: {self.current}\n")
        write("tests: memory grew most after:\n")
        for grown, nodeid in sorted(self.growers, reverse=True):
            write(f"  +{grown} MiB  {nodeid}\n")
        before = {tid: ticks for ticks, _, tid in threads()}
        time.sleep(1.0)
        named = {thread.native_id: thread.name for thread in threading.enumerate()}
        write("tests: threads by CPU time (ticks in all, in the last second; the Python thread's name):\n")
        for ticks, name, tid in threads()[:20]:
            write(f"  {tid:>7} {name:<16} {ticks:>8} {ticks - before.get(tid, ticks):>4}  {named.get(tid, '')}\n")
        write("tests: the Python threads' stacks (faulthandler names each by its id, in hex):\n")
        for ident, thread in ((thread.ident, thread) for thread in threading.enumerate()):
            write(f"  0x{ident:016x} {thread.name}\n")
        self.out.flush()
        faulthandler.dump_traceback(file=self.out, all_threads=True)
        self.out.flush()
