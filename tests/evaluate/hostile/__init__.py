"""Hostile MBPP candidates for the sandbox suites, and what those suites share."""

from __future__ import annotations

import subprocess
import sys

# A child process asks for a user and a mount namespace without any of the jail's code: where that
# works the jail must build, so a jail that fails there fails the suites instead of skipping them.
_UNSHARE = (
    "import ctypes, sys\n"
    "libc = ctypes.CDLL(None, use_errno=True)\n"
    "sys.exit(0 if libc.unshare(0x10000000 | 0x20000) == 0 else 1)\n"
)
_FOUND: list[bool] = []


def namespaces_work() -> bool:
    """Whether this kernel lets this user create user and mount namespaces (probed once)."""
    if not _FOUND:
        works = sys.platform.startswith("linux") and subprocess.run([sys.executable, "-c", _UNSHARE]).returncode == 0
        _FOUND.append(works)
    return _FOUND[0]
