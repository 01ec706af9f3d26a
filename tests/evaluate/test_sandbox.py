"""The sandbox's parts: the plain-data wire, the seccomp allowlist, the jail's contents, verdicts, the end.

The hostile candidates themselves run end to end in test_sandbox_hostile.py.
"""

from __future__ import annotations

import collections
import enum
import json
import math
import os
import subprocess
import sys
import time

import pytest

from bamasc.evaluate import plain, seccomp
from bamasc.evaluate.sandbox import Job, Limits, check_isolation, run_many, run_tests
from tests.evaluate.hostile import namespaces_work

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
JAIL = os.path.join(ROOT, "bamasc", "evaluate", "jail.py")
needs_jail = pytest.mark.skipif(not namespaces_work(), reason="this machine allows no user namespaces")
LEVELS = [pytest.param("namespaces", marks=needs_jail), "hooks"]


# ---------------------------------------------------------------- the wire


def cross(value):
    """`value` encoded, sent as JSON and decoded, the way a reply crosses from the candidate."""
    objects: list = []

    def refer(obj) -> int:
        objects.append(obj)
        return len(objects) - 1

    data = json.dumps(plain.encode(value, refer)).encode("ascii")
    return plain.decode(data, lambda ref: ("ref", objects[ref]))


def same(a, b) -> bool:
    """Equal, and of the same types all the way down."""
    if type(a) is not type(b):
        return False
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, float) and math.isnan(a):
        return math.isnan(b)
    return a == b


def test_plain_values_cross_as_themselves():
    values = [None, True, False, 0, -7, 2**100, 1.5, -0.0, float("inf"), float("nan"), "text", "é\udcff", b"\x00\xff",
              range(3), range(10, -5, -3),
              1 + 2j, [1, [2, []]], (1, (2, 3), ()), {1: "a", (1, 2): [3], "k": {}}, {1, 2}, frozenset({(1,)}),
              {"nested": [{frozenset(): {0.5}}]}]
    for value in values:
        assert same(cross(value), value), value


def test_subclasses_cross_as_their_base_types_and_other_objects_stay_behind():
    Point = collections.namedtuple("Point", "x y")

    class Colour(enum.IntEnum):
        RED = 1

    class Liar(str):
        def __eq__(self, other):
            return True

        __hash__ = str.__hash__

    assert same(cross(collections.Counter("aab")), {"a": 2, "b": 1})
    assert same(cross(collections.OrderedDict(b=1)), {"b": 1})
    assert same(cross(Point(1, 2)), (1, 2))
    assert same(cross(Colour.RED), 1)
    assert same(cross(Liar("x")), "x") and cross(Liar("x")) != "y"
    iterator = cross(x * 2 for x in range(3))
    assert iter(iterator) is iterator and list(iterator) == [0, 2, 4]
    thing = object()
    assert cross([thing]) == [("ref", thing)]


@pytest.mark.parametrize("data", [
    b'{"x": 1}', b'{"t": 1}', b'{"t": [], "s": []}', b'{"d": [[1]]}', b'{"d": [[[1], 2]]}', b'{"s": [[1]]}',
    b'{"c": ["a", 1]}', b'{"c": [true, 1]}', b'{"rg": [0, 5, 0]}', b'{"rg": [0, 5]}', b'{"r": "0"}', b'{"r": true}', b'{"b": 5}', b'{"b": "\\u0100"}',
    b"[" * 100000 + b"]" * 100000, b"not json", "\u00e9".encode(), b"1" * 5000,
])
def test_what_is_not_plain_data_is_refused(data):
    with pytest.raises(plain.WireError):
        plain.decode(data, lambda ref: ref)


def test_messages_are_framed_and_capped():
    read, write = os.pipe()
    try:
        plain.send(write, ["ok", {"t": [1, 2]}])
        assert json.loads(plain.receive(read)) == ["ok", {"t": [1, 2]}]
        os.write(write, (plain.MAX_MESSAGE + 1).to_bytes(4, "big"))
        with pytest.raises(plain.WireError, match="over the limit"):
            plain.receive(read)
        with pytest.raises(plain.WireError, match="nested too deeply"):
            value = []
            for _ in range(plain.MAX_DEPTH + 5):
                value = [value]
            plain.encode(value, lambda obj: 0)
    finally:
        os.close(write)
    with pytest.raises(plain.CandidateGone):
        plain.receive(read)
    os.close(read)


