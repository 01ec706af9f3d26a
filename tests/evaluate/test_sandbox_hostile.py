"""The sandbox against hostile candidates, end to end: `bamasc score` over every case of hostile/cases.py.

Two `score` runs judge the cases (as this user, and again as a user other
than root where this machine allows it): those that must time out, at a 2 s
wall-time limit, and the rest at 20 s, so that a loaded machine cannot turn
their verdict into a timeout (it did, once, for four of them at 2 s). Each case asserts its verdict and
what its detail holds; the run as a whole asserts that nothing reached the
host (listening sockets on 127.0.0.1, ::1, a Unix path and an abstract name;
a bystander process; a marker folder anyone may write to; a secret file only
root may read; the dataset with the reference solutions) and that nothing
was left behind: no file in the marker folder, no setuid file, no sandbox
folder in the temporary directory, no process of the jail or started by a
candidate.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import stat
import subprocess
import sys
import threading
import uuid

import pytest

from tests.evaluate.hostile import namespaces_work
from tests.evaluate.hostile.cases import CASES, TASKS

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
X86 = os.uname().machine == "x86_64"
SELECTED = [case for case in CASES if X86 or not case.raw]
TIMEOUT = "2"  # --code-timeout: the busy loop and the sleep cost this much each
GENEROUS = "20"  # --code-timeout for the cases that must not time out (a later --code-timeout wins)
SLOW = [case for case in SELECTED if "timeout" in case.verdicts]
QUICK = [case for case in SELECTED if "timeout" not in case.verdicts]


pytestmark = pytest.mark.skipif(not namespaces_work(), reason="this machine allows no user namespaces")


class Host:
    """What the candidates must not reach, and the checks that they did not."""

    def __init__(self, folder) -> None:
        self.token = uuid.uuid4().hex[:12]
        self.folder = folder
        self.marker = folder / "markers"
        self.marker.mkdir()
        os.chmod(self.marker, 0o777)  # writable by anyone: only the jail can keep a candidate out
        self.secret = folder / "secret.txt"
        self.secret.write_text(f"SECRET-{self.token}")
        os.chmod(self.secret, 0o600)
        self.accepted: list = []
        self.listeners = []
        self.unix = str(folder / "host.sock")
        self.abstract = f"bamasc-hostile-{self.token}"
        for family, address in ((socket.AF_INET, ("127.0.0.1", 0)), (socket.AF_INET6, ("::1", 0)),
                                (socket.AF_UNIX, self.unix), (socket.AF_UNIX, "\0" + self.abstract)):
            try:
                listener = socket.socket(family)
                listener.bind(address)
            except OSError:
                continue  # no IPv6 here: the case still checks that the socket is refused
            listener.listen()
            listener.settimeout(0.1)
            self.listeners.append(listener)
        self.ports = {listener.family: listener.getsockname()[1] for listener in self.listeners
                      if listener.family in (socket.AF_INET, socket.AF_INET6)}
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()
        self.bystander = subprocess.Popen(["sleep", "300"])
        self.tmp = folder / "tmp"  # the runs' TMPDIR: what they leave there is theirs alone
        self.tmp.mkdir()
        # Orphans of the runs are reparented to this process, so a process left behind is a child here.
        import ctypes

        self.libc = ctypes.CDLL(None, use_errno=True)
        assert self.libc.prctl(36, 1, 0, 0, 0) == 0  # PR_SET_CHILD_SUBREAPER
        home = "/root" if os.path.isdir("/root") and os.access("/root", os.R_OK) else None
        jail_root_entry = sys.base_prefix.split("/")[2] if sys.base_prefix.startswith("/root/") else None
        self.root_entries = [name for name in (os.listdir(home) if home else [])
                             if name != jail_root_entry and len(name) > 2]

    def _accept(self) -> None:
        while not self.stop.is_set():
            for listener in self.listeners:
                try:
                    connection, _ = listener.accept()
                except OSError:
                    continue
                connection.settimeout(0.5)
                try:
                    self.accepted.append(connection.recv(100))
                except OSError:
                    self.accepted.append(b"")
                connection.close()

    def fill(self, text: str) -> str:
        values = {"@TOKEN@": self.token, "@MARKER@": str(self.marker), "@UNIX@": self.unix,
                  "@ABSTRACT@": self.abstract, "@PORT@": str(self.ports.get(socket.AF_INET, 9)),
                  "@PORT6@": str(self.ports.get(socket.AF_INET6, 9)), "@DATASET@": str(self.folder / "mbpp.jsonl"),
                  "@SECRET_FILE@": str(self.secret), "@BYSTANDER@": str(self.bystander.pid)}
        for key, value in values.items():
            text = text.replace(key, value)
        return text

    def write(self, cases) -> tuple[str, str]:
        dataset, predictions = self.folder / "mbpp.jsonl", self.folder / "predictions.jsonl"
        with open(dataset, "w") as rows, open(predictions, "w") as answers:
            for number, case in enumerate(cases, 1):
                task = TASKS[case.task]
                rows.write(json.dumps({
                    "task_id": number, "text": case.name, "code": self.fill(task.reference),
                    "test_list": list(task.tests), "test_setup_code": task.setup, "test_imports": list(task.imports),
                }) + "\n")
                answers.write(json.dumps({"task_id": number, "prediction": self.fill(case.code)}) + "\n")
        return str(dataset), str(predictions)

    def score(self, cases, runner=(), extra=()) -> tuple[subprocess.CompletedProcess, dict]:
        dataset, predictions = self.write(cases)
        output = self.folder / f"verdicts-{uuid.uuid4().hex[:6]}.jsonl"
        environment = dict(os.environ, OPENAI_API_KEY=f"sk-hostile-{self.token}", TMPDIR=str(self.tmp))
        command = [*runner, sys.executable, "-m", "bamasc", "score", "--dataset", dataset, "--kind", "mbpp",
                   "--predictions", predictions, "-o", str(output), "--code-timeout", TIMEOUT,
                   "--concurrency", "2", *extra]
        done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, env=environment, timeout=300)
        verdicts = {}
        if output.exists():
            for line in output.read_text().splitlines():
                row = json.loads(line)
                verdicts[cases[int(row["id"]) - 1].name] = row
        return done, verdicts

    def close(self) -> None:
        self.stop.set()
        self.thread.join()
        for listener in self.listeners:
            listener.close()
        self.bystander.kill()
        self.bystander.wait()
        self.libc.prctl(36, 0, 0, 0, 0)

    def leftovers(self) -> list[str]:
        """Everything the run left on the host or let through, as readable lines (empty: clean)."""
        found = [f"a listener received {data!r}" for data in self.accepted]
        found += [f"written outside: {name}" for name in os.listdir(self.marker)]
        if self.bystander.poll() is not None:
            found.append("the bystander process was killed")
        found += [f"left in the temporary folder: {name}" for name in os.listdir(self.tmp)]
        for folder, _, names in os.walk(self.folder):
            for name in names:
                path = os.path.join(folder, name)
                if os.lstat(path).st_mode & (stat.S_ISUID | stat.S_ISGID):
                    found.append(f"a setuid file: {path}")
        for pid in (name for name in os.listdir("/proc") if name.isdigit()):
            try:
                with open(f"/proc/{pid}/stat") as handle:
                    state, parent = handle.read().rsplit(")", 1)[1].split()[:2]
                with open(f"/proc/{pid}/cmdline", "rb") as handle:
                    command = handle.read().decode("utf-8", "replace")
            except (OSError, ValueError):
                continue  # gone meanwhile
            if int(parent) == os.getpid() and int(pid) != self.bystander.pid:
                if state == "Z":
                    os.waitpid(int(pid), 0)  # ended, and only this process could reap it
                else:
                    found.append(f"a process is left: {pid} {command!r}")
            elif self.token in command.replace(f"sk-hostile-{self.token}", ""):
                found.append(f"a process started by a candidate: {pid} {command!r}")
        return found


def check(case, verdict, host) -> list[str]:
    """What is wrong with one case's verdict (empty: as expected)."""
    if verdict is None:
        return [f"{case.name}: no verdict"]
    detail = verdict["detail"]
    kind = "passed" if verdict["correct"] else detail.split(":", 1)[0]
    problems = []
    if kind not in case.verdicts:
        problems.append(f"verdict {kind!r}, expected one of {case.verdicts}")
    if verdict["correct"] != (case.verdicts == ("passed",)):
        problems.append(f"scored correct={verdict['correct']}")
    for text in case.has:
        if host.fill(text) not in detail:
            problems.append(f"the detail lacks {host.fill(text)!r}")
    lacks = [host.token, "SECRET-", f"sk-hostile-{host.token}"]
    for text in case.lacks:
        lacks += host.root_entries if text == "@ROOT_ENTRIES@" else [host.fill(text)]
    problems += [f"the detail holds {text!r}" for text in lacks if text in detail]
    return [f"{case.name}: {problem} (detail: {detail[:300]!r})" for problem in problems]


