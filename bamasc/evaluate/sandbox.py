"""The code sandbox: a hostile candidate in one jail, the tests that judge it in another, plain data between.

`run_tests(candidate, tests, imports, setup)` starts `jail.py` in a fresh
interpreter (`python -I -S -B`, a minimal environment: no API keys, no
parent memory), which builds two jails, one for the candidate and one for
the tests (see `jail.py`). The tests call the candidate's functions through
`plain.Remote` stand-ins; only plain data crosses (see `plain.py`). The
verdict comes from the tests' process alone, on a pipe the candidate never
holds, so nothing the candidate writes, prints, exits with or returns can
choose it: a crash, an early exit, forged output or an object that equals
everything is a failed item.

Isolation `namespaces` (the default) is the jail. `hooks` is not a sandbox
(see `hooks.py`): it exists for machines that allow no namespaces, and the
caller must ask for it explicitly.

Only `os`, `sys` and `json` are imported at module level; the command-line
interface imports this module only when it scores code.
"""

from __future__ import annotations

import json
import os
import sys

VERDICTS = ("passed", "failed", "error", "timeout", "memory", "output_limit", "crashed")
ISOLATION = ("namespaces", "hooks")

_HERE = os.path.dirname(os.path.abspath(__file__))
# The keeper's start: this folder on the path only while `jail` and its siblings import, so the
# candidate's interpreter sees the standard library alone.
BOOTSTRAP = "import sys; sys.path.insert(0, sys.argv[1]); import jail; del sys.path[0]; jail.main(sys.argv[2:])"
_ENVIRONMENT = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "PYTHONIOENCODING": "utf-8",
                "HOME": "/tmp", "TMPDIR": "/tmp"}
_TEST_VERDICTS = ("passed", "failed", "error", "memory")  # what the tests' process may say
_STOP_GRACE = 5.0  # seconds the keeper has to end both jails once asked


class SandboxError(RuntimeError, ValueError):
    """The sandbox cannot run candidates here at the isolation asked for (not a verdict on one).
    A ValueError too: commands that report bad input in one line report this the same way."""


