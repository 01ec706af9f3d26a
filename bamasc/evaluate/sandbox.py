"""The code sandbox: untrusted Python in its own process and temporary directory, under limits, without network.

`run_python(source)` writes the program into a fresh temporary directory and
runs it there with this file as the jail (`python -I -S -B sandbox.py ...`).
The jail sets the limits on itself before a line of the program runs:

- rlimits: CPU seconds, address space (memory), file size (which caps the
  captured output too), open files, no core dumps;
- where Linux allows it (as root, or with unprivileged user namespaces), new
  mount, network, PID and IPC namespaces: every mount but the temporary
  directory is read-only, `/dev` holds only null, zero, full, random and
  urandom, `/proc` shows only the program's own process, and the network has
  no interface up; then every capability is dropped, `no_new_privs` is set and
  a seccomp filter refuses new processes (fork, vfork, clone without
  CLONE_THREAD, exec), `socket`, `ptrace`, `setsid`/`setpgid` and every
  mount or namespace call with EPERM. The process count is also capped with
  RLIMIT_NPROC, which the kernel enforces for users other than root;
- elsewhere (a container that forbids namespaces, another architecture, another
  POSIX system) the documented fallback `hooks`: the same rlimits, its own
  session, and a Python audit hook that refuses process creation, sockets,
  ctypes, `resource.setrlimit`, signals to other processes and any write outside
  the temporary directory. An audit hook lives inside the interpreter it
  guards, so this level contains mistakes and ordinary hostile code, not an
  attacker who finds an interpreter bug.

At the wall-time limit the parent has the jail end the PID namespace (the
kernel removes every process in it before the jail exits) and kills the whole
process group; it reads at most `output_bytes` of each stream, deletes the
temporary directory and classifies the run as one of VERDICTS. A jail whose
parent dies ends too.

Only `os` and `sys` are imported at module level: the jail starts a fresh
interpreter for every program and its start-up is the sandbox's overhead.
"""

from __future__ import annotations

import os
import sys

VERDICTS = ("passed", "failed", "error", "timeout", "memory", "output_limit", "crashed")
ISOLATION = ("auto", "namespaces", "hooks")

# Exit codes of the jail, chosen away from the codes programs usually exit with.
EXIT_FAILED = 101  # an assertion failed
EXIT_ERROR = 102  # any other exception, or the program exited before its end
EXIT_MEMORY = 103  # MemoryError
EXIT_SETUP = 125  # the jail could not set up the isolation it was asked for

_SANDBOX_ENV = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "PYTHONIOENCODING": "utf-8"}


class SandboxError(RuntimeError):
    """The sandbox could not run a program at all (not a verdict on the program)."""


