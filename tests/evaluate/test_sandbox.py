"""The code sandbox against hostile programs: each case checks the verdict, the time taken and that nothing is left.

Every case runs at both isolation levels: `namespaces` where this machine
allows it (skipped otherwise) and the `hooks` fallback everywhere. Each hostile
program prints its working directory first, so the test can check that the
directory is gone and that no process still runs in it or names it.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import threading
import time
import uuid

import pytest

from bamasc.evaluate.sandbox import Limits, isolation_level, run_many, run_python

LEVELS = [
    pytest.param(
        "namespaces",
        marks=pytest.mark.skipif(
            sys.platform != "linux" or isolation_level() != "namespaces",
            reason="this machine allows no namespaces; the hooks level is tested instead",
        ),
    ),
    "hooks",
]
PRELUDE = "import os, sys\nprint(os.getcwd(), flush=True)\n"


def run(source: str, level: str, **limits):
    started = time.perf_counter()
    outcome = run_python(PRELUDE + source, Limits(**limits), isolation=level)
    elapsed = time.perf_counter() - started
    assert outcome.isolation == level
    return outcome, elapsed


def assert_clean(outcome, *outside: str) -> None:
    """The temporary directory is gone, no process runs in it or names it, and nothing was written outside."""
    workdir = outcome.stdout.splitlines()[0]
    assert os.path.basename(workdir).startswith("bamasc-sandbox-")
    assert not os.path.exists(workdir)
    for pid in (name for name in os.listdir("/proc") if name.isdigit()):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as handle:
                command = handle.read().decode("utf-8", "replace")
            cwd = os.readlink(f"/proc/{pid}/cwd")
        except OSError:
            continue  # gone meanwhile, or not ours to read
        assert workdir not in command and not cwd.startswith(workdir), f"process {pid} is left: {command!r}"
    for path in outside:
        assert not os.path.exists(path), f"{path} was written from inside the sandbox"


def no_process_named(marker: str) -> bool:
    for pid in (name for name in os.listdir("/proc") if name.isdigit()):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as handle:
                if marker.encode() in handle.read():
                    return False
        except OSError:
            continue
    return True


# ---------------------------------------------------------------- ordinary programs


@pytest.mark.parametrize("level", LEVELS)
def test_verdicts_of_ordinary_programs(level):
    cases = {
        "print('ok')\nassert sum([1, 2]) == 3\n": "passed",
        "assert 1 + 1 == 3, 'arithmetic'\n": "failed",
        "raise ValueError('bad value')\n": "error",
        "def broken(:\n": "error",
        "sys.exit(0)\nassert False\n": "error",  # exiting early does not pass the asserts it skipped
        "os._exit(0)\n": "error",
    }
    outcomes = run_many([PRELUDE + source for source in cases], Limits(wall_time=5), concurrency=2, isolation=level)
    assert [outcome.verdict for outcome in outcomes] == list(cases.values())
    assert "AssertionError: arithmetic" in outcomes[1].detail
    assert "ValueError: bad value" in outcomes[2].detail
    assert "SyntaxError" in outcomes[3].detail
    for outcome in outcomes:
        assert outcome.wall_time < 5
        if outcome.stdout:
            assert_clean(outcome)


@pytest.mark.parametrize("level", LEVELS)
def test_the_program_may_write_inside_its_directory_and_use_threads(level):
    source = (
        "import threading, tempfile\n"
        "open('notes.txt', 'w').write('kept')\n"
        "assert open('notes.txt').read() == 'kept'\n"
        "with tempfile.NamedTemporaryFile() as handle:\n"
        "    assert handle.name.startswith(os.getcwd())\n"
        "box = []\n"
        "worker = threading.Thread(target=lambda: box.append(1))\n"
        "worker.start(); worker.join()\n"
        "assert box == [1]\n"
    )
    outcome, elapsed = run(source, level)
    assert outcome.verdict == "passed", outcome.stderr
    assert elapsed < 5
    assert_clean(outcome)


# ---------------------------------------------------------------- hostile programs


@pytest.mark.parametrize("level", LEVELS)
def test_an_infinite_loop_is_killed_at_the_wall_time_limit(level):
    outcome, elapsed = run("while True:\n    pass\n", level, wall_time=1.0)
    assert outcome.verdict == "timeout"
    assert 0.9 <= elapsed < 3.0
    assert_clean(outcome)


@pytest.mark.parametrize("level", LEVELS)
def test_a_busy_loop_is_killed_at_the_cpu_time_limit(level):
    outcome, elapsed = run("while True:\n    pass\n", level, wall_time=10.0, cpu_time=1)
    assert outcome.verdict == "timeout" and "CPU-time limit" in outcome.detail
    assert outcome.cpu_time >= 0.8
    assert elapsed < 4.0
    assert_clean(outcome)


@pytest.mark.parametrize("level", LEVELS)
def test_a_fork_bomb_starts_no_process(level):
    marker = f"bomb-{uuid.uuid4().hex}"
    source = (
        f"sys.argv[0] = {marker!r}\n"
        "children = 0\n"
        "for _ in range(10000):\n"
        "    try:\n"
        "        if os.fork() == 0:\n"
        "            while True:\n"
        "                pass\n"
        "        children += 1\n"
        "    except OSError:\n"
        "        pass\n"
        "print('children', children)\n"
    )
    outcome, elapsed = run(source, level, wall_time=5.0)
    assert outcome.verdict == "passed" and "children 0" in outcome.stdout
    assert elapsed < 5.0
    assert no_process_named(marker)
    assert_clean(outcome)


@pytest.mark.parametrize("level", LEVELS)
def test_a_memory_bomb_meets_the_memory_limit(level):
    source = "blocks = []\nwhile True:\n    blocks.append(bytearray(32 * 2**20))\n"
    outcome, elapsed = run(source, level, memory=256 * 2**20, wall_time=10.0)
    assert outcome.verdict == "memory"
    # The program itself hit the address-space limit. (ru_maxrss is no use here: a
    # forked child's high-water mark starts at its parent's size, and the test
    # process may be large after the policy tests.)
    assert "memory limit of 256 MiB" in outcome.detail
    assert elapsed < 5.0
    assert_clean(outcome)


@pytest.mark.parametrize("level", LEVELS)
def test_huge_output_is_capped(level):
    source = "while True:\n    sys.stdout.write('x' * 65536)\n"
    outcome, elapsed = run(source, level, output_bytes=200_000, wall_time=10.0)
    assert outcome.verdict == "output_limit"
    assert len(outcome.stdout.encode()) <= 200_000 and outcome.stdout.count("x") > 100_000
    assert elapsed < 5.0
    assert_clean(outcome)


@pytest.mark.parametrize("level", LEVELS)
def test_shell_and_subprocess_calls_are_refused(level, tmp_path):
    escape = tmp_path / "from-the-shell"
    marker = f"{30 + int.from_bytes(os.urandom(2), 'big') / 100000:.5f}"  # a sleep no one else runs
    source = (
        "import subprocess\n"
        "try:\n"
        f"    print('system', os.system('touch {escape}; sleep {marker} &'))\n"
        "except OSError as problem:\n"
        "    print('system refused', type(problem).__name__)\n"
        "for command in (['sleep', '" + marker + "'], ['touch', '" + str(escape) + "']):\n"
        "    try:\n"
        "        subprocess.Popen(command)\n"
        "        print('started', command)\n"
        "    except OSError as problem:\n"
        "        print('subprocess refused', type(problem).__name__)\n"
        "try:\n"
        "    os.execv('/bin/sh', ['sh', '-c', 'touch " + str(escape) + "'])\n"
        "except OSError:\n"
        "    print('exec refused')\n"
    )
    outcome, elapsed = run(source, level)
    assert outcome.verdict == "passed", outcome.stderr
    assert outcome.stdout.count("subprocess refused") == 2 and "exec refused" in outcome.stdout
    assert "started" not in outcome.stdout
    assert elapsed < 5.0
    assert no_process_named(f"sleep\x00{marker}")
    assert_clean(outcome, str(escape))


@pytest.mark.parametrize("level", LEVELS)
def test_writes_outside_the_temporary_directory_are_refused(level, tmp_path):
    targets = [tmp_path / "escaped.txt", f"/tmp/bamasc-escape-{uuid.uuid4().hex}", os.path.expanduser("~/bamasc-escape")]
    source = (
        f"for target in {[str(t) for t in targets]!r} + ['../escaped-sibling']:\n"
        "    try:\n"
        "        with open(target, 'w') as handle:\n"
        "            handle.write('escaped')\n"
        "        print('wrote', target)\n"
        "    except OSError as problem:\n"
        "        print('refused', type(problem).__name__)\n"
        "for make in (lambda: os.mkdir('/tmp/bamasc-escape-dir'), lambda: os.symlink('/etc', '/tmp/bamasc-escape-link')):\n"
        "    try:\n"
        "        make()\n"
        "        print('made')\n"
        "    except OSError:\n"
        "        print('refused')\n"
    )
    outcome, elapsed = run(source, level)
    assert outcome.verdict == "passed", outcome.stderr
    assert outcome.stdout.count("refused") == 6 and "wrote" not in outcome.stdout and "made" not in outcome.stdout
    assert elapsed < 5.0
    sibling = os.path.join(os.path.dirname(outcome.stdout.splitlines()[0]), "escaped-sibling")
    assert_clean(outcome, *map(str, targets), sibling, "/tmp/bamasc-escape-dir", "/tmp/bamasc-escape-link")


@pytest.mark.parametrize("level", LEVELS)
def test_sockets_reach_nothing(level, tmp_path):
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    server.settimeout(0.2)
    unix_path = str(tmp_path / "s.sock")
    unix_server = socket.socket(socket.AF_UNIX)
    unix_server.bind(unix_path)
    unix_server.listen()
    unix_server.settimeout(0.2)
    accepted = []
    stop = threading.Event()

    def accept_all():
        while not stop.is_set():
            for listener in (server, unix_server):
                try:
                    accepted.append(listener.accept())
                except OSError:
                    pass

    thread = threading.Thread(target=accept_all, daemon=True)
    thread.start()
    port = server.getsockname()[1]
    source = (
        "import socket\n"
        f"for family, address in ((socket.AF_INET, ('127.0.0.1', {port})), (socket.AF_INET, ('1.1.1.1', 53)),\n"
        f"                        (socket.AF_UNIX, {unix_path!r})):\n"
        "    try:\n"
        "        connection = socket.socket(family)\n"
        "        connection.settimeout(2)\n"
        "        connection.connect(address)\n"
        "        print('connected', address)\n"
        "    except OSError as problem:\n"
        "        print('refused', type(problem).__name__)\n"
        "try:\n"
        "    socket.create_connection(('example.com', 80), timeout=2)\n"
        "    print('connected by name')\n"
        "except OSError:\n"
        "    print('refused')\n"
    )
    try:
        outcome, elapsed = run(source, level)
    finally:
        stop.set()
        thread.join()
        server.close()
        unix_server.close()
    assert outcome.verdict == "passed", outcome.stderr
    assert outcome.stdout.count("refused") == 4 and "connected" not in outcome.stdout
    assert accepted == []
    assert elapsed < 5.0
    assert_clean(outcome)


@pytest.mark.parametrize("level", LEVELS)
def test_signals_to_other_processes_are_refused(level):
    bystander = subprocess.Popen(["sleep", "60"])
    try:
        source = (
            "import signal\n"
            f"for target in (-1, {bystander.pid}, {os.getpid()}):\n"
            "    try:\n"
            "        os.kill(target, signal.SIGKILL)\n"
            "        print('sent', target)\n"
            "    except OSError as problem:\n"
            "        print('refused', type(problem).__name__)\n"
        )
        outcome, elapsed = run(source, level)
        assert bystander.poll() is None, "the sandboxed program killed a process outside"
    finally:
        bystander.kill()
        bystander.wait()
    assert outcome.verdict == "passed", outcome.stderr
    assert outcome.stdout.count("refused") == 3
    assert elapsed < 5.0
    assert_clean(outcome)


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def children_of(pid: int) -> list[int]:
    found = []
    for name in (name for name in os.listdir("/proc") if name.isdigit()):
        try:
            with open(f"/proc/{name}/stat") as handle:
                if int(handle.read().rsplit(")", 1)[1].split()[1]) == pid:
                    found.append(int(name))
        except (OSError, ValueError, IndexError):
            continue
    return found


@pytest.mark.parametrize("level", LEVELS)
def test_the_sandbox_ends_when_its_parent_is_killed(level):
    code = (
        "from bamasc.evaluate.sandbox import Limits, run_python\n"
        f"run_python('import time\\ntime.sleep(60)', Limits(wall_time=60), isolation={level!r})\n"
    )
    parent = subprocess.Popen([sys.executable, "-c", code], cwd=os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
    try:
        deadline = time.monotonic() + 10
        family: list[int] = []
        workdir = None
        while time.monotonic() < deadline:
            jails = children_of(parent.pid)
            family = jails + [pid for jail in jails for pid in children_of(jail)]
            if jails and (level == "hooks" or len(family) > len(jails)):
                break
            time.sleep(0.05)
        assert family, "the sandbox did not start"
        with open(f"/proc/{family[0]}/cmdline", "rb") as handle:
            workdir = handle.read().split(b"\0")[5].decode()
        assert os.path.basename(workdir).startswith("bamasc-sandbox-")
        parent.kill()
        parent.wait()
        started = time.monotonic()
        while any(alive(pid) for pid in family) and time.monotonic() - started < 5:
            time.sleep(0.02)
        assert not any(alive(pid) for pid in family)
        assert time.monotonic() - started < 2.0
    finally:
        parent.kill()
        parent.wait()
        # A parent killed outright cannot delete its temporary directory; the test does.
        if workdir is not None:
            shutil.rmtree(workdir, ignore_errors=True)


def test_namespaces_hide_the_machine():
    if sys.platform != "linux" or isolation_level() != "namespaces":
        pytest.skip("this machine allows no namespaces")
    source = (
        "pids = [name for name in os.listdir('/proc') if name.isdigit()]\n"
        "print('pids', pids)\n"
        "print('devices', sorted(os.listdir('/dev')))\n"
        "status = open('/proc/self/status').read()\n"
        "print([line for line in status.splitlines() if line.startswith(('CapEff', 'NoNewPrivs', 'Seccomp:'))])\n"
    )
    outcome, _ = run(source, "namespaces")
    assert outcome.verdict == "passed", outcome.stderr
    assert "pids ['1']" in outcome.stdout
    assert "'null'" in outcome.stdout and "'urandom'" in outcome.stdout and "'sda'" not in outcome.stdout
    assert "CapEff:\\t0000000000000000" in outcome.stdout and "NoNewPrivs:\\t1" in outcome.stdout
    assert "Seccomp:\\t2" in outcome.stdout
    assert_clean(outcome)


def test_limits_reject_nonsense():
    with pytest.raises(ValueError):
        Limits(wall_time=0)
    with pytest.raises(ValueError):
        run_python("pass", isolation="chroot")


def test_the_hooks_fallback_removes_calls_no_audit_event_covers():
    source = (
        "import signal, subprocess\n"
        "print(hasattr(os, 'pidfd_open'), hasattr(signal, 'pidfd_send_signal'))\n"
        "try:\n"
        "    subprocess._fork_exec()\n"
        "except PermissionError:\n"
        "    print('fork_exec refused')\n"
        "del sys.modules['subprocess']\n"
        "try:\n"
        "    import subprocess\n"
        "except PermissionError:\n"
        "    print('re-import refused')\n"
    )
    outcome, _ = run(source, "hooks")
    assert outcome.verdict == "passed", outcome.stderr
    assert outcome.stdout.splitlines()[1:] == ["False False", "fork_exec refused", "re-import refused"]
    assert_clean(outcome)
