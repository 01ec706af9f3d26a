"""The jail's seccomp filter: an allowlist of system calls, as a classic BPF program.

Everything not named in ALLOWED fails with EPERM: sockets of every family,
io_uring, process creation and exec, ptrace and process_vm_*, mounts and
namespaces, keyrings, BPF, perf, userfaultfd, handles to other files
(`open_by_handle_at`), SysV IPC, `prctl`, `seccomp` itself. `clone` passes
only when it makes a thread (CLONE_THREAD) and asks for no namespace;
`clone3` answers ENOSYS, since the filter cannot read the flags behind its
pointer, and the C library then falls back to `clone`. A system call of
another ABI (i386 through `int 0x80`, x32) kills the process or fails.

The filter is written here rather than built with libseccomp because no
package on PyPI ships libseccomp itself (its bindings load the system's
library); the numbers below come from the kernel's headers, and a test checks
them against libseccomp's tables where that library is installed.
"""

import os

# The allowlist, by name: what CPython and its C library use to run pure Python, files in the
# scratch space, threads, timers and polling. Names an architecture lacks are skipped there.
ALLOWED = (
    # reading and writing open descriptors
    "read", "write", "readv", "writev", "pread64", "pwrite64", "preadv", "pwritev", "preadv2", "pwritev2",
    "lseek", "close", "close_range", "dup", "dup2", "dup3", "fcntl", "ioctl", "flock", "fsync", "fdatasync",
    "ftruncate", "truncate", "sendfile", "copy_file_range", "splice", "pipe", "pipe2", "fadvise64",
    # paths (the jail's root holds nothing but the interpreter and the scratch space)
    "open", "openat", "openat2", "stat", "lstat", "fstat", "newfstatat", "statx", "access", "faccessat",
    "faccessat2", "readlink", "readlinkat", "getdents64", "getcwd", "chdir", "fchdir", "mkdir", "mkdirat",
    "rmdir", "unlink", "unlinkat", "rename", "renameat", "renameat2", "link", "linkat", "symlink",
    "symlinkat", "chmod", "fchmod", "fchmodat", "utimensat", "umask", "statfs", "fstatfs",
    # memory
    "mmap", "munmap", "mremap", "mprotect", "brk", "madvise", "mincore", "msync", "membarrier",
    # signals (a PID namespace of its own and its own session: only the jail itself can be reached)
    "rt_sigaction", "rt_sigprocmask", "rt_sigreturn", "rt_sigsuspend", "rt_sigpending", "rt_sigtimedwait",
    "sigaltstack", "kill", "tgkill", "tkill",
    # threads and time
    "futex", "set_robust_list", "get_robust_list", "set_tid_address", "rseq", "sched_yield",
    "sched_getaffinity", "getcpu", "exit", "exit_group", "nanosleep", "clock_nanosleep", "clock_gettime",
    "clock_getres", "gettimeofday", "time", "alarm", "setitimer", "getitimer", "pause", "restart_syscall",
    "poll", "ppoll", "select", "pselect6", "epoll_create", "epoll_create1", "epoll_ctl", "epoll_wait",
    "epoll_pwait", "epoll_pwait2", "eventfd2", "timerfd_create", "timerfd_settime", "timerfd_gettime",
    # questions about itself
    "getpid", "gettid", "getppid", "getuid", "geteuid", "getgid", "getegid", "getgroups", "getresuid",
    "getresgid", "getpgid", "getpgrp", "getsid", "uname", "sysinfo", "getrlimit", "setrlimit", "prlimit64",
    "getrusage", "times", "getrandom", "wait4", "waitid", "capget", "arch_prctl",
)

