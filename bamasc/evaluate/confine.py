"""What a jail's first process does to itself: its own root, its identity, its limits, its lock.

Used by `jail.py` (see there for the order and the reasons). A root holds
read-only bind mounts of the standard library and of the folders of the
interpreter's shared libraries, five devices, and `/tmp`, a size-capped
nosuid, nodev, noexec tmpfs; nothing else of the host, and no `/proc`.
"""

from __future__ import annotations

import os
import sys

NOBODY = 65534
PIVOT_ROOT = {"x86_64": 155, "aarch64": 41}  # the machines the jail supports (seccomp.ARCHITECTURES too)
_MS_RDONLY, _MS_NOSUID, _MS_NODEV, _MS_NOEXEC, _MS_REMOUNT = 1, 2, 4, 8, 32
_MS_BIND, _MS_REC, _MS_PRIVATE = 4096, 16384, 1 << 18
_MNT_DETACH = 2
# statvfs f_flag bits and the mount flags a read-only remount must keep (locked in a user namespace).
_KEPT_FLAGS = ((1, _MS_RDONLY), (2, _MS_NOSUID), (4, _MS_NODEV), (8, _MS_NOEXEC), (1024, 1024),
               (2048, 2048), (4096, 1 << 21))
_PR_SET_DUMPABLE, _PR_CAPBSET_DROP, _PR_SET_NO_NEW_PRIVS, _PR_CAP_AMBIENT = 4, 24, 38, 47
_DEVICES = ("null", "zero", "full", "random", "urandom")
LIB_LINKS = ("lib", "lib32", "lib64", "libx32")
_STAGING = "/tmp"  # where the new root is put together, in the jail's own mount namespace
_ROOT_SIZE = "size=1m,nr_inodes=1024,mode=755"  # the root itself holds only folders and mount points


def build_root(libc, binds: list[str], links: list[tuple[str, str]], machine: str, host_root: bool,
               disk: int, files: int) -> None:
    """Become nobody (as root), build the root and pivot into it; the working folder is then /tmp."""
    # Opened while still host root in the root case: the interpreter may sit in a folder only
    # root can search. Bind mounts then start from these descriptors, not from paths.
    sources = [(path, os.open(path, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)) for path in binds]
    if host_root:
        os.setgroups([])
        os.setresgid(NOBODY, NOBODY, NOBODY)
        os.setresuid(NOBODY, NOBODY, NOBODY)
    root = _STAGING
    libc.mount(None, "/", None, _MS_REC | _MS_PRIVATE, None, "make / private")
    libc.mount("none", root, "tmpfs", _MS_NOSUID | _MS_NODEV | _MS_NOEXEC, _ROOT_SIZE, "mount the root")
    os.mkdir(root + "/tmp", 0o755)
    options = f"size={disk},nr_inodes={files},mode=700"
    libc.mount("none", root + "/tmp", "tmpfs", _MS_NOSUID | _MS_NODEV | _MS_NOEXEC, options, "mount the scratch space")
    for path, fd in sources:
        target = root + path
        os.makedirs(target, 0o755, exist_ok=True)
        libc.mount(f"/proc/self/fd/{fd}", target, None, _MS_BIND | _MS_REC, None, f"bind {path}")
        _read_only(libc, target, _MS_NOSUID | _MS_NODEV)
        os.close(fd)
    for name, link in links:
        os.symlink(link, f"{root}/{name}")
    os.mkdir(root + "/dev", 0o755)
    for name in _DEVICES:
        node = f"{root}/dev/{name}"
        os.close(os.open(node, os.O_CREAT | os.O_WRONLY, 0o644))
        libc.mount(f"/dev/{name}", node, None, _MS_BIND, None, f"bind /dev/{name}")
        _read_only(libc, node, _MS_NOSUID | _MS_NOEXEC)
    os.chdir(root)
    # pivot_root(".", "."): the old root ends up stacked on the new one, and is detached at once.
    libc.check(libc.syscall(PIVOT_ROOT[machine], b".", b"."), "pivot into the new root")
    libc.check(libc.umount2(b".", _MNT_DETACH), "detach the host's root")
    os.chdir("/")
    libc.mount(None, "/", None, _MS_REMOUNT | _MS_BIND | _MS_RDONLY | _MS_NOSUID | _MS_NODEV | _MS_NOEXEC, None,
               "make the root read-only")
    os.chdir("/tmp")