def test_a_candidates_object_equals_only_itself():
    link = plain.Link(-1, -1)
    first, second = plain.Remote(link, 0), plain.Remote(link, 0)
    assert first == first and first != second and first != 0 and first != [] and hash(first) != hash(second)
    assert repr(first) == "<the candidate's object #0>"
    with pytest.raises(AttributeError):
        first.__deepcopy__


# ---------------------------------------------------------------- the seccomp allowlist

NEVER = {"socket", "socketpair", "connect", "bind", "sendto", "sendmsg", "io_uring_setup", "io_uring_enter",
         "io_uring_register", "ptrace", "process_vm_readv", "process_vm_writev", "execve", "execveat", "fork",
         "vfork", "unshare", "setns", "mount", "umount2", "pivot_root", "chroot", "bpf", "perf_event_open",
         "userfaultfd", "keyctl", "add_key", "open_by_handle_at", "memfd_create", "prctl", "seccomp", "mknod",
         "mknodat", "setuid", "setresuid", "setgid", "capset", "kexec_load", "init_module", "personality"}


@pytest.mark.parametrize("machine", sorted(seccomp.ARCHITECTURES))
def test_the_allowlist_is_a_well_formed_program_that_names_nothing_dangerous(machine):
    arch, numbers = seccomp.ARCHITECTURES[machine]
    code = seccomp.instructions(machine)
    assert len(code) < 4096
    assert code[:2] == [(0x20, 0, 0, 4), (0x15, 1, 0, arch)] and code[2] == (0x06, 0, 0, 0x80000000)
    assert code[-1] == (0x06, 0, 0, 0x00050001)  # everything else: EPERM
    for index, (operation, if_true, if_false, _) in enumerate(code):
        if operation & 0x07 == 0x05:  # a jump: both targets inside the program
            assert index + 1 + max(if_true, if_false) < len(code)
    allowed = {entry[3] for entry, following in zip(code, code[1:]) if entry[0] == 0x15 and following == (6, 0, 0, 0x7FFF0000)}
    assert allowed == {numbers[name] for name in seccomp.ALLOWED if name in numbers and name != "clone"}
    assert NEVER.isdisjoint(seccomp.ALLOWED) and not (NEVER & numbers.keys() - {"clone"})
    if machine == "x86_64":
        assert set(seccomp.ALLOWED) <= numbers.keys()


def test_the_syscall_numbers_agree_with_libseccomp():
    import ctypes

    try:
        library = ctypes.CDLL("libseccomp.so.2")
    except OSError:
        pytest.skip("libseccomp is not installed here; the numbers were taken from the kernel's headers")
    resolve = library.seccomp_syscall_resolve_name_arch
    resolve.argtypes, resolve.restype = (ctypes.c_uint32, ctypes.c_char_p), ctypes.c_int
    for machine, (arch, numbers) in seccomp.ARCHITECTURES.items():
        assert {name: resolve(arch, name.encode()) for name in numbers} == numbers, machine


FILTER_PROBE = r"""
import ctypes, json, os, socket, threading
from bamasc.evaluate import seccomp
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
assert libc.prctl(38, 1, 0, 0, 0) == 0  # no_new_privs: any user may then load a filter
seccomp.install(ctypes, libc, os.uname().machine)
found = {"pid": os.getpid() > 0}
for name, call in (("socket", socket.socket), ("fork", os.fork), ("socketpair", socket.socketpair)):
    try:
        call()
        found[name] = "allowed"
    except OSError as problem:
        found[name] = problem.errno
found["clone3"] = (libc.syscall(435, None, 0), ctypes.get_errno())
box = []
worker = threading.Thread(target=lambda: box.append(1))
worker.start(); worker.join()
found["thread"] = box == [1]
print(json.dumps(found))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux") or os.uname().machine not in seccomp.ARCHITECTURES,
                    reason="the filter is for Linux on x86-64 and aarch64")
def test_the_filter_refuses_sockets_and_processes_but_keeps_threads():
    done = subprocess.run([sys.executable, "-c", FILTER_PROBE], capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"pid": True, "socket": 1, "fork": 1, "socketpair": 1, "clone3": [-1, 38],
                                       "thread": True}


# ---------------------------------------------------------------- the jail

FACTS = r"""
import os, sys
def facts():
    found = {"uid": (os.getuid(), os.getgid()), "cwd": os.getcwd(), "pid": os.getpid()}
    found["devices"] = sorted(os.listdir("/dev"))
    scratch, root = os.statvfs("/tmp"), os.statvfs("/")
    found["scratch"] = (scratch.f_blocks * scratch.f_frsize, scratch.f_flag & 15)  # ST_RDONLY|NOSUID|NODEV|NOEXEC
    found["root read-only"] = bool(root.f_flag & 1)
    found["absent"] = [path for path in ("/proc", "/etc", "/home", "/sys", "/var", "/bin/sh", "/usr/bin") if not os.path.exists(path)]
    found["path"] = sys.path
    found["top"] = sorted(os.listdir("/"))
    return found
