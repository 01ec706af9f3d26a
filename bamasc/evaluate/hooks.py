"""The `hooks` fallback: a Python audit hook around the candidate where no jail can be built. NOT a sandbox.

An audit hook runs inside the interpreter it guards, so hostile code can get
around it (through the interpreter's own objects, a bug, or a call no event
covers), and it cannot hide the machine's files from reads. This level only
catches mistakes; the sandbox refuses to use it unless asked explicitly
(`--unsafe-hooks`), and says so on every run.

It refuses process creation, sockets, ctypes, `resource.setrlimit`, signals
to other processes and writes outside the working directory. Its tables live
in the hook's closure, not in module globals a program could rebind.
"""

from __future__ import annotations

import os
import sys

_REFUSED_EVENTS = frozenset(
    {"os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork", "os.forkpty", "subprocess.Popen",
     "pty.spawn", "os.startfile", "ctypes.dlopen", "ctypes.dlsym", "ctypes.dlsym/handle", "ctypes.cdata",
     "resource.setrlimit", "resource.prlimit", "socket.__new__", "socket.connect", "socket.bind",
     "socket.sendto", "socket.sendmsg", "socket.getaddrinfo", "os.setns", "os.unshare", "mmap.__new__"}
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


def install(workdir: str) -> None:
    """Guard the rest of this interpreter's life."""
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
    realpath, join, fspath = os.path.realpath, os.path.join, os.fspath
    write_flags = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
    refused, blocked, path_events = _REFUSED_EVENTS, _BLOCKED_IMPORTS, dict(_PATH_EVENTS)
    is_int, is_str, is_bytes = int, str, bytes

    def outside(path) -> bool:
        if type(path) is is_int:
            return False  # an open descriptor: it was opened under this same guard
        try:
            text = fspath(path)
            if type(text) is is_bytes:
                text = text.decode("utf-8", "surrogateescape")
            resolved = realpath(join(workdir, text))
        except Exception:
            return True
        return not (resolved + "/").startswith(inside)

    def guard(event: str, args) -> None:
        if event in refused:
            raise PermissionError(f"sandbox: {event} is not allowed")
        if event == "import" and args[0] in blocked:
            raise PermissionError(f"sandbox: importing {args[0]} again is not allowed")
        if event == "open":
            path, mode, flags = args
            writing = (type(mode) is is_str and any(c in mode for c in "wax+")) or bool((flags or 0) & write_flags)
            if writing and path is not None and outside(path):
                raise PermissionError(f"sandbox: writing outside the working directory is not allowed: {path}")
        elif event in path_events:
            for index in path_events[event]:
                if index < len(args) and args[index] is not None and outside(args[index]):
                    raise PermissionError(f"sandbox: {event} outside the working directory is not allowed")
        elif event in ("os.kill", "os.killpg"):
            if args[0] != own:
                raise PermissionError("sandbox: signals to other processes are not allowed")

    sys.addaudithook(guard)