def _read_only(libc, target: str, extra: int) -> None:
    found = os.statvfs(target).f_flag
    kept = 0
    for bit, flag in _KEPT_FLAGS:
        if found & bit:
            kept |= flag
    libc.mount(None, target, None, _MS_REMOUNT | _MS_BIND | _MS_RDONLY | extra | kept, None, f"make {target} read-only")


def set_limits(limits: dict, output: int) -> None:
    import resource

    for kind, value in ((resource.RLIMIT_CORE, 0), (resource.RLIMIT_CPU, limits["cpu"]),
                        (resource.RLIMIT_AS, limits["memory"]), (resource.RLIMIT_FSIZE, output),
                        (resource.RLIMIT_NOFILE, limits["files"]), (resource.RLIMIT_MEMLOCK, 0)):
        resource.setrlimit(kind, (value, value))
    try:  # threads count too; the kernel enforces it only for users other than root
        resource.setrlimit(resource.RLIMIT_NPROC, (limits["threads"], limits["threads"]))
    except (ValueError, OSError):
        pass


def lock(libc, machine: str, seccomp) -> None:
    """No capabilities, no new privileges, no core or ptrace access by the same user, the allowlist
    (where `seccomp` has one for this machine)."""
    # Without namespaces too: root without capabilities cannot reach into the other part's process.
    for capability in range(64):
        if libc.prctl(_PR_CAPBSET_DROP, capability, 0, 0, 0) != 0:
            break  # past the last capability this kernel knows, or none to drop
    libc.prctl(_PR_CAP_AMBIENT, 4, 0, 0, 0)  # PR_CAP_AMBIENT_CLEAR_ALL
    libc.drop_capabilities()
    libc.check(libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "set no_new_privs")
    libc.check(libc.prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0), "clear the dumpable flag")
    if machine in seccomp.ARCHITECTURES:
        seccomp.install(libc.ctypes, libc.lib, machine)


class Libc:
    """The few C library calls the jail needs, with errors as OSError."""

    def __init__(self) -> None:
        import ctypes

        self.ctypes = ctypes
        self.lib = ctypes.CDLL(None, use_errno=True)
        self.prctl = self.lib.prctl
        self.prctl.argtypes = (ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong)
        self.unshare = self.lib.unshare
        self.umount2 = self.lib.umount2
        self.syscall = self.lib.syscall
        self._mount = self.lib.mount
        self._mount.argtypes = (ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p)

    def check(self, result: int, what: str) -> None:
        if result != 0:
            number = self.ctypes.get_errno()
            raise OSError(number, f"{what}: {os.strerror(number)}")

    def mount(self, source, target, kind, flags: int, options, what: str) -> None:
        encoded = [None if text is None else text.encode() for text in (source, target, kind, options)]
        self.check(self._mount(encoded[0], encoded[1], encoded[2], flags, encoded[3]), what)

    def drop_capabilities(self) -> None:
        header = (self.ctypes.c_uint32 * 2)(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3, this process
        data = (self.ctypes.c_uint32 * 6)()
        self.check(self.lib.capset(header, data), "drop the capabilities")


def interpreter_folders() -> list[str]:
    """The standard library's folders (as on sys.path) and those of every shared library this
    interpreter has mapped, without folders inside others."""
    found = {os.path.abspath(entry) for entry in sys.path if os.path.isdir(entry)}
    with open("/proc/self/maps", encoding="utf-8", errors="surrogateescape") as maps:
        for line in maps:
            parts = line.split(None, 5)
            path = parts[5].rstrip("\n") if len(parts) == 6 else ""
            if path.startswith("/") and ".so" in os.path.basename(path) and os.path.isfile(path):
                found.add(os.path.dirname(path))
    kept: list[str] = []
    for path in sorted(found):
        if not any(path == other or path.startswith(other.rstrip("/") + "/") for other in kept):
            kept.append(path)
    return kept