"""


@needs_jail
def test_the_jail_builds_wherever_namespaces_work():
    check_isolation("namespaces")  # SandboxError says which step the machine refused


@needs_jail
def test_the_jail_holds_the_interpreter_and_a_private_scratch_space_and_nothing_else():
    from bamasc.evaluate.confine import LIB_LINKS

    # What the keeper sees: a fresh interpreter under -I -S -B, with the jail's folder on its path only
    # while it imports the jail's modules.
    keeper = ("import sys; sys.path.insert(0, sys.argv[1]); import confine; del sys.path[0]; "
              "print(repr((sys.path, confine.interpreter_folders())))")
    found = subprocess.run([sys.executable, "-I", "-S", "-B", "-c", keeper, os.path.dirname(JAIL)],
                           capture_output=True, text=True, check=True)
    path, folders = eval(found.stdout)
    top = {folder.split("/")[1] for folder in folders} | {"dev", "tmp"}
    top |= {name for name in LIB_LINKS if os.path.islink("/" + name)}
    expected = {
        "uid": (65534, 65534), "cwd": "/tmp", "pid": 1, "devices": ["full", "null", "random", "urandom", "zero"],
        "scratch": (4 * 2**20, 14), "root read-only": True,
        "absent": ["/proc", "/etc", "/home", "/sys", "/var", "/bin/sh", "/usr/bin"],
        "path": path, "top": sorted(top),
    }
    outcome = run_tests(FACTS, [f"assert (found := facts()) == {expected!r}, found"], limits=Limits(disk=4 * 2**20))
    assert outcome.verdict == "passed", outcome.detail
    assert outcome.isolation == "namespaces"


@pytest.mark.parametrize("level", LEVELS)
def test_verdicts_of_ordinary_candidates(level):
    tests = ["assert f(1) == 2", "assert f(5) == 6"]
    jobs = {
        "def f(x):\n    return x + 1\n": "passed",
        "def f(x):\n    return x\n": "failed",
        "def f(x):\n    raise ValueError('bad value')\n": "error",
        "def f(:\n": "error",
        "import sys\nsys.exit(0)\n": "error",
        "import os\nos._exit(0)\n": "error",
        "def g(x):\n    return x + 1\n": "error",  # the tests' name is missing
    }
    outcomes = run_many([Job(code, tests) for code in jobs], Limits(wall_time=5), concurrency=2, isolation=level)
    assert [outcome.verdict for outcome in outcomes] == list(jobs.values())
    assert outcomes[1].detail == "AssertionError: test 1: assert f(1) == 2"
    assert "ValueError: bad value" in outcomes[2].detail
    assert "SyntaxError" in outcomes[3].detail
    assert "SystemExit" in outcomes[4].detail
    assert "exited with status 0" in outcomes[5].detail
    assert "NameError" in outcomes[6].detail
    assert {outcome.isolation for outcome in outcomes} == {level}


@pytest.mark.parametrize("level", LEVELS)
def test_tests_may_use_imports_classes_setup_objects_and_expected_exceptions(level):
    candidate = (
        "class Box:\n    def __init__(self, v):\n        self.v = v\n    def __len__(self):\n        return self.v\n"
        "def unbox(box):\n    return box.v\n"
        "def check(x):\n    if x < 0:\n        raise ValueError('negative')\n    return math.sqrt(x)\n"
        "def letters(text):\n    return (c for c in text)\n"
        "def counts(text):\n    return collections.Counter(text)\n"
    )
    tests = [
        "assert math.isclose(check(2), 1.4142135, rel_tol=1e-6)",
        "assert unbox(Box(3)) == 3 and len(Box(4)) == 4 and Box(1).v == 1",
        "try:\n    check(-1)\nexcept ValueError as problem:\n    assert 'negative' in str(problem)\nelse:\n    assert False",
        "assert list(letters('ab')) == ['a', 'b'] and counts('aab') == {'a': 2, 'b': 1}",
        "assert unbox(shared) == 7",
        "assert set(counts('ab')) == {'a', 'b'}",
    ]
    outcome = run_tests(candidate, tests, imports=("import math", "import collections"), setup="shared = Box(7)\n",
                        isolation=level)
    assert outcome.verdict == "passed", outcome.detail


def test_limits_reject_nonsense():
    for wrong in ({"wall_time": 0}, {"memory": -1}, {"open_files": 3}, {"disk": 10}, {"threads": 0}):
        with pytest.raises(ValueError):
            Limits(**wrong)
    with pytest.raises(ValueError):
        run_tests("pass", [], isolation="auto")


def test_the_hooks_guard_keeps_its_tables_out_of_reach(tmp_path):
    """The old one-line bypass: rebinding the guard's tables through sys.modules['__main__']."""
    escape = tmp_path / "escaped"
    candidate = (
        "import sys, os\nmain = sys.modules['__main__']\n"
        "for name in ('_HOOKED_PROCESS_EVENTS', '_BLOCKED_IMPORTS', '_PATH_EVENTS', '_REFUSED_EVENTS'):\n"
        "    setattr(main, name, frozenset())\n"
        "def tries():\n    found = []\n"
        f"    for attempt in (lambda: open({str(escape)!r}, 'w'), lambda: __import__('socket').socket(),\n"
        "                    lambda: os.posix_spawn('/bin/true', ['true'], {}), lambda: __import__('ctypes').CDLL(None)):\n"
        "        try:\n            attempt()\n            found.append('allowed')\n"
        "        except Exception as problem:\n            found.append(type(problem).__name__)\n    return found\n"
    )
    outcome = run_tests(candidate, ["assert (found := tries()) == ['PermissionError'] * 4, found"], isolation="hooks")
    assert outcome.verdict == "passed", outcome.detail
    assert not escape.exists()