@pytest.fixture(scope="module")
def host(tmp_path_factory):
    folder = tmp_path_factory.mktemp("hostile")
    made = Host(folder)
    yield made
    made.close()


@pytest.fixture(scope="module")
def scored(host):
    """(each run with its cases, every verdict by case name)."""
    quick, quick_verdicts = host.score(QUICK, extra=("--code-timeout", GENEROUS))
    slow, slow_verdicts = host.score(SLOW)
    return ((quick, QUICK), (slow, SLOW)), {**quick_verdicts, **slow_verdicts}


def test_the_suite_is_large_enough():
    assert len(SELECTED) >= 60
    assert len({case.name for case in CASES}) == len(CASES)


def test_every_hostile_candidate_gets_the_verdict_it_deserves(scored, host):
    runs, verdicts = scored
    for done, _ in runs:
        assert done.returncode == 0, done.stderr
    problems = [problem for case in SELECTED for problem in check(case, verdicts.get(case.name), host)]
    assert problems == []


def test_the_score_run_ends_normally_and_counts_only_honest_candidates(scored):
    runs, verdicts = scored
    assert len(verdicts) == len(SELECTED)
    for done, cases in runs:
        assert "Traceback" not in done.stderr and "Traceback" not in done.stdout
        honest = sum(case.verdicts == ("passed",) for case in cases)
        assert done.stdout.rstrip().endswith(f"accuracy: {honest}/{len(cases)}")


