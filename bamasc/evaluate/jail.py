"""The jails: a keeper process starts the tests' jail and the candidate's jail; each builds itself inside.

The parent (`sandbox.py`) starts this module in `python -I -S -B -c BOOTSTRAP`:
a fresh interpreter, so nothing of the parent's memory (API keys, the
dataset, reference solutions) is there to read. This keeper stays outside
every namespace. For each part (the tests, then the candidate) it forks a
warden, which enters new user, mount, PID, network, IPC, UTS and cgroup
namespaces (the keeper writes its ID map: uid and gid 65534, which is
`nobody` on the host when the keeper is root and the user's own IDs
otherwise) and forks the jail's first process. That process:

1. opens the folders it will mount, then, as root, becomes `nobody` on the
   host, so root's files are unreadable even through what it mounts (a
   Python under `/root` still works: its folders are already open);
2. builds a root on a small tmpfs: read-only, nosuid, nodev bind mounts of
   the standard library and the folders of the interpreter's shared
   libraries, `/dev/{null,zero,full,random,urandom}`, and `/tmp`, the
   scratch space: a tmpfs of `disk` bytes and `disk_files` inodes, nosuid,
   nodev, noexec; there is no `/proc`; it pivots into that root, detaches
   the host's and makes the root read-only (`confine.py`);
3. sets its rlimits, closes every descriptor its part does not need, drops
   every capability, sets no_new_privs, and loads the seccomp allowlist;
4. runs its part: `plain.serve` (the candidate) or `plain.judge` (the tests,
   which write the verdict to a pipe only they hold).

A warden waits for its jail and kills it when the keeper says stop or dies;
the kernel removes every process of a PID namespace before its first
process can be reaped, and the mount namespace and its tmpfs go with the
last of them. The keeper reports the parts' exit statuses and any setup
failure on a pipe of its own. With isolation `hooks` there are no
namespaces: both parts get the rlimits, no capabilities and the seccomp
filter where this architecture has one, and the candidate `hooks.install`
in a temporary folder. That is not a sandbox (see `hooks.py`).
"""

from __future__ import annotations

import json
import os
import select
import signal
import sys

if __package__:
    from bamasc.evaluate import confine, hooks, plain, seccomp
else:
    # Started by `sandbox.BOOTSTRAP` under -I -S: neither the project nor site-packages is importable,
    # so this folder is on the path while the siblings load (from their cached bytecode).
    import confine
    import hooks
    import plain
    import seccomp

_NAMESPACES = 0x20000 | 0x2000000 | 0x4000000 | 0x8000000 | 0x10000000 | 0x20000000 | 0x40000000
_PR_SET_PDEATHSIG = 1
_TESTS_DISK, _TESTS_FILES = 1 << 20, 64  # the tests' scratch space: they write nothing
_TESTS_OUTPUT = 64 * 1024  # what the tests' process may log


def main(argv: list[str]) -> None:
    config = json.loads(argv[0])

    def say(line: str) -> None:
        _tell(config["report"], line)

    try:
        _keep(config, say)
    except BaseException as problem:  # a refusal of the machine's: the parent reports it, never a verdict
        say(f"setup-error:keeper:{type(problem).__name__}: {problem}")
    os._exit(0)


class _Context:
    """What every process of one run needs: the settings, the C library, the root to build."""

    def __init__(self, config: dict) -> None:
        self.namespaces = config["isolation"] == "namespaces"
        self.limits = config["limits"]
        self.keeper = os.getpid()
        self.host_root = os.geteuid() == 0
        self.machine = os.uname().machine
        self.libc = confine.Libc() if sys.platform.startswith("linux") else None
        self.binds: list[str] = []
        self.links: list[tuple[str, str]] = []
        self.workdir = None
        if self.namespaces:
            if self.libc is None or self.machine not in seccomp.ARCHITECTURES or self.machine not in confine.PIVOT_ROOT:
                raise OSError(f"no jail for {sys.platform} on {self.machine}")
            self.binds = confine.interpreter_folders()
            self.links = [(name, os.readlink("/" + name)) for name in confine.LIB_LINKS if os.path.islink("/" + name)]
        else:
            import tempfile

            self.workdir = os.path.realpath(tempfile.mkdtemp(prefix="bamasc-sandbox-", dir=config["tmp"]))