def processes_under(pid: int) -> list[int]:
    """Every descendant of `pid` (children first)."""
    parents = {}
    for name in (name for name in os.listdir("/proc") if name.isdigit()):
        try:
            with open(f"/proc/{name}/stat") as handle:
                parents[int(name)] = int(handle.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
    found, frontier = [], [pid]
    while frontier:
        children = [child for child, parent in parents.items() if parent in frontier]
        found += children
        frontier = children
    return found


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.parametrize("level", LEVELS)
def test_the_jails_end_when_their_parent_is_killed(level):
    code = (
        "from bamasc.evaluate.sandbox import Limits, run_tests\n"
        f"run_tests('import time\\ntime.sleep(120)\\n', ['assert True'], limits=Limits(wall_time=120), isolation={level!r})\n"
    )
    parent = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT)
    try:
        family: list[int] = []
        for _ in range(400):  # the keeper, two wardens and two jails appear within moments
            family = processes_under(parent.pid)
            if len(family) >= 5:
                break
            time.sleep(0.025)
        assert len(family) >= 5, family
        parent.kill()
        parent.wait()
        for _ in range(400):
            if not any(alive(pid) for pid in family):
                break
            time.sleep(0.025)
        assert not any(alive(pid) for pid in family)
    finally:
        parent.kill()
        parent.wait()


def test_scoring_one_row_for_collect_cannot_be_forged():
    from bamasc.evaluate.scorers import score

    row = {"task_id": 11, "text": "add one", "code": "def f(x): return x + 1", "test_list": ["assert f(1) == 2"]}
    forged = "class Anything:\n    def __eq__(self, other):\n        return True\ndef f(x):\n    return Anything()\n"
    if not namespaces_work():
        pytest.skip("this machine allows no user namespaces")
    assert score("code", "def f(x):\n    return x + 1\n", row)
    assert not score("code", forged, row)