class Limits:
    """What one candidate may use. Times in seconds, sizes in bytes."""

    __slots__ = ("wall_time", "cpu_time", "memory", "output_bytes", "open_files", "threads", "disk", "disk_files")

    def __init__(
        self,
        wall_time: float = 10.0,  # everything is killed after this long, whatever it is doing
        cpu_time: int | None = None,  # RLIMIT_CPU of each jail; default: the wall time rounded up
        memory: int = 512 * 2**20,  # RLIMIT_AS of each jail: address space, interpreter included
        output_bytes: int = 1 * 2**20,  # RLIMIT_FSIZE: per stream, and per file written
        open_files: int = 64,  # RLIMIT_NOFILE
        threads: int = 32,  # RLIMIT_NPROC: threads (new processes are refused outright)
        disk: int = 16 * 2**20,  # the scratch space's size
        disk_files: int = 512,  # the scratch space's inodes
    ) -> None:
        if wall_time <= 0 or memory <= 0 or output_bytes <= 0 or open_files < 8 or threads < 1:
            raise ValueError("sandbox limits must be positive (open_files at least 8)")
        if disk < 4096 or disk_files < 8:
            raise ValueError("the scratch space needs at least 4096 bytes and 8 files")
        self.wall_time = float(wall_time)
        self.cpu_time = max(1, int(-(-wall_time // 1))) if cpu_time is None else int(cpu_time)
        self.memory = int(memory)
        self.output_bytes = int(output_bytes)
        self.open_files = int(open_files)
        self.threads = int(threads)
        self.disk = int(disk)
        self.disk_files = int(disk_files)

    def __repr__(self) -> str:
        return "Limits(" + ", ".join(f"{name}={getattr(self, name)!r}" for name in self.__slots__) + ")"


class Job:
    """One candidate and what judges it: test imports, the candidate's code, setup code, asserts."""

    __slots__ = ("candidate", "tests", "imports", "setup")

    def __init__(self, candidate: str, tests, imports=(), setup: str = "") -> None:
        self.candidate = candidate
        self.tests = tuple(tests)
        self.imports = tuple(imports)
        self.setup = setup


class Outcome:
    """How one candidate fared."""

    __slots__ = ("verdict", "detail", "wall_time", "cpu_time", "max_rss", "stdout", "stderr", "isolation",
                 "candidate_status", "setup_error")

    def __init__(self, verdict, detail, wall_time=0.0, cpu_time=0.0, max_rss=0, stdout="", stderr="",
                 isolation="unknown", candidate_status=None, setup_error=None):
        self.verdict = verdict  # one of VERDICTS; only the tests' process can make it "passed"
        self.detail = detail  # one line for a report: the failed assert, the exception, the limit hit
        self.wall_time = wall_time  # seconds, from start to every process reaped
        self.cpu_time = cpu_time  # seconds of user + system time, both jails
        self.max_rss = max_rss  # bytes, the largest process
        self.stdout = stdout  # the candidate's, at most output_bytes, decoded with replacement
        self.stderr = stderr
        self.isolation = isolation  # namespaces | hooks
        self.candidate_status = candidate_status  # its wait status, None if unknown
        self.setup_error = setup_error  # why the sandbox could not run it at all, else None

    @property
    def passed(self) -> bool:
        return self.verdict == "passed"

    def __repr__(self) -> str:
        return (f"Outcome(verdict={self.verdict!r}, wall_time={self.wall_time:.3f}, "
                f"isolation={self.isolation!r}, detail={self.detail!r})")


def run_tests(candidate: str, tests, imports=(), setup: str = "", limits: Limits | None = None,
              isolation: str = "namespaces") -> Outcome:
    """Judge `candidate` by `tests` (assert statements) in the sandbox; never raises for anything it does."""
    import subprocess
    import tempfile
    import time

    limits = limits or Limits()
    _cache_bytecode()
    if isolation not in ISOLATION:
        raise ValueError(f"isolation must be one of {', '.join(ISOLATION)}, not {isolation!r}")
    if not hasattr(os, "setsid"):
        raise SandboxError("the sandbox needs a POSIX system")
    files: list = []
    handed: list[int] = []  # the keeper's ends of the pipes, until it has them
    kept: list[int] = []  # this process's ends
    started = time.perf_counter()
    process = usage = None
    try:
        # Unnamed files: nothing is left behind, and each jail reads only its own part of the job.
        files += [tempfile.TemporaryFile() for _ in range(5)]
        stdout, stderr, log, candidate_job, tester_job = files
        candidate_job.write(json.dumps({"imports": "\n".join(imports), "candidate": candidate, "setup": setup}).encode())
        tester_job.write(json.dumps({"imports": "\n".join(imports), "tests": list(tests)}).encode())
        for handle in (candidate_job, tester_job):
            handle.flush()
        verdict_r, verdict_w = _pipe(handed, kept)
        report_r, report_w = _pipe(handed, kept)
        life_r, life_w = _pipe(handed, kept, keeper_reads=True)  # the keeper's end closes when this one does
        config = {
            "isolation": isolation, "report": report_w, "verdict": verdict_w, "life": life_r,
            "tmp": tempfile.gettempdir(),  # where the hooks level makes its folder (the jail needs none)
            "tester_log": log.fileno(), "candidate_job": candidate_job.fileno(), "tester_job": tester_job.fileno(),
            "limits": {"cpu": limits.cpu_time, "memory": limits.memory, "output": limits.output_bytes,
                       "files": limits.open_files, "threads": limits.threads, "disk": limits.disk,
                       "disk_files": limits.disk_files},
        }
        process = subprocess.Popen(
            [sys.executable, "-I", "-S", "-B", "-c", BOOTSTRAP, _HERE, json.dumps(config)], cwd="/", env=_ENVIRONMENT,
            stdin=subprocess.DEVNULL, stdout=stdout, stderr=stderr, start_new_session=True,
            pass_fds=(*handed, log.fileno(), candidate_job.fileno(), tester_job.fileno()),
        )
        for fd in handed:
            os.close(fd)
        handed.clear()
        verdict, timed_out = _read_verdict(verdict_r, started + limits.wall_time)
        kept.remove(life_w)
        os.close(life_w)  # the keeper ends both jails, reports and exits
        if not _wait_exited(process.pid, time.perf_counter() + _STOP_GRACE):
            _kill_group(process.pid)
        _, status, usage = os.wait4(process.pid, 0)
        process.returncode = os.waitstatus_to_exitcode(status)
        report = _read_available(report_r)
        outputs = [_read_capped(handle, limits.output_bytes) for handle in (stdout, stderr, log)]
    except OSError as problem:  # the machine refused a pipe, a file or a process
        return Outcome("error", f"sandbox: {problem}", isolation=isolation, setup_error=str(problem))
    finally:
        if process is not None and process.returncode is None:
            _kill_group(process.pid)
            process.wait()
        for fd in (*handed, *kept):
            os.close(fd)
        for handle in files:
            handle.close()
    return _outcome(verdict, timed_out, report, outputs, usage, time.perf_counter() - started, limits, isolation)


def _pipe(handed: list[int], kept: list[int], keeper_reads: bool = False) -> tuple[int, int]:
    """A pipe whose ends are recorded at once (the keeper's, this process's), so each is closed once."""
    read, write = os.pipe()
    handed.append(read if keeper_reads else write)
    kept.append(write if keeper_reads else read)
    return read, write


def run_many(jobs, limits: Limits | None = None, concurrency: int = 2, isolation: str = "namespaces") -> list[Outcome]:
    """Judge every Job, `concurrency` at a time; outcomes in the order of `jobs`."""
    from concurrent.futures import ThreadPoolExecutor

    jobs = list(jobs)
    if not jobs:
        return []

    def one(job: Job) -> Outcome:
        return run_tests(job.candidate, job.tests, job.imports, job.setup, limits, isolation)

    with ThreadPoolExecutor(max_workers=max(1, min(concurrency, len(jobs)))) as pool:
        return list(pool.map(one, jobs))


_CHECKED: dict[str, str | None] = {}


def check_isolation(isolation: str = "namespaces") -> None:
    """Raise SandboxError when this machine cannot run candidates at `isolation` (probed once)."""
    if isolation not in _CHECKED:
        outcome = run_tests("def probe():\n    return 1\n", ["assert probe() == 1"], limits=Limits(wall_time=20),
                            isolation=isolation)
        _CHECKED[isolation] = None if outcome.passed else (outcome.setup_error or outcome.detail)
    problem = _CHECKED[isolation]
    if problem is not None:
        raise SandboxError(f"the sandbox cannot build its {isolation} jail on this machine: {problem}")


def _cache_bytecode() -> None:
    """Import the jail's modules here once: their bytecode is then cached (where the package folder is
    writable; pip compiles it at install), and each keeper, started with -B, loads it instead of
    compiling the sources again."""
    if "bamasc.evaluate.jail" not in sys.modules:
        import bamasc.evaluate.jail  # noqa: F401


# ---------------------------------------------------------------- the verdict


def _outcome(verdict: bytes, timed_out: bool, report: bytes, outputs, usage, wall: float, limits: Limits,
             isolation: str) -> Outcome:
    import signal

    lines = report.decode("utf-8", "replace").splitlines()
    level = next((line.split(":", 1)[1] for line in lines if line.startswith("isolation:")), isolation)
    setup = next((line.split(":", 1)[1] for line in lines if line.startswith("setup-error:")), None)
    statuses = {}
    for line in lines:
        parts = line.split(":")
        if len(parts) == 3 and parts[0] == "status" and parts[2].lstrip("-").isdigit():
            statuses[parts[1]] = int(parts[2])
    status = statuses.get("candidate")
    cpu = (usage.ru_utime + usage.ru_stime) if usage is not None else 0.0
    texts = [data[: limits.output_bytes].decode("utf-8", "replace") for data in outputs]
    said = _parse_verdict(verdict)
    if said is not None:
        name, detail = said
    elif timed_out:
        name, detail = "timeout", f"killed after the wall-time limit of {limits.wall_time:g} s"
    elif setup is not None:
        name, detail = "error", f"sandbox: {setup}"
    else:
        last = texts[2].strip().splitlines()[-1:] if texts[2].strip() else []
        name, detail = "error", "the tests' process gave no verdict" + (f" ({last[0][:200]})" if last else "")
    if name != "passed":
        # Why the candidate failed, when its end says more than the tests saw.
        if status is not None and os.WIFSIGNALED(status) and os.WTERMSIG(status) != signal.SIGKILL:
            number = os.WTERMSIG(status)
            if number == signal.SIGXCPU:
                name, detail = "timeout", f"killed at the CPU-time limit of {limits.cpu_time} s"
            elif number == signal.SIGXFSZ:
                name, detail = "output_limit", f"wrote more than {limits.output_bytes} bytes to a file"
            else:
                name, detail = "crashed", f"killed by {_signal_name(number)}"
        elif any(len(data) >= limits.output_bytes for data in outputs[:2]):
            name, detail = "output_limit", f"wrote {limits.output_bytes} bytes or more to a stream"
        elif status is not None and os.WIFEXITED(status) and "process ended" in detail:
            detail += f"; it exited with status {os.WEXITSTATUS(status)}"
    return Outcome(name, detail, wall, cpu, (usage.ru_maxrss * 1024) if usage is not None else 0, texts[0],
                   texts[1], level, status, setup if said is None and not timed_out else None)


def _parse_verdict(data: bytes) -> tuple[str, str] | None:
    try:
        said = json.loads(data.split(b"\n", 1)[0].decode("ascii"))
    except (ValueError, UnicodeDecodeError):
        return None
    if not (isinstance(said, dict) and said.get("verdict") in _TEST_VERDICTS and isinstance(said.get("detail"), str)):
        return None
    return said["verdict"], said["detail"]


def _signal_name(number: int) -> str:
    import signal

    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


# ---------------------------------------------------------------- processes and pipes


def _read_verdict(fd: int, deadline: float) -> tuple[bytes, bool]:
    """What the tests' process writes, up to its end or its first line; (data, timed out)."""
    import select
    import time

    data = b""
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    while b"\n" not in data and len(data) < 65536:
        left = deadline - time.perf_counter()
        if left <= 0:
            return data, True
        if not poller.poll(max(1, int(left * 1000) + 1)):
            continue
        chunk = os.read(fd, 65536)
        if not chunk:
            break
        data += chunk
    return data, False


def _wait_exited(pid: int, deadline: float) -> bool:
    """Wait until `pid` exits (without reaping it) or the deadline passes; True if it exited."""
    import select
    import time

    try:
        handle = os.pidfd_open(pid)
    except (AttributeError, OSError):
        handle = None
    if handle is not None:
        try:
            poller = select.poll()
            poller.register(handle, select.POLLIN)
            left = deadline - time.perf_counter()
            return bool(poller.poll(max(0, int(left * 1000)))) or _exited(pid)
        finally:
            os.close(handle)
    while time.perf_counter() < deadline:
        if _exited(pid):
            return True
        time.sleep(0.005)
    return _exited(pid)


def _exited(pid: int) -> bool:
    found = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    return found is not None and found.si_pid == pid


def _kill_group(pid: int) -> None:
    import signal

    for kill, target in ((os.killpg, pid), (os.kill, pid)):
        try:
            kill(target, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def _read_available(fd: int) -> bytes:
    """What the pipe holds now (the keeper has exited: a few short lines)."""
    os.set_blocking(fd, False)
    data = b""
    while len(data) < 65536:
        try:
            chunk = os.read(fd, 65536)
        except BlockingIOError:
            break
        if not chunk:
            break
        data += chunk
    return data


def _read_capped(stream, cap: int) -> bytes:
    stream.seek(0)
    return stream.read(cap + 1)