# Per architecture: the audit architecture and the numbers of the calls the filter names.
ARCHITECTURES = {
    "x86_64": (0xC000003E, {
        "read": 0, "write": 1, "open": 2, "close": 3, "stat": 4, "fstat": 5, "lstat": 6, "poll": 7, "lseek": 8,
        "mmap": 9, "mprotect": 10, "munmap": 11, "brk": 12, "rt_sigaction": 13, "rt_sigprocmask": 14,
        "rt_sigreturn": 15, "ioctl": 16, "pread64": 17, "pwrite64": 18, "readv": 19, "writev": 20, "access": 21,
        "pipe": 22, "select": 23, "sched_yield": 24, "mremap": 25, "msync": 26, "mincore": 27, "madvise": 28,
        "dup": 32, "dup2": 33, "pause": 34, "nanosleep": 35, "getitimer": 36, "alarm": 37, "setitimer": 38,
        "getpid": 39, "sendfile": 40, "clone": 56, "exit": 60, "wait4": 61, "kill": 62, "uname": 63,
        "fcntl": 72, "flock": 73, "fsync": 74, "fdatasync": 75, "truncate": 76, "ftruncate": 77, "getcwd": 79,
        "chdir": 80, "fchdir": 81, "rename": 82, "mkdir": 83, "rmdir": 84, "link": 86, "unlink": 87,
        "symlink": 88, "readlink": 89, "chmod": 90, "fchmod": 91, "umask": 95, "gettimeofday": 96,
        "getrlimit": 97, "getrusage": 98, "sysinfo": 99, "times": 100, "getuid": 102, "getgid": 104,
        "geteuid": 107, "getegid": 108, "getppid": 110, "getpgrp": 111, "getgroups": 115, "getresuid": 118,
        "getresgid": 120, "getpgid": 121, "getsid": 124, "capget": 125, "rt_sigpending": 127,
        "rt_sigtimedwait": 128, "rt_sigsuspend": 130, "sigaltstack": 131, "statfs": 137, "fstatfs": 138,
        "arch_prctl": 158, "setrlimit": 160, "gettid": 186, "tkill": 200, "time": 201, "futex": 202,
        "sched_getaffinity": 204, "epoll_create": 213, "getdents64": 217, "set_tid_address": 218,
        "restart_syscall": 219, "fadvise64": 221, "clock_gettime": 228, "clock_getres": 229,
        "clock_nanosleep": 230, "exit_group": 231, "epoll_wait": 232, "epoll_ctl": 233, "tgkill": 234,
        "waitid": 247, "openat": 257, "mkdirat": 258, "newfstatat": 262, "unlinkat": 263, "renameat": 264,
        "linkat": 265, "symlinkat": 266, "readlinkat": 267, "fchmodat": 268, "faccessat": 269, "pselect6": 270,
        "ppoll": 271, "set_robust_list": 273, "get_robust_list": 274, "splice": 275, "utimensat": 280,
        "epoll_pwait": 281, "timerfd_create": 283, "timerfd_settime": 286, "timerfd_gettime": 287,
        "eventfd2": 290, "epoll_create1": 291, "dup3": 292, "pipe2": 293, "preadv": 295, "pwritev": 296,
        "prlimit64": 302, "getcpu": 309, "renameat2": 316, "getrandom": 318, "membarrier": 324,
        "copy_file_range": 326, "preadv2": 327, "pwritev2": 328, "statx": 332, "rseq": 334, "clone3": 435,
        "close_range": 436, "openat2": 437, "faccessat2": 439, "epoll_pwait2": 441,
    }),
    "aarch64": (0xC00000B7, {
        "getcwd": 17, "eventfd2": 19, "epoll_create1": 20, "epoll_ctl": 21, "epoll_pwait": 22, "dup": 23,
        "dup3": 24, "fcntl": 25, "ioctl": 29, "flock": 32, "mkdirat": 34, "unlinkat": 35, "symlinkat": 36,
        "linkat": 37, "renameat": 38, "statfs": 43, "fstatfs": 44, "truncate": 45, "ftruncate": 46,
        "faccessat": 48, "chdir": 49, "fchdir": 50, "fchmod": 52, "fchmodat": 53, "openat": 56, "close": 57,
        "pipe2": 59, "getdents64": 61, "lseek": 62, "read": 63, "write": 64, "readv": 65, "writev": 66,
        "pread64": 67, "pwrite64": 68, "preadv": 69, "pwritev": 70, "sendfile": 71, "pselect6": 72,
        "ppoll": 73, "splice": 76, "readlinkat": 78, "newfstatat": 79, "fstat": 80, "fsync": 82,
        "fdatasync": 83, "timerfd_create": 85, "timerfd_settime": 86, "timerfd_gettime": 87, "utimensat": 88,
        "capget": 90, "exit": 93, "exit_group": 94, "waitid": 95, "set_tid_address": 96, "futex": 98,
        "set_robust_list": 99, "get_robust_list": 100, "nanosleep": 101, "getitimer": 102, "setitimer": 103,
        "clock_gettime": 113, "clock_getres": 114, "clock_nanosleep": 115, "sched_getaffinity": 123,
        "sched_yield": 124, "restart_syscall": 128, "kill": 129, "tkill": 130, "tgkill": 131,
        "sigaltstack": 132, "rt_sigsuspend": 133, "rt_sigaction": 134, "rt_sigprocmask": 135,
        "rt_sigpending": 136, "rt_sigtimedwait": 137, "rt_sigreturn": 139, "getresuid": 148,
        "getresgid": 150, "times": 153, "getpgid": 155, "getsid": 156, "getgroups": 158, "uname": 160,
        "getrlimit": 163, "setrlimit": 164, "getrusage": 165, "umask": 166, "getcpu": 168,
        "gettimeofday": 169, "getpid": 172, "getppid": 173, "getuid": 174, "geteuid": 175, "getgid": 176,
        "getegid": 177, "gettid": 178, "sysinfo": 179, "brk": 214, "munmap": 215, "mremap": 216, "clone": 220,
        "mmap": 222, "fadvise64": 223, "mprotect": 226, "msync": 227, "mincore": 232, "madvise": 233,
        "wait4": 260, "prlimit64": 261, "renameat2": 276, "getrandom": 278, "membarrier": 283,
        "copy_file_range": 285, "preadv2": 286, "pwritev2": 287, "statx": 291, "rseq": 293, "clone3": 435,
        "close_range": 436, "openat2": 437, "faccessat2": 439, "epoll_pwait2": 441,
    }),
}