def _keep(config: dict, say) -> None:
    context = _Context(config)
    say(f"isolation:{config['isolation']}")
    calls_r, calls_w = os.pipe()
    replies_r, replies_w = os.pipe()
    wardens = [_spawn("tester", context, {"job": config["tester_job"], "requests": calls_w,
                                          "replies": replies_r, "verdict": config["verdict"],
                                          "log": config["tester_log"]})]
    for fd in (config["tester_job"], config["verdict"], config["tester_log"], calls_w, replies_r):
        os.close(fd)
    wardens.append(_spawn("candidate", context, {"job": config["candidate_job"], "requests": calls_r,
                                                 "replies": replies_w}))
    for fd in (config["candidate_job"], calls_r, replies_w):
        os.close(fd)
    _supervise(config["life"], wardens, say)
    if context.workdir is not None:
        _remove_tree(context.workdir)


class _Warden:
    def __init__(self, role: str, pid: int, channel: int, stop: int) -> None:
        self.role, self.pid, self.channel, self.stop = role, pid, channel, stop
        self.buffer = b""
        self.pending: list[str] = []  # lines read before supervision began
        self.open = True

    def lines(self, block: bool) -> list[str]:
        """The whole lines the warden has written; at its end the channel is closed."""
        if not block:
            os.set_blocking(self.channel, False)
        try:
            chunk = os.read(self.channel, 65536)
        except BlockingIOError:
            chunk = None
        if chunk == b"":
            self.open = False
        self.buffer += chunk or b""
        *done, self.buffer = self.buffer.split(b"\n")
        return [line.decode("utf-8", "replace") for line in done]

    def end(self) -> None:
        if self.stop >= 0:
            os.close(self.stop)
            self.stop = -1


def _spawn(role: str, context: _Context, fds: dict) -> _Warden:
    mapped_r, mapped_w = os.pipe()  # keeper -> warden: the ID map is written
    channel_r, channel_w = os.pipe()  # warden (and its jail while it sets up) -> keeper
    stop_r, stop_w = os.pipe()  # closed by the keeper: end the jail
    pid = os.fork()
    if pid == 0:
        try:
            for fd in (mapped_w, channel_r, stop_w):
                os.close(fd)
            _warden(role, context, fds, mapped_r, channel_w, stop_r)
        except BaseException as problem:
            _tell(channel_w, f"error:{role}: {type(problem).__name__}: {problem}")
        os._exit(125)
    for fd in (mapped_r, channel_w, stop_r):
        os.close(fd)
    warden = _Warden(role, pid, channel_r, stop_w)
    if context.namespaces:
        warden.pending = warden.lines(block=True)
        if warden.pending[:1] == ["unshared"]:
            del warden.pending[0]
            _write_maps(pid, context.host_root)
            os.write(mapped_w, b"m")
    os.close(mapped_w)
    return warden


def _write_maps(pid: int, host_root: bool) -> None:
    if host_root:  # root may map any ID: the jail is nobody on the host
        uid, gid = confine.NOBODY, confine.NOBODY
    else:  # one's own IDs are the only ones a user may map
        uid, gid = os.geteuid(), os.getegid()
        with open(f"/proc/{pid}/setgroups", "w") as handle:
            handle.write("deny")
    for name, outside in (("uid_map", uid), ("gid_map", gid)):
        with open(f"/proc/{pid}/{name}", "w") as handle:
            handle.write(f"{confine.NOBODY} {outside} 1")


def _supervise(life: int, wardens: list[_Warden], say) -> None:
    """Relay what the wardens say; stop the candidate once the tests end, and both when the parent
    closes the life pipe (or dies)."""
    tester, candidate = wardens
    poller = select.poll()
    poller.register(life, select.POLLIN)
    for warden in wardens:
        poller.register(warden.channel, select.POLLIN)
    for warden in wardens:
        for line in warden.pending:
            _relay(line, warden.role, say)
        if not warden.open:
            poller.unregister(warden.channel)
            os.waitpid(warden.pid, 0)
    while tester.open or candidate.open:
        if not tester.open:
            candidate.end()
        ready = {fd for fd, _ in poller.poll()}
        if life in ready:
            poller.unregister(life)
            for warden in wardens:
                warden.end()
        for warden in wardens:
            if warden.open and warden.channel in ready:
                for line in warden.lines(block=False):
                    _relay(line, warden.role, say)
                if not warden.open:
                    poller.unregister(warden.channel)
                    os.waitpid(warden.pid, 0)
    for warden in wardens:
        warden.end()


def _relay(line: str, role: str, say) -> None:
    kind, _, text = line.partition(":")
    say(f"setup-error:{text}" if kind == "error" else f"status:{role}:{text}")


def _tell(fd: int, line: str) -> None:
    try:
        os.write(fd, (line.replace("\n", " ") + "\n").encode("utf-8", "replace"))
    except OSError:
        pass