def test_nothing_reached_the_host_or_was_left_on_it(scored, host):
    assert all(done.returncode == 0 for done, _ in scored[0])
    assert host.leftovers() == []


def test_the_same_cases_as_a_user_other_than_root(host):
    """Run the jail's unprivileged path: as root, in a user namespace where this test is uid 1000
    without capabilities (the jail then maps that user, as it does for any user but root)."""
    if os.geteuid() != 0:
        pytest.skip("this run is already not root: the cases above covered the unprivileged path")
    if shutil.which("unshare") is None:
        pytest.skip("no unshare(1) to run as another user")
    quick = QUICK
    probe = subprocess.run(["unshare", "-U", "--map-user=1000", "--map-group=1000", "true"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip(f"user namespaces are not available: {probe.stderr.decode().strip()}")
    # None of these cases should take long, so a generous wall-time limit (the later --code-timeout
    # wins) keeps a loaded machine from turning a memory bomb's 'memory' verdict into 'timeout'.
    done, verdicts = host.score(
        quick, runner=("unshare", "-U", "--map-user=1000", "--map-group=1000"), extra=("--code-timeout", GENEROUS)
    )
    assert done.returncode == 0, done.stderr
    assert [problem for case in quick for problem in check(case, verdicts.get(case.name), host)] == []
    assert host.leftovers() == []


def test_without_a_jail_score_refuses_unless_asked_and_then_warns(host, tmp_path):
    """In a user namespace whose IDs are not mapped, no jail can be built: `score` must say so
    (exit 1, no traceback, no verdicts); with --unsafe-hooks it runs and warns, and the verdict
    still belongs to the tests alone."""
    if shutil.which("unshare") is None:
        pytest.skip("no unshare(1) to make a machine without namespaces")
    probe = subprocess.run(["unshare", "-U", "true"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip(f"user namespaces are not available: {probe.stderr.decode().strip()}")
    names = ("honest", "patch_os_exit", "always_equal", "forge_every_descriptor", "forged_setup_error",
             "fake_verdict_output", "exit_early", "equal_int_subclass")
    cases = [case for case in CASES if case.name in names]
    refused, verdicts = host.score(cases, runner=("unshare", "-U"))
    assert refused.returncode == 1 and verdicts == {}
    assert "bamasc: error: the sandbox cannot build its namespaces jail" in refused.stderr
    assert "--unsafe-hooks" in refused.stderr and "Traceback" not in refused.stderr
    done, verdicts = host.score(cases, runner=("unshare", "-U"), extra=("--unsafe-hooks",))
    assert done.returncode == 0, done.stderr
    assert "warning: --unsafe-hooks" in done.stderr and "not a sandbox" in done.stderr
    assert {name: row["correct"] for name, row in verdicts.items()} == {name: name == "honest" for name in names}
    assert host.leftovers() == []