class Limits:
    """What one program may use. Times in seconds, sizes in bytes."""

    __slots__ = ("wall_time", "cpu_time", "memory", "output_bytes", "open_files", "processes")

    def __init__(
        self,
        wall_time: float = 10.0,  # killed after this long, whatever it is doing
        cpu_time: int | None = None,  # RLIMIT_CPU; default: the wall time rounded up
        memory: int = 512 * 2**20,  # RLIMIT_AS: address space, interpreter included
        output_bytes: int = 1 * 2**20,  # RLIMIT_FSIZE: per stream, and per file written
        open_files: int = 64,  # RLIMIT_NOFILE
        processes: int = 32,  # RLIMIT_NPROC; threads count too (new processes are refused anyway)
    ) -> None:
        if wall_time <= 0 or memory <= 0 or output_bytes <= 0 or open_files < 8 or processes < 1:
            raise ValueError("sandbox limits must be positive (open_files at least 8)")
        self.wall_time = float(wall_time)
        self.cpu_time = max(1, int(-(-wall_time // 1))) if cpu_time is None else int(cpu_time)
        self.memory = int(memory)
        self.output_bytes = int(output_bytes)
        self.open_files = int(open_files)
        self.processes = int(processes)

    def __repr__(self) -> str:
        return "Limits(" + ", ".join(f"{name}={getattr(self, name)!r}" for name in self.__slots__) + ")"


class Outcome:
    """How one program ended."""

    __slots__ = ("verdict", "returncode", "wall_time", "cpu_time", "max_rss", "stdout", "stderr", "isolation", "detail")

    def __init__(self, verdict, returncode, wall_time, cpu_time, max_rss, stdout, stderr, isolation, detail):
        self.verdict = verdict  # one of VERDICTS
        self.returncode = returncode  # the jail's exit status (negative: killed by that signal)
        self.wall_time = wall_time  # seconds, from spawn to reaped
        self.cpu_time = cpu_time  # seconds of user + system time
        self.max_rss = max_rss  # bytes
        self.stdout = stdout  # at most output_bytes, decoded with replacement
        self.stderr = stderr
        self.isolation = isolation  # namespaces | hooks
        self.detail = detail  # one line for a report: the last line of a traceback, the limit hit

    @property
    def passed(self) -> bool:
        return self.verdict == "passed"

    def __repr__(self) -> str:
        return (f"Outcome(verdict={self.verdict!r}, wall_time={self.wall_time:.3f}, "
                f"isolation={self.isolation!r}, detail={self.detail!r})")


def run_python(source: str, limits: Limits | None = None, isolation: str = "auto") -> Outcome:
    """Run `source` as a program in the sandbox; never raises for anything the program does."""
    import signal
    import subprocess
    import tempfile
    import time

    limits = limits or Limits()
    if isolation not in ISOLATION:
        raise ValueError(f"isolation must be one of {', '.join(ISOLATION)}, not {isolation!r}")
    if not hasattr(os, "setsid"):
        raise SandboxError("the sandbox needs a POSIX system")
    workdir = os.path.realpath(tempfile.mkdtemp(prefix="bamasc-sandbox-"))
    streams = [tempfile.TemporaryFile(), tempfile.TemporaryFile()]  # unnamed: nothing left behind
    report_read, report_write = os.pipe()
    life_read, life_write = os.pipe()  # the jail ends when this process no longer holds life_write
    started = time.perf_counter()
    process = None
    try:
        with open(os.path.join(workdir, "main.py"), "w", encoding="utf-8") as handle:
            handle.write(source)
        argv = [
            sys.executable, "-I", "-S", "-B", os.path.abspath(__file__),
            workdir, str(limits.cpu_time), str(limits.memory), str(limits.output_bytes),
            str(limits.open_files), str(limits.processes), isolation, str(report_write), str(life_read),
        ]
        process = subprocess.Popen(
            argv, cwd=workdir, env=dict(_SANDBOX_ENV, HOME=workdir, TMPDIR=workdir),
            stdin=subprocess.DEVNULL, stdout=streams[0], stderr=streams[1],
            pass_fds=(report_write, life_read), start_new_session=True,
        )
        os.close(report_write)
        os.close(life_read)
        report_write = life_read = -1
        deadline = started + limits.wall_time
        report = bytearray()
        timed_out = not _wait_exited(process.pid, deadline)
        if timed_out:
            _read_into(report_read, report)
            if b"isolation:namespaces" in report:
                # The jail stops the namespace's first process and waits until the kernel has
                # emptied the namespace, so nothing is left once the jail has exited.
                os.kill(process.pid, signal.SIGTERM)
                _wait_exited(process.pid, time.perf_counter() + 2.0)
        # Whatever is left of the group dies too; the leader is still unreaped, so its id
        # cannot have been reused.
        _kill_group(process.pid)
        _, status, usage = os.wait4(process.pid, 0)
        process.returncode = os.waitstatus_to_exitcode(status)
        wall = time.perf_counter() - started
        _read_into(report_read, report)
        outputs = [_read_capped(stream, limits.output_bytes) for stream in streams]
    finally:
        if process is not None and process.returncode is None:
            _kill_group(process.pid)
            process.wait()
        for fd in (report_read, report_write, life_read, life_write):
            if fd >= 0:
                os.close(fd)
        for stream in streams:
            stream.close()
        _remove_tree(workdir)
    lines = bytes(report).decode("utf-8", "replace").splitlines()
    levels = [line.split(":", 1)[1] for line in lines if line.startswith("isolation:")]
    level = levels[-1] if levels else "unknown"  # the last word: namespaces may fall back late
    setup = next((line.split(":", 1)[1] for line in lines if line.startswith("setup-error:")), None)
    if setup is not None and process.returncode == EXIT_SETUP:
        raise SandboxError(f"the sandbox could not isolate the program: {setup}")
    cpu = usage.ru_utime + usage.ru_stime
    verdict, detail = _classify(
        process.returncode, timed_out, "done" in lines, cpu, limits, [len(data) for data in outputs], outputs[1]
    )
    texts = [data[: limits.output_bytes].decode("utf-8", "replace") for data in outputs]
    return Outcome(verdict, process.returncode, wall, cpu, usage.ru_maxrss * 1024, texts[0], texts[1], level, detail)


def run_many(sources, limits: Limits | None = None, concurrency: int = 2, isolation: str = "auto") -> list[Outcome]:
    """Run every program, `concurrency` at a time; outcomes in the order of `sources`."""
    from concurrent.futures import ThreadPoolExecutor

    sources = list(sources)
    if not sources:
        return []
    with ThreadPoolExecutor(max_workers=max(1, min(concurrency, len(sources)))) as pool:
        return list(pool.map(lambda source: run_python(source, limits, isolation), sources))


_LEVEL: list[str] = []


def isolation_level() -> str:
    """The isolation `auto` reaches on this machine: namespaces or hooks (probed once)."""
    if not _LEVEL:
        _LEVEL.append(run_python("pass", Limits(wall_time=10)).isolation)
    return _LEVEL[0]


# ---------------------------------------------------------------- parent side


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
            while True:
                left = deadline - time.perf_counter()
                if left <= 0:
                    return _exited(pid)
                if poller.poll(max(1, int(left * 1000) + 1)):
                    return True
        finally:
            os.close(handle)
    while time.perf_counter() < deadline:
        if _exited(pid):
            return True
        time.sleep(0.002)
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


def _read_into(fd: int, buffer: bytearray) -> None:
    """Append what the pipe holds now (the jail writes a few short lines)."""
    os.set_blocking(fd, False)
    while len(buffer) < 65536:
        try:
            chunk = os.read(fd, 65536)
        except BlockingIOError:
            break
        if not chunk:
            break
        buffer += chunk


def _read_capped(stream, cap: int) -> bytes:
    stream.seek(0)
    return stream.read(cap + 1)


def _remove_tree(path: str) -> None:
    import shutil

    def retry(function, failed, _):
        # A program may have taken away its own permissions on what it wrote.
        try:
            os.chmod(os.path.dirname(failed), 0o700)
            os.chmod(failed, 0o700)
        except OSError:
            pass
        function(failed)

    shutil.rmtree(path, onerror=retry)


def _classify(returncode, timed_out, done, cpu, limits, sizes, stderr) -> tuple[str, str]:
    import signal

    last = _last_line(stderr)
    if timed_out:
        return "timeout", f"killed after the wall-time limit of {limits.wall_time:g} s"
    if any(size > limits.output_bytes for size in sizes) or (
        any(size >= limits.output_bytes for size in sizes) and returncode != 0
    ):
        return "output_limit", f"wrote more than {limits.output_bytes} bytes to a stream"
    if returncode == 0:
        if done:
            return "passed", ""
        return "error", "the program exited before its end"
    if returncode == EXIT_FAILED:
        return "failed", last or "an assertion failed"
    if returncode == EXIT_MEMORY:
        return "memory", f"MemoryError under the memory limit of {limits.memory // 2**20} MiB"
    if returncode == EXIT_ERROR:
        return "error", last or "the program raised an exception"
    if returncode < 0:
        number = -returncode
        try:
            name = signal.Signals(number).name
        except ValueError:
            name = f"signal {number}"
        # The kernel's CPU accounting and the usage reported at exit differ by a few ticks.
        if number in (signal.SIGXCPU, signal.SIGKILL) and cpu >= 0.8 * limits.cpu_time:
            return "timeout", f"killed at the CPU-time limit of {limits.cpu_time} s"
        if number == signal.SIGXFSZ:
            return "output_limit", f"wrote more than {limits.output_bytes} bytes to a file"
        return "crashed", f"killed by {name}" + (f" ({last})" if last else "")
    return "error", last or f"exited with status {returncode}"


def _last_line(data: bytes) -> str:
    lines = [line.strip() for line in data.decode("utf-8", "replace").splitlines() if line.strip()]
    return lines[-1][:300] if lines else ""


# ---------------------------------------------------------------- the jail (runs in the sandboxed process)

_CLONE_NEWNS, _CLONE_NEWIPC, _CLONE_NEWUSER = 0x20000, 0x8000000, 0x10000000
_CLONE_NEWPID, _CLONE_NEWNET = 0x20000000, 0x40000000
_CLONE_THREAD = 0x10000
_MS_RDONLY, _MS_NOSUID, _MS_NODEV, _MS_NOEXEC = 1, 2, 4, 8
_MS_REMOUNT, _MS_BIND, _MS_MOVE, _MS_REC, _MS_PRIVATE = 32, 4096, 8192, 16384, 1 << 18
_MS_NOATIME, _MS_NODIRATIME, _MS_RELATIME = 1024, 2048, 1 << 21
# statvfs f_flag bits and the mount flags a remount must keep (the kernel locks them in a user namespace).
_KEPT_FLAGS = ((1, _MS_RDONLY), (2, _MS_NOSUID), (4, _MS_NODEV), (8, _MS_NOEXEC), (1024, _MS_NOATIME),
               (2048, _MS_NODIRATIME), (4096, _MS_RELATIME))
_PR_SET_PDEATHSIG, _PR_CAPBSET_DROP, _PR_SET_NO_NEW_PRIVS, _PR_SET_SECCOMP, _PR_CAP_AMBIENT = 1, 24, 38, 22, 47
_SECCOMP_MODE_FILTER = 2
_EPERM, _ENOSYS = 1, 38
_DEVICES = ("null", "zero", "full", "random", "urandom")

# Per architecture: the audit arch, then syscall numbers. `clone` is refused unless it makes a
# thread; `clone3` answers ENOSYS so the C library falls back to `clone`, whose flags the
# filter can read.
_SYSCALLS = {
    "x86_64": (
        0xC000003E,
        {"clone": 56, "clone3": 435},
        {"fork": 57, "vfork": 58, "execve": 59, "execveat": 322, "ptrace": 101, "socket": 41, "setsid": 112,
         "setpgid": 109, "unshare": 272, "setns": 308, "mount": 165, "umount2": 166, "pivot_root": 155,
         "chroot": 161, "process_vm_readv": 310, "process_vm_writev": 311, "open_tree": 428, "move_mount": 429,
         "fsopen": 430, "fsconfig": 431, "fsmount": 432, "fspick": 433, "mount_setattr": 442},
    ),
    "aarch64": (
        0xC00000B7,
        {"clone": 220, "clone3": 435},
        {"execve": 221, "execveat": 281, "ptrace": 117, "socket": 198, "setsid": 157, "setpgid": 154,
         "unshare": 97, "setns": 268, "mount": 40, "umount2": 39, "pivot_root": 41, "chroot": 51,
         "process_vm_readv": 270, "process_vm_writev": 271, "open_tree": 428, "move_mount": 429, "fsopen": 430,
         "fsconfig": 431, "fsmount": 432, "fspick": 433, "mount_setattr": 442},
    ),
}


def _jail(argv: list[str]) -> None:
    workdir, cpu, memory, output, files, processes, isolation, report_fd, life_fd = argv
    import resource

    report, life = int(report_fd), int(life_fd)

    def say(line: str) -> None:
        try:
            os.write(report, (line + "\n").encode("utf-8", "replace"))
        except OSError:
            pass

    limits = (
        (resource.RLIMIT_CORE, 0),
        (resource.RLIMIT_CPU, int(cpu)),
        (resource.RLIMIT_AS, int(memory)),
        (resource.RLIMIT_FSIZE, int(output)),
        (resource.RLIMIT_NOFILE, int(files)),
    )
    for kind, value in limits:
        resource.setrlimit(kind, (value, value))
    level = "hooks"
    if isolation != "hooks":
        try:
            _namespaces(workdir)
            level = "namespaces"
        except OSError as problem:
            if isolation == "namespaces":
                say(f"setup-error:{problem}")
                os._exit(EXIT_SETUP)
    say(f"isolation:{level}")
    if level == "namespaces":
        _init_and_wait(life)  # returns in the child: PID 1 of the new namespace
        try:
            _inside(workdir)
            os.close(life)
        except OSError as problem:
            if isolation == "namespaces":
                say(f"setup-error:{problem}")
                os._exit(EXIT_SETUP)
            level = "hooks"
            say(f"isolation:{level}")
    _set_process_limit(resource, int(processes))
    if level == "hooks":
        _watch_parent(life)
        _install_hooks(workdir)
    os.chdir(workdir)
    _run_program(workdir, report)


def _watch_parent(life: int) -> None:
    """End the jail when the parent is gone (killed, interrupted), instead of at its CPU limit:
    the parent holds the only write end of the `life` pipe, so a read returns when it dies."""
    import threading

    def watch(read=os.read, end=os._exit):
        try:
            read(life, 1)
        except OSError:
            pass
        end(EXIT_SETUP)

    threading.Thread(target=watch, daemon=True).start()


def _run_program(workdir: str, report: int) -> None:
    try:
        with open("main.py", encoding="utf-8") as handle:
            source = handle.read()
        code = compile(source, os.path.join(workdir, "main.py"), "exec")
        exec(code, {"__name__": "__main__", "__file__": "main.py", "__builtins__": __builtins__})
        sys.stdout.flush()
        sys.stderr.flush()
    except MemoryError:
        os._exit(EXIT_MEMORY)
    except AssertionError:
        _print_exception()
        os._exit(EXIT_FAILED)
    except SystemExit as stop:
        _write_stderr(f"the program called exit({stop.code!r}) before its end\n")
        os._exit(EXIT_ERROR)
    except BaseException:
        _print_exception()
        os._exit(EXIT_ERROR)
    try:
        os.write(report, b"done\n")
    except OSError:
        pass
    os._exit(0)


def _print_exception() -> None:
    try:
        import traceback

        traceback.print_exc()
        sys.stderr.flush()
    except BaseException:
        os._exit(EXIT_ERROR)


def _write_stderr(text: str) -> None:
    try:
        sys.stderr.write(text)
        sys.stderr.flush()
    except BaseException:
        pass


def _set_process_limit(resource, processes: int) -> None:
    try:
        resource.setrlimit(resource.RLIMIT_NPROC, (processes, processes))
    except (ValueError, OSError):
        pass


def _libc():
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    return ctypes, libc


def _call(ctypes, result: int, what: str) -> None:
    if result != 0:
        number = ctypes.get_errno()
        raise OSError(number, f"{what}: {os.strerror(number)}")


def _namespaces(workdir: str) -> None:
    """New mount, network, PID and IPC namespaces (and a user namespace when not root);
    every mount read-only but `workdir`."""
    machine = os.uname().machine
    if machine not in _SYSCALLS:
        raise OSError(_ENOSYS, f"no seccomp filter for {machine}")
    ctypes, libc = _libc()
    flags = _CLONE_NEWNS | _CLONE_NEWNET | _CLONE_NEWPID | _CLONE_NEWIPC
    uid, gid = os.geteuid(), os.getegid()
    if uid != 0:
        flags |= _CLONE_NEWUSER
    _call(ctypes, libc.unshare(flags), "unshare")
    if uid != 0:
        for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"), ("gid_map", f"{gid} {gid} 1")):
            with open(f"/proc/self/{name}", "w") as handle:
                handle.write(text)
    mount = libc.mount
    mount.argtypes = (ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p)
    _call(ctypes, mount(None, b"/", None, _MS_REC | _MS_PRIVATE, None), "make / private")
    target = workdir.encode()
    _call(ctypes, mount(target, target, None, _MS_BIND, None), "bind the temporary directory")
    for point in _mount_points():
        if point == workdir:
            continue
        try:
            kept = _kept_flags(point)
        except OSError:
            continue  # not reachable from here: nothing can be written through it either
        if kept & _MS_RDONLY:
            continue
        result = mount(None, point.encode(), None, _MS_REMOUNT | _MS_BIND | _MS_RDONLY | kept, None)
        _call(ctypes, result, f"remount {point} read-only")


def _mount_points() -> list[str]:
    points = []
    with open("/proc/self/mountinfo", encoding="utf-8", errors="surrogateescape") as handle:
        for line in handle:
            field = line.split(" ")[4]
            points.append(_unescape(field))
    return points


def _unescape(field: str) -> str:
    # mountinfo writes space, tab, newline and backslash as \ooo.
    if "\\" not in field:
        return field
    out, i = [], 0
    while i < len(field):
        if field[i] == "\\" and field[i + 1 : i + 4].isdigit():
            out.append(chr(int(field[i + 1 : i + 4], 8)))
            i += 4
        else:
            out.append(field[i])
            i += 1
    return "".join(out)


def _kept_flags(point: str) -> int:
    found = os.statvfs(point).f_flag
    flags = 0
    for bit, flag in _KEPT_FLAGS:
        if found & bit:
            flags |= flag
    return flags


def _init_and_wait(life: int) -> None:
    """Fork the PID namespace's first process; this process waits for it and mirrors its end."""
    import signal

    pid = os.fork()
    if pid == 0:
        return

    def stop(number, frame):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    # The parent's wall-time limit arrives as SIGTERM: end the namespace, then report as usual.
    signal.signal(signal.SIGTERM, stop)
    # This process cannot start threads (it lives outside the PID namespace its children
    # enter), so it watches the parent's life pipe and the child's exit together.
    try:
        child = os.pidfd_open(pid)
    except (AttributeError, OSError):
        child = None
    if child is not None:
        import select

        poller = select.poll()
        poller.register(child, select.POLLIN)
        poller.register(life, select.POLLIN)
        while True:
            ready = {fd for fd, _ in poller.poll()}
            if child in ready:
                break
            if life in ready:  # the parent is gone
                stop(signal.SIGKILL, None)
                break
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        number = os.WTERMSIG(status)
        if number not in (signal.SIGKILL, signal.SIGSTOP):
            signal.signal(number, signal.SIG_DFL)
        os.kill(os.getpid(), number)
    os._exit(os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else 1)


def _inside(workdir: str) -> None:
    """In PID 1 of the new namespace: private /proc and /dev, then no capabilities, then seccomp."""
    import signal

    ctypes, libc = _libc()
    prctl = libc.prctl
    prctl.argtypes = (ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong)
    _call(ctypes, prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0), "set the parent-death signal")
    mount = libc.mount
    mount.argtypes = (ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p)
    hidden = _MS_NOSUID | _MS_NODEV | _MS_NOEXEC | _MS_RDONLY
    if mount(b"proc", b"/proc", b"proc", hidden, None) != 0:
        # A container that masks parts of /proc forbids a new proc: hide it all instead.
        _call(ctypes, mount(b"none", b"/proc", b"tmpfs", hidden, b"size=4k,mode=555"), "hide /proc")
    _private_dev(ctypes, mount, workdir)
    for capability in range(64):
        if prctl(_PR_CAPBSET_DROP, capability, 0, 0, 0) != 0:
            break  # past the last capability this kernel knows
    prctl(_PR_CAP_AMBIENT, 4, 0, 0, 0)  # PR_CAP_AMBIENT_CLEAR_ALL
    header = (ctypes.c_uint32 * 2)(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3, this process
    data = (ctypes.c_uint32 * 6)()
    _call(ctypes, libc.capset(header, data), "drop capabilities")
    _call(ctypes, prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "set no_new_privs")
    program = _seccomp_program(ctypes)
    _call(ctypes, prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.addressof(program), 0, 0), "install seccomp")


def _private_dev(ctypes, mount, workdir: str) -> None:
    staging = os.path.join(workdir, ".dev")
    os.mkdir(staging, 0o755)
    _call(ctypes, mount(b"none", staging.encode(), b"tmpfs", _MS_NOSUID | _MS_NOEXEC, b"size=64k,mode=755"), "mount /dev")
    for name in _DEVICES:
        node = os.path.join(staging, name)
        open(node, "w").close()
        _call(ctypes, mount(f"/dev/{name}".encode(), node.encode(), None, _MS_BIND, None), f"bind /dev/{name}")
    for name, link in (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"), ("stdout", "/proc/self/fd/1"),
                       ("stderr", "/proc/self/fd/2")):
        os.symlink(link, os.path.join(staging, name))
    _call(ctypes, mount(staging.encode(), b"/dev", None, _MS_MOVE, None), "move /dev into place")
    readonly = _MS_REMOUNT | _MS_BIND | _MS_RDONLY | _MS_NOSUID | _MS_NOEXEC
    _call(ctypes, mount(None, b"/dev", None, readonly, None), "make /dev read-only")
    os.rmdir(staging)


def _seccomp_program(ctypes):
    """A classic BPF program: refuse process creation, exec, sockets, ptrace, sessions and mounts."""
    arch, clones, refused = _SYSCALLS[os.uname().machine]
    load, jump_eq, jump_set, ret = 0x20, 0x15, 0x45, 0x06
    allow, kill = 0x7FFF0000, 0x80000000
    errno = lambda number: 0x00050000 | number  # noqa: E731
    code = [(load, 0, 0, 4), (jump_eq, 1, 0, arch), (ret, 0, 0, kill), (load, 0, 0, 0)]
    if arch == 0xC000003E:  # x32 system calls share the architecture; refuse them all
        code += [(0x35, 0, 1, 0x40000000), (ret, 0, 0, errno(_ENOSYS))]  # jge
    for number in sorted(refused.values()):
        code += [(jump_eq, 0, 1, number), (ret, 0, 0, errno(_EPERM))]
    code += [(jump_eq, 0, 1, clones["clone3"]), (ret, 0, 0, errno(_ENOSYS))]
    code += [(jump_eq, 1, 0, clones["clone"]), (ret, 0, 0, allow)]
    code += [(load, 0, 0, 16), (jump_set, 0, 1, _CLONE_THREAD), (ret, 0, 0, allow), (ret, 0, 0, errno(_EPERM))]

    class Filter(ctypes.Structure):
        _fields_ = [("code", ctypes.c_uint16), ("jt", ctypes.c_uint8), ("jf", ctypes.c_uint8), ("k", ctypes.c_uint32)]

    class Program(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(Filter))]

    filters = (Filter * len(code))(*[Filter(*entry) for entry in code])
    program = Program(len(code), filters)
    program._keep = filters  # the filter array must outlive the prctl call
    return program


_HOOKED_PROCESS_EVENTS = frozenset(
    {"os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork", "os.forkpty", "subprocess.Popen",
     "pty.spawn", "os.startfile", "ctypes.dlopen", "ctypes.dlsym", "ctypes.dlsym/handle", "ctypes.cdata",
     "resource.setrlimit", "resource.prlimit", "socket.__new__", "socket.connect", "socket.bind",
     "socket.sendto", "socket.sendmsg", "socket.getaddrinfo", "os.setns", "os.unshare"}
)
# Re-importing these (after deleting them from sys.modules) would restore what the guard removed.
_BLOCKED_IMPORTS = frozenset({"_posixsubprocess", "subprocess", "ctypes", "_ctypes", "posix", "_signal", "signal"})
# Calls no audit event covers: signals through process file descriptors, a bare fork-and-exec.
_REMOVED = (("posix", "pidfd_open"), ("os", "pidfd_open"), ("_signal", "pidfd_send_signal"),
            ("signal", "pidfd_send_signal"), ("_posixsubprocess", "fork_exec"))
_PATH_EVENTS = {
    "os.remove": (0,), "os.rmdir": (0,), "os.mkdir": (0,), "os.rename": (0, 1), "os.replace": (0, 1),
    "os.symlink": (1,), "os.link": (0, 1), "os.chmod": (0,), "os.chown": (0,), "os.truncate": (0,),
    "os.utime": (0,), "os.mkfifo": (0,), "os.mknod": (0,), "shutil.rmtree": (0,), "shutil.copyfile": (1,),
    "shutil.move": (1,), "os.chflags": (0,), "os.lchown": (0,), "os.setxattr": (0,), "os.removexattr": (0,),
}


def _install_hooks(workdir: str) -> None:
    """The fallback guard: an audit hook that refuses what the namespaces would have stopped."""
    import importlib
    import subprocess

    def refuse(*args, **kwargs):
        raise PermissionError("sandbox: starting a process is not allowed")

    subprocess._fork_exec = refuse  # its own copy of _posixsubprocess.fork_exec, which no event audits
    for module, name in _REMOVED:
        try:
            delattr(importlib.import_module(module), name)
        except (ImportError, AttributeError):
            pass
    inside = workdir.rstrip("/") + "/"
    own = os.getpid()
    realpath, fspath = os.path.realpath, os.fspath
    write_flags = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND

    def outside(path) -> bool:
        if isinstance(path, int):
            return False  # an open descriptor: it was opened under this same guard
        try:
            text = fspath(path)
            if isinstance(text, bytes):
                text = text.decode("utf-8", "surrogateescape")
            resolved = realpath(os.path.join(workdir, text))
        except Exception:
            return True
        return not (resolved + "/").startswith(inside)

    def guard(event: str, args) -> None:
        if event in _HOOKED_PROCESS_EVENTS:
            raise PermissionError(f"sandbox: {event} is not allowed")
        if event == "import" and args[0] in _BLOCKED_IMPORTS:
            raise PermissionError(f"sandbox: importing {args[0]} again is not allowed")
        if event == "open":
            path, mode, flags = args
            writing = (isinstance(mode, str) and any(c in mode for c in "wax+")) or bool((flags or 0) & write_flags)
            if writing and path is not None and outside(path):
                raise PermissionError(f"sandbox: writing outside the temporary directory is not allowed: {path}")
        elif event in _PATH_EVENTS:
            for index in _PATH_EVENTS[event]:
                if index < len(args) and args[index] is not None and outside(args[index]):
                    raise PermissionError(f"sandbox: {event} outside the temporary directory is not allowed")
        elif event in ("os.kill", "os.killpg", "signal.pthread_kill"):
            if event != "signal.pthread_kill" and args[0] != own:
                raise PermissionError("sandbox: signals to other processes are not allowed")

    sys.addaudithook(guard)


if __name__ == "__main__":
    _jail(sys.argv[1:])