# ---------------------------------------------------------------- the warden


def _warden(role: str, context: _Context, fds: dict, mapped: int, channel: int, stop: int) -> None:
    libc = context.libc
    if libc is not None:
        libc.check(libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0), "set the parent-death signal")
    if os.getppid() != context.keeper:
        os._exit(1)  # the keeper died before the line above
    _close_all_but([mapped, channel, stop, *fds.values()])
    if context.namespaces:
        libc.check(libc.unshare(_NAMESPACES), "unshare the namespaces")
        _tell(channel, "unshared")
        if os.read(mapped, 1) != b"m":
            os._exit(1)
    os.close(mapped)
    alive_r, alive_w = os.pipe()  # the jail's first process ends if the warden is gone before it can know
    pid = os.fork()
    if pid == 0:
        os.close(alive_w)
        os.close(stop)
        _jail(role, context, fds, alive_r, channel)
    os.close(alive_r)
    for fd in fds.values():
        os.close(fd)
    _tell(channel, "status:" + _wait(pid, stop))
    os._exit(0)


def _wait(pid: int, stop: int) -> str:
    """Wait for the jail to end, or kill it when `stop` closes; its wait status as text."""
    handle = os.pidfd_open(pid) if hasattr(os, "pidfd_open") else None
    poller = select.poll()
    poller.register(stop, select.POLLIN)
    if handle is not None:
        poller.register(handle, select.POLLIN)
    while True:
        ready = {fd for fd, _ in poller.poll(None if handle is not None else 20)}
        if stop in ready:
            os.kill(pid, signal.SIGKILL)
            break
        if handle is not None and handle in ready:
            break
        if handle is None:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                return str(status)
    _, status = os.waitpid(pid, 0)  # a PID namespace's first process is reaped only once it is empty
    return str(status)


# ---------------------------------------------------------------- the jail's first process


def _jail(role: str, context: _Context, fds: dict, alive: int, channel: int) -> None:
    leave = os._exit  # kept: the candidate may rebind os._exit in its own process
    libc = context.libc
    try:
        if libc is not None:
            libc.check(libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0), "set the parent-death signal")
        if select.select([alive], [], [], 0)[0]:
            leave(1)  # the warden is gone (nothing is ever written to this pipe)
        os.close(alive)
        os.setsid()  # its own session and group: a signal to "group 0" reaches only itself
        job = json.loads(_read_all(fds.pop("job")))
        if "log" in fds:
            log = fds.pop("log")
            os.dup2(log, 1)
            os.dup2(log, 2)
            os.close(log)
        if context.namespaces:
            limits = context.limits
            disk = (limits["disk"], limits["disk_files"]) if role == "candidate" else (_TESTS_DISK, _TESTS_FILES)
            confine.build_root(libc, context.binds, context.links, context.machine, context.host_root, *disk)
        else:
            os.chdir(context.workdir if role == "candidate" else "/")
        confine.set_limits(context.limits, context.limits["output"] if role == "candidate" else _TESTS_OUTPUT)
        _close_all_but([*fds.values(), channel])
        if libc is not None:
            confine.lock(libc, context.machine, seccomp)
        os.close(channel)
    except BaseException as problem:
        _tell(channel, f"error:{role}: {type(problem).__name__}: {problem}")
        leave(125)
    sys.argv = ["main.py"]
    try:
        if role == "candidate":
            if not context.namespaces:
                os.environ["HOME"] = os.environ["TMPDIR"] = context.workdir  # the one folder it may write
                hooks.install(context.workdir)
            plain.serve(job, fds["requests"], fds["replies"])
        else:
            verdict, detail = plain.judge(job, plain.Link(fds["requests"], fds["replies"]))
            said = json.dumps({"verdict": verdict, "detail": detail[:2000]})  # one line the parent reads whole
            os.write(fds["verdict"], said.encode("ascii") + b"\n")
    except BaseException:
        try:  # the candidate may have broken even this, in its own process
            import traceback

            traceback.print_exc()
        except BaseException:
            pass
        leave(1)
    leave(0)


# ---------------------------------------------------------------- helpers


def _close_all_but(keep) -> None:
    low = 3
    for fd in sorted(set(keep)):
        if fd >= low:
            os.closerange(low, fd)
            low = fd + 1
    os.closerange(low, max(low, os.sysconf("SC_OPEN_MAX")))


def _read_all(fd: int) -> bytes:
    os.lseek(fd, 0, os.SEEK_SET)
    chunks = []
    while chunk := os.read(fd, 1 << 20):
        chunks.append(chunk)
    os.close(fd)
    return b"".join(chunks)


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

