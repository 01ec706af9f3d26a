"""The hostile candidates: each an attack on the jail or on the verdict, with what must come of it.

Every candidate is scored by `bamasc score` against a small MBPP dataset
(`TASKS`). An attack on the jail runs inside a candidate function and
reports what happened by raising `RuntimeError("REPORT ...")`, whose text
reaches the verdict's detail: `refused:<exception>` for an attempt that
failed, `ALLOWED:<result>` for one that worked. The suite asserts the
verdict, what the detail must and must not hold, and (for every case at
once) that nothing reached or was left on the host. An attack on the verdict
answers wrongly and must never be scored correct.

Placeholders (`@TOKEN@`, `@MARKER@`, ...) are filled in by the suite.
"""

from __future__ import annotations

from typing import NamedTuple

PRELUDE = r'''
import os, sys
def attempt(action):
    try:
        result = action()
    except BaseException as problem:
        return "refused:" + type(problem).__name__
    return ("ALLOWED:" + repr(result))[:80]
def raw(number, *args):
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    result = libc.syscall(number, *args)
    return "refused:errno%d" % ctypes.get_errno() if result == -1 else "ALLOWED:%d" % result
def report(*results):
    raise RuntimeError("REPORT " + " ".join(results))
def touch(path):
    with open(path, "w") as handle:
        handle.write("escaped")
    return path
'''

IO_URING = r'''
def uring_connect(path, payload):
    import ctypes, mmap, struct
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    params = ctypes.create_string_buffer(120)
    fd = libc.syscall(425, 8, params)
    if fd < 0:
        return "refused:io_uring_setup errno%d" % ctypes.get_errno()
    raw_params = params.raw
    sq_entries, cq_entries = struct.unpack_from("II", raw_params, 0)
    sq_off = struct.unpack_from("IIIIIIIIQ", raw_params, 40)
    cq_off = struct.unpack_from("IIIIIIIIQ", raw_params, 80)
    shared = mmap.MAP_SHARED
    both = mmap.PROT_READ | mmap.PROT_WRITE
    sq = mmap.mmap(fd, sq_off[6] + sq_entries * 4, shared, both, offset=0)
    cq = mmap.mmap(fd, cq_off[5] + cq_entries * 16, shared, both, offset=0x8000000)
    sqes = mmap.mmap(fd, sq_entries * 64, shared, both, offset=0x10000000)
    def submit(entry):
        tail = struct.unpack_from("I", sq, sq_off[1])[0]
        index = tail & struct.unpack_from("I", sq, sq_off[2])[0]
        sqes[index * 64:(index + 1) * 64] = entry
        struct.pack_into("I", sq, sq_off[6] + index * 4, index)
        struct.pack_into("I", sq, sq_off[1], tail + 1)
        if libc.syscall(426, fd, 1, 1, 1, None, 0) < 0:
            return None
        head = struct.unpack_from("I", cq, cq_off[0])[0]
        mask = struct.unpack_from("I", cq, cq_off[2])[0]
        result = struct.unpack_from("QiI", cq, cq_off[5] + (head & mask) * 16)[1]
        struct.pack_into("I", cq, cq_off[0], head + 1)
        return result
    entry = bytearray(64)
    struct.pack_into("BBHiQQII", entry, 0, 45, 0, 0, 1, 1, 0, 0, 0)  # IORING_OP_SOCKET AF_UNIX STREAM
    sock = submit(bytes(entry))
    if sock is None or sock < 0:
        return "refused:io_uring socket %r" % sock
    address = struct.pack("H", 1) + path.encode() + b"\0"
    buffer = ctypes.create_string_buffer(address, len(address))
    entry = bytearray(64)
    struct.pack_into("BBHiQQII", entry, 0, 16, 0, 0, sock, len(address), ctypes.addressof(buffer), 0, 0)
    if submit(bytes(entry)) != 0:
        return "refused:io_uring connect"
    os.write(sock, payload)
    return "ALLOWED:io_uring connected"
'''