CLONE_THREAD = 0x10000
# Every CLONE_NEW* flag: a thread may not ask for a namespace (it could not get one
# without capabilities anyway; the filter refuses before the kernel has to say so).
CLONE_NAMESPACES = 0x80 | 0x20000 | 0x2000000 | 0x4000000 | 0x8000000 | 0x10000000 | 0x20000000 | 0x40000000

_EPERM, _ENOSYS = 1, 38
_RET_ALLOW, _RET_KILL_PROCESS, _RET_ERRNO = 0x7FFF0000, 0x80000000, 0x00050000
_LD_W_ABS, _JEQ_K, _JGE_K, _JSET_K, _RET_K = 0x20, 0x15, 0x35, 0x45, 0x06
# Offsets into struct seccomp_data: nr, arch, args[0] (its low half on little-endian machines).
_NR, _ARCH, _ARG0 = 0, 4, 16
_X32_BIT = 0x40000000


def instructions(machine: str) -> list[tuple[int, int, int, int]]:
    """The filter for `machine` (os.uname().machine) as (code, jt, jf, k) tuples; KeyError if unknown."""
    arch, numbers = ARCHITECTURES[machine]
    deny = _RET_ERRNO | _EPERM
    code = [(_LD_W_ABS, 0, 0, _ARCH), (_JEQ_K, 1, 0, arch), (_RET_K, 0, 0, _RET_KILL_PROCESS), (_LD_W_ABS, 0, 0, _NR)]
    if machine == "x86_64":  # x32 calls carry the x86-64 architecture and this bit in their number
        code += [(_JGE_K, 0, 1, _X32_BIT), (_RET_K, 0, 0, deny)]
    code += [(_JEQ_K, 0, 1, numbers["clone3"]), (_RET_K, 0, 0, _RET_ERRNO | _ENOSYS)]
    # clone: allowed only with CLONE_THREAD and without any CLONE_NEW* flag.
    code += [
        (_JEQ_K, 0, 5, numbers["clone"]),
        (_LD_W_ABS, 0, 0, _ARG0),
        (_JSET_K, 0, 2, CLONE_THREAD),
        (_JSET_K, 1, 0, CLONE_NAMESPACES),
        (_RET_K, 0, 0, _RET_ALLOW),
        (_RET_K, 0, 0, deny),
    ]
    # Each allowed number is one compare and one return, so no jump reaches past 255.
    for name in ALLOWED:
        number = numbers.get(name)
        if number is None or name == "clone":
            continue
        code += [(_JEQ_K, 0, 1, number), (_RET_K, 0, 0, _RET_ALLOW)]
    code.append((_RET_K, 0, 0, deny))
    return code


def install(ctypes, libc, machine: str) -> None:
    """Load the filter into this thread's process (no_new_privs must already be set); OSError if refused."""
    code = instructions(machine)

    class Filter(ctypes.Structure):
        _fields_ = [("code", ctypes.c_uint16), ("jt", ctypes.c_uint8), ("jf", ctypes.c_uint8), ("k", ctypes.c_uint32)]

    class Program(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(Filter))]

    filters = (Filter * len(code))(*[Filter(*entry) for entry in code])
    program = Program(len(code), filters)
    prctl = libc.prctl
    prctl.argtypes = (ctypes.c_int, ctypes.c_ulong, ctypes.c_void_p, ctypes.c_ulong, ctypes.c_ulong)
    if prctl(22, 2, ctypes.addressof(program), 0, 0) != 0:  # PR_SET_SECCOMP, SECCOMP_MODE_FILTER
        number = ctypes.get_errno()
        raise OSError(number, f"install the seccomp filter: {os.strerror(number)}")