class Task(NamedTuple):
    reference: str  # the dataset's code, with the token the candidates must never see
    tests: tuple[str, ...]
    imports: tuple[str, ...] = ()
    setup: str = ""


TASKS = {
    "inc": Task("def f(x):\n    return x + 1  # REFERENCE-@TOKEN@\n", ("assert f(1) == 2", "assert f(5) == 6")),
    "inverse": Task("def f(x):\n    return 1 / x  # REFERENCE-@TOKEN@\n", ("assert math.isclose(f(4), 0.25)",),
                    imports=("import math",)),
    "unique": Task("def f(items):\n    return sorted(set(items))  # REFERENCE-@TOKEN@\n",
                   ("assert set(f([3, 1, 3])) == {1, 3}", "assert isinstance(f([2]), list)")),
    "chain": Task(
        "class Pair:\n    def __init__(self, a, b):\n        self.a, self.b = a, b\n"
        "def longest(pairs):  # REFERENCE-@TOKEN@\n    count, end = 0, None\n"
        "    for pair in sorted(pairs, key=lambda p: p.b):\n        if end is None or pair.a > end:\n"
        "            count, end = count + 1, pair.b\n    return count\n",
        ("assert longest([Pair(5, 24), Pair(15, 25), Pair(27, 40), Pair(50, 60)]) == 3",),
    ),
    "tree": Task(
        "def height(node):  # REFERENCE-@TOKEN@\n"
        "    return 0 if node is None else 1 + max(height(node.left), height(node.right))\n",
        ("assert height(root) == 3", "assert height(None) == 0"),
        setup="class Node:\n    def __init__(self, value, left=None, right=None):\n"
              "        self.value, self.left, self.right = value, left, right\n"
              "root = Node(1, Node(2, Node(4)), Node(3))\n",
    ),
}


class Case(NamedTuple):
    name: str
    code: str
    verdicts: tuple[str, ...]  # the verdicts the detail may start with
    has: tuple[str, ...] = ()  # the detail must hold each of these
    lacks: tuple[str, ...] = ("ALLOWED",)  # ... and none of these
    task: str = "inc"
    raw: bool = False  # x86-64 system call numbers


REPORTED = ("error",)  # an attack reports through an exception: the item is an error, never correct
FAILS = ("failed", "error")
X86 = True


def _report(*attempts: str) -> str:
    """A candidate whose f reports each attempt (expressions over the prelude's helpers)."""
    return "def f(x):\n    report(" + ", ".join(attempts) + ")\n"


CASES = [
    # ------------------------------------------------ honest candidates still pass
    Case("honest", "def f(x):\n    return x + 1\n", ("passed",), lacks=()),
    Case("honest_isclose", "def f(x):\n    return 1 / x\n", ("passed",), lacks=(), task="inverse"),
    Case("honest_set", "def f(items):\n    return list(set(items))\n", ("passed",), lacks=(), task="unique"),
    Case("honest_class", TASKS["chain"].reference.replace("  # REFERENCE-@TOKEN@", ""), ("passed",), lacks=(),
         task="chain"),
    Case("honest_setup_objects", TASKS["tree"].reference.replace("  # REFERENCE-@TOKEN@", ""), ("passed",),
         lacks=(), task="tree"),
    Case("honest_threads_and_scratch_files",
         "import threading, tempfile, json, re, heapq, itertools, collections, decimal, fractions, zlib\n"
         "box = []\nworker = threading.Thread(target=lambda: box.append(1))\nworker.start(); worker.join()\n"
         "open('notes.txt', 'w').write('kept')\nwith tempfile.NamedTemporaryFile() as handle:\n"
         "    assert handle.name.startswith('/tmp')\n"
         "def f(x):\n    return x + len(box) if open('notes.txt').read() == 'kept' else 0\n",
         ("passed",), lacks=()),
    # ------------------------------------------------ new processes, every way
    Case("os_fork", PRELUDE + "def spawn():\n    pid = os.fork()\n    if pid == 0:\n"
         "        touch('@MARKER@/fork'); os.execv('/bin/sleep', ['sleep', '@TOKEN@'])\n    return pid\n"
         + _report("attempt(spawn)"), REPORTED, ("refused:PermissionError",)),
    Case("subprocess", PRELUDE + "import subprocess\n"
         + _report("attempt(lambda: subprocess.run(['/bin/sh', '-c', 'touch @MARKER@/subprocess; sleep @TOKEN@']))",
                   "attempt(lambda: subprocess.Popen('sleep @TOKEN@ &', shell=True))"), REPORTED, ("refused:",)),
    Case("os_system", PRELUDE + "def system():\n    code = os.system('touch @MARKER@/system; sleep @TOKEN@ &')\n"
         "    if code != 0:\n        raise OSError(code)\n    return code\n" + _report("attempt(system)"),
         REPORTED, ("refused:OSError",)),
    Case("os_popen", PRELUDE + _report("attempt(lambda: os.popen('touch @MARKER@/popen').read())"),
         REPORTED, ("refused:",)),
    Case("posix_spawn", PRELUDE + _report(
        "attempt(lambda: os.posix_spawn('/bin/sh', ['sh', '-c', 'touch @MARKER@/spawn'], {}))",
        "attempt(lambda: os.posix_spawnp('sleep', ['sleep', '@TOKEN@'], {}))"), REPORTED,
         ("refused:PermissionError",)),
    Case("os_spawnv", PRELUDE + _report("attempt(lambda: os.spawnv(os.P_NOWAIT, '/bin/sleep', ['sleep', '@TOKEN@']))"),
         REPORTED, ("refused:PermissionError",)),
    Case("os_execv", PRELUDE + _report("attempt(lambda: os.execv('/bin/sh', ['sh', '-c', 'touch @MARKER@/exec']))"),
         REPORTED, ("refused:PermissionError",)),
    Case("multiprocessing", PRELUDE + "import multiprocessing\n"
         "def start():\n    process = multiprocessing.Process(target=touch, args=('@MARKER@/mp',))\n"
         "    process.start(); process.join()\n    return process.exitcode\n" + _report("attempt(start)"),
         REPORTED, ("refused:",)),
    Case("process_pool", PRELUDE + "from concurrent.futures import ProcessPoolExecutor\n"
         + _report("attempt(lambda: ProcessPoolExecutor(1).submit(touch, '@MARKER@/pool').result())"),
         REPORTED, ("refused:",)),
    Case("pty_spawn", PRELUDE + "import pty\n" + _report("attempt(lambda: pty.spawn(['/bin/sh', '-c', 'touch @MARKER@/pty']))",
                                                          "attempt(os.forkpty)"),
         REPORTED, ("refused:",)),
    Case("raw_fork_vfork", PRELUDE + _report("raw(57)", "raw(58)"), REPORTED, ("refused:errno1 refused:errno1",),
         raw=X86),
    Case("raw_clone_as_fork", PRELUDE + _report("raw(56, 17, 0, 0, 0, 0)"), REPORTED, ("refused:errno1",), raw=X86),
    Case("raw_clone_thread_with_namespace", PRELUDE + _report("raw(56, 0x10000 | 0x800 | 0x100 | 0x40000000, 0, 0, 0, 0)"),
         REPORTED, ("refused:errno1",), raw=X86),
    Case("raw_clone3", PRELUDE + "import ctypes\nargs = (ctypes.c_uint64 * 11)()\nargs[4] = 17\n"
         + _report("raw(435, args, 88)"), REPORTED, ("refused:errno38",), raw=X86),
    Case("raw_execve", PRELUDE + _report("raw(59, b'/bin/sh', None, None)", "raw(322, -100, b'/bin/sh', None, None, 0)"),
         REPORTED, ("refused:errno1 refused:errno1",), raw=X86),
    # ------------------------------------------------ memory, disk, output, time
    Case("memory_bomb", "def f(x):\n    blocks = []\n    while True:\n        blocks.append(bytearray(2**25))\n",
         ("memory",)),
    Case("disk_fill", PRELUDE + "def fill():\n    written = 0\n    try:\n        for i in range(300):\n"
         "            with open('/tmp/fill%d' % i, 'wb') as handle:\n                handle.write(b'x' * (2**20 - 1))\n"
         "            written += 1\n    except OSError as problem:\n"
         "        return 'refused:%s after %d MiB' % (type(problem).__name__, written)\n    return 'ALLOWED:%d' % written\n"
         + _report("fill()"), REPORTED, ("refused:OSError after 1", " MiB")),
    Case("inode_fill", PRELUDE + "def fill():\n    made = 0\n    try:\n        for i in range(100000):\n"
         "            open('/tmp/n%d' % i, 'w').close(); made += 1\n    except OSError:\n"
         "        return 'refused:after %d files' % made\n    return 'ALLOWED:%d' % made\n" + _report("fill()"),
         REPORTED, ("refused:after 5",)),
    Case("stdout_flood", "import sys\nwhile True:\n    sys.stdout.write('x' * 65536)\n", ("output_limit",)),
    Case("stderr_flood", "import sys\nwhile True:\n    sys.stderr.write('y' * 65536)\n", ("output_limit",)),
    Case("busy_loop", "def f(x):\n    while True:\n        pass\n", ("timeout",)),
    Case("sleep_forever", "import time\ntime.sleep(3600)\ndef f(x):\n    return x + 1\n", ("timeout",)),
    Case("thread_bomb", PRELUDE + "import threading, time\ndef bomb():\n    started = 0\n    try:\n"
         "        for _ in range(10000):\n            threading.Thread(target=time.sleep, args=(60,), daemon=True).start()\n"
         "            started += 1\n    except BaseException as problem:\n"
         "        return 'refused:%s after %d threads' % (type(problem).__name__, started)\n    return 'ALLOWED:%d' % started\n"
         + _report("bomb()"), REPORTED, ("refused:RuntimeError after",)),
    Case("descriptor_bomb", PRELUDE + "def bomb():\n    handles = []\n    try:\n        while len(handles) < 100000:\n"
         "            handles.append(open('/dev/null'))\n    except OSError:\n"
         "        return 'refused:after %d files' % len(handles)\n    return 'ALLOWED'\n" + _report("bomb()"),
         REPORTED, ("refused:after 5",)),
    Case("huge_reply", "def f(x):\n    return 'x' * (5 * 2**20)\n", FAILS, ("over the limit",)),
    Case("deep_reply", "def f(x):\n    value = []\n    for _ in range(100000):\n        value = [value]\n    return value\n",
         FAILS, ("nested too deeply",)),
    Case("huge_int_reply", "def f(x):\n    return 10 ** 5000\n", FAILS),
    # ------------------------------------------------ signals
    Case("kill_parent_and_group", "import os, signal\ndef f(x):\n    for target in (os.getppid(), 0, -1, 1):\n"
         "        try:\n            os.kill(target, signal.SIGKILL)\n        except OSError:\n            pass\n    return 0\n",
         ("failed",)),
    Case("kill_bystander", PRELUDE + "import signal\n" + _report("attempt(lambda: os.kill(@BYSTANDER@, signal.SIGKILL))"),
         REPORTED, ("refused:ProcessLookupError",)),
    # ------------------------------------------------ sockets of every family, io_uring
    Case("socket_inet", PRELUDE + "import socket\n"
         + _report("attempt(lambda: socket.create_connection(('127.0.0.1', @PORT@), timeout=2))"),
         REPORTED, ("refused:PermissionError",)),
    Case("socket_inet6", PRELUDE + "import socket\n"
         + _report("attempt(lambda: socket.socket(socket.AF_INET6).connect(('::1', @PORT6@)))"),
         REPORTED, ("refused:PermissionError",)),
    Case("socket_unix", PRELUDE + "import socket\n"
         + _report("attempt(lambda: socket.socket(socket.AF_UNIX).connect('@UNIX@'))",
                   "attempt(lambda: socket.socket(socket.AF_UNIX).connect('\\0@ABSTRACT@'))"),
         REPORTED, ("refused:PermissionError refused:PermissionError",)),
    Case("socket_netlink_packet", PRELUDE + "import socket\n"
         + _report("attempt(lambda: socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0))",
                   "attempt(lambda: socket.socket(socket.AF_PACKET, socket.SOCK_RAW))"),
         REPORTED, ("refused:PermissionError refused:PermissionError",)),
    Case("socketpair", PRELUDE + "import socket\n" + _report("attempt(socket.socketpair)"), REPORTED,
         ("refused:PermissionError",)),
    Case("dns", PRELUDE + "import socket\n" + _report("attempt(lambda: socket.getaddrinfo('example.com', 80))"),
         REPORTED, ("refused:",)),
    Case("raw_socket_calls", PRELUDE + _report("raw(41, 2, 1, 0)", "raw(53, 1, 1, 0, 0)"), REPORTED,
         ("refused:errno1 refused:errno1",), raw=X86),
    Case("io_uring_connect", PRELUDE + IO_URING + _report("uring_connect('@UNIX@', b'@TOKEN@')"), REPORTED,
         ("refused:io_uring_setup errno1",), raw=X86),
    # ------------------------------------------------ the host's files
    Case("etc_shadow", PRELUDE + _report("attempt(lambda: open('/etc/shadow').read())",
                                         "attempt(lambda: open('/etc/passwd').read())"),
         REPORTED, ("refused:FileNotFoundError refused:FileNotFoundError",)),
    Case("root_home", PRELUDE + _report("'root:' + (','.join(sorted(os.listdir('/root'))) if os.path.isdir('/root') else '-')"),
         REPORTED, ("root:",),
         lacks=("ALLOWED", "@ROOT_ENTRIES@")),
    Case("dataset_file", PRELUDE + "def look():\n    names = 0\n    for folder, _, files in os.walk('/'):\n"
         "        names += os.path.basename('@DATASET@') in files\n    return 'found:%d' % names\n"
         + _report("attempt(lambda: open('@DATASET@').read())", "look()"), REPORTED,
         ("refused:FileNotFoundError", "found:0"), lacks=("ALLOWED", "REFERENCE-")),
    Case("secret_file", PRELUDE + _report("attempt(lambda: open('@SECRET_FILE@').read())"), REPORTED,
         ("refused:FileNotFoundError",), lacks=("ALLOWED", "SECRET-")),
    Case("proc_environ", PRELUDE + _report("attempt(lambda: open('/proc/1/environ').read())",
                                           "attempt(lambda: open('/proc/%d/environ' % os.getppid()).read())",
                                           "'key:' + str('sk-hostile' in str(os.environ))"),
         REPORTED, ("refused:FileNotFoundError refused:FileNotFoundError key:False",)),
    Case("reference_in_memory", PRELUDE + "import gc\ndef scan():\n"
         "    marker = 'REFERENCE_'.replace('_', '-')  # not a constant the scan would find in its own code\n"
         "    def strings(o):\n        if isinstance(o, dict):\n            return [*o.keys(), *o.values()]\n"
         "        return list(o) if isinstance(o, (list, tuple)) else []\n"
         "    return 'copies:%d' % sum(isinstance(s, str) and marker in s for o in gc.get_objects() for s in strings(o))\n"
         + _report("scan()"), REPORTED, ("copies:0",)),
    Case("exec_the_reference", PRELUDE + "import json\nfor source in ('@DATASET@', '/proc/self/cmdline'):\n"
         "    try:\n        exec(json.loads(open(source).readline())['code'])\n    except BaseException:\n        pass\n"
         "if 'f' not in globals():\n    def f(x):\n        return 0\n", ("failed",)),
    Case("identity", PRELUDE + _report("'uid:%d gid:%d' % (os.getuid(), os.getgid())", "attempt(lambda: os.setuid(0))"),
         REPORTED, ("uid:65534 gid:65534 refused:PermissionError",)),
    # ------------------------------------------------ writing outside, leaving things behind
    Case("write_outside", PRELUDE + _report("attempt(lambda: touch('@MARKER@/outside'))",
                                            "attempt(lambda: touch('/usr/escape'))",
                                            "attempt(lambda: os.mkdir('/escape'))",
                                            "attempt(lambda: os.symlink('/tmp', '/escape-link'))"),
         REPORTED, ("refused:",)),
    Case("setuid_binary", PRELUDE + "import stat\ndef make():\n    with open('/tmp/id', 'wb') as handle:\n"
         "        handle.write(b'\\x7fELF' + bytes(4092))\n    os.chmod('/tmp/id', 0o4755)\n"
         "    return oct(os.stat('/tmp/id').st_mode)\n"
         + _report("make()", "attempt(lambda: os.execv('/tmp/id', ['id']))",
                   "attempt(lambda: os.rename('/tmp/id', '@MARKER@/id'))"),
         REPORTED, ("refused:PermissionError",)),
    Case("device_nodes", PRELUDE + "import stat\n"
         + _report("attempt(lambda: os.mknod('/tmp/mem', stat.S_IFCHR | 0o666, os.makedev(1, 1)))",
                   "attempt(lambda: open('/dev/sda', 'rb'))", "','.join(sorted(os.listdir('/dev')))"),
         REPORTED, ("refused:PermissionError refused:FileNotFoundError full,null,random,urandom,zero",)),
    Case("leave_a_thread_behind", "import threading, time\n"
         "threading.Thread(target=time.sleep, args=(600,), daemon=False).start()\n"
         "def f(x):\n    return x + 1\n", ("passed",), lacks=()),
    # ------------------------------------------------ privileges and namespaces
    Case("ptrace", PRELUDE + _report("raw(101, 16, 1, 0, 0)", "raw(101, 0, 0, 0, 0)", "raw(310, 1, 0, 0, 0, 0, 0)"),
         REPORTED, ("refused:errno1 refused:errno1 refused:errno1",), raw=X86),
    Case("namespaces_and_mounts", PRELUDE + _report("raw(272, 0x10000000)", "raw(308, 0, 0)",
                                                    "raw(165, b'none', b'/tmp', b'tmpfs', 0, None)",
                                                    "raw(161, b'/tmp')", "raw(155, b'/tmp', b'/tmp')"),
         REPORTED, ("refused:errno1 refused:errno1 refused:errno1 refused:errno1 refused:errno1",), raw=X86),
    Case("kernel_surface", PRELUDE + _report("raw(321, 0, 0, 0)", "raw(298, 0, 0, -1, -1, 0)", "raw(323, 0)",
                                             "raw(250, 0, 0)", "raw(319, b'x', 0)", "raw(304, -100, 0, 0)",
                                             "raw(157, 1, 0, 0, 0, 0)", "raw(317, 1, 0, 0)"),
         REPORTED, ("refused:errno1 " * 7 + "refused:errno1",), raw=X86),
    Case("x32_abi", PRELUDE + _report("raw(0x40000000 | 39)"), REPORTED, ("refused:errno1",), raw=X86),
    Case("i386_abi", "import ctypes, mmap\n"
         "code = mmap.mmap(-1, 4096, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)\n"
         "code.write(b'\\xb8\\x14\\x00\\x00\\x00\\xcd\\x80\\xc3')  # mov eax, 20 (getpid); int 0x80; ret\n"
         "address = ctypes.addressof(ctypes.c_char.from_buffer(code))\n"
         "def f(x):\n    return ctypes.CFUNCTYPE(ctypes.c_int)(address)()\n",
         ("crashed",), ("SIGSYS",), raw=X86),
    # ------------------------------------------------ the verdict itself
    Case("forge_every_descriptor", "import os, json\n"
         "lines = [json.dumps({'verdict': 'passed', 'detail': ''}), 'done', 'passed', 'status:tester:0',\n"
         "         'setup-error:forged', 'isolation:namespaces']\n"
         "forged = ('\\n'.join(lines) + '\\n').encode()\n"
         "def f(x):\n    for fd in range(1024):\n        try:\n            os.write(fd, forged)\n        except OSError:\n"
         "            pass\n    return 0\n", FAILS),
    Case("patch_os_exit", "import os\nreal = os._exit\nos._exit = lambda code: real(0)\n"
         "def f(x):\n    return 0\n", ("failed",)),
    Case("always_equal", "class Anything:\n    def __eq__(self, other):\n        return True\n"
         "    __hash__ = object.__hash__\ndef f(x):\n    return Anything()\n", ("failed",)),
    Case("equal_int_subclass", "class Liar(int):\n    def __eq__(self, other):\n        return True\n"
         "    __hash__ = int.__hash__\ndef f(x):\n    return Liar(0)\n", ("failed",)),
    Case("equal_list_subclass", "class Liar(list):\n    def __eq__(self, other):\n        return True\n"
         "def f(items):\n    return Liar()\n", ("failed",), task="unique"),
    Case("forged_setup_error", "import os, sys\nfor fd in range(3, 256):\n    try:\n"
         "        os.write(fd, b'setup-error:forged by the candidate\\n')\n    except OSError:\n        pass\n"
         "print('setup-error:forged'); sys.stdout.flush()\nos._exit(125)\n", ("error",)),
    Case("fake_verdict_output", "import sys\nprint('{\"verdict\": \"passed\", \"detail\": \"\"}')\nprint('done')\n"
         "print('passed', file=sys.stderr)\ndef f(x):\n    return 0\n", ("failed",)),
    Case("exit_early", "import sys\nsys.exit(0)\ndef f(x):\n    return x + 1\n", ("error",), ("SystemExit",)),
    Case("system_exit_in_tests", "def f(x):\n    raise SystemExit(0)\n", ("error",), ("SystemExit",)),
    Case("keyboard_interrupt_in_tests", "def f(x):\n    raise KeyboardInterrupt\n", ("error",), ("KeyboardInterrupt",)),
    Case("assertion_says_passed", "def f(x):\n    raise AssertionError('passed')\n", FAILS),
    Case("patch_builtins", "import builtins\nbuiltins.isinstance = lambda *args: True\nbuiltins.set = lambda *args: 0\n"
         "builtins.type = lambda *args: list\nbuiltins.AssertionError = type('Quiet', (Exception,), {})\n"
         "def f(items):\n    return 'wrong'\n", FAILS, task="unique"),
    Case("shadow_a_builtin", "def set(*args):\n    return 0\ndef isinstance(*args):\n    return True\n"
         "def f(items):\n    return 'wrong'\n", ("failed",), task="unique"),
    Case("shadow_a_test_import", "class math:\n    @staticmethod\n    def isclose(*args, **kwargs):\n        return True\n"
         "def f(x):\n    return -1\n", ("failed",), task="inverse"),
    Case("garbage_on_every_descriptor", "import os\ndef f(x):\n    for fd in range(3, 1024):\n        try:\n"
         "            os.write(fd, b'\\xff\\xff\\xff\\x7fgarbage')\n        except OSError:\n            pass\n"
         "    os.closerange(0, 1024)\n    return 2\n", FAILS),
    Case("close_every_descriptor", "import os\nos.closerange(0, 1024)\ndef f(x):\n    return x + 1\n", ("error",)),
]
