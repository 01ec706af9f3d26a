"""A Redis Cluster the tests start on loopback: `redis-server --cluster-enabled yes` processes made one cluster by
`redis-cli --cluster create`, each keeping nothing on disk, so a killed primary's replica takes over."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time

from tests.proxy.helpers import free_port

CLUSTER_MISSING = None if shutil.which("redis-server") and shutil.which("redis-cli") else \
    "no redis-server and redis-cli on PATH (Debian: apt install redis-server)"


def _port() -> int:
    """A free port whose cluster bus port (10,000 above it) is a port too."""
    while True:
        port = free_port()
        if port < 55000:
            return port


class RedisCluster:
    """`primaries` primaries, each with `replicas` replicas; `url` is the proxy's `--redis` for it."""

    def __init__(self, folder, primaries: int = 3, replicas: int = 1) -> None:
        self.folder = str(folder)
        self.ports = [_port() for _ in range(primaries * (1 + replicas))]
        self.processes: dict[int, subprocess.Popen] = {}
        for port in self.ports:
            where = os.path.join(self.folder, str(port))
            os.makedirs(where, exist_ok=True)
            self.start(port)
        for port in self.ports:
            self._wait(lambda port=port: self._cli(port, "ping").strip() == "PONG", "redis-server did not start")
        if primaries == 1 and replicas == 0:  # redis-cli makes clusters of three primaries or more
            self._cli(self.ports[0], "cluster", "addslotsrange", "0", "16383")
        else:
            subprocess.run(["redis-cli", "--cluster", "create", *(f"127.0.0.1:{port}" for port in self.ports),
                            "--cluster-replicas", str(replicas), "--cluster-yes"],
                           check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=60)
        self._wait(self.healthy, "the cluster never became whole")
        self._wait(self.replicated, "the replicas never caught up with their primaries")

    def start(self, port: int) -> None:
        """Start the node at `port` (again: a node killed earlier rejoins, as the replica of who took over)."""
        where = os.path.join(self.folder, str(port))
        self.processes[port] = subprocess.Popen(
            ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--cluster-enabled", "yes",
             "--cluster-config-file", os.path.join(where, "nodes.conf"), "--cluster-node-timeout", "2000",
             "--save", "", "--appendonly", "no", "--repl-diskless-sync-delay", "0",
             # A replica, however long since it last heard its primary (a loaded machine), may take over.
             "--cluster-replica-validity-factor", "0", "--dir", where],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def replicated(self) -> bool:
        """Every live replica online at its primary."""
        online = sum(self._cli(port, "info", "replication").count("state=online") for port in self.alive_ports())
        return online == len(self.alive_ports()) - len(self.primaries())

    @property
    def url(self) -> str:
        """Three live nodes (redis-py's cluster client gives up where its first seed node is down)."""
        return "redis+cluster://" + ",".join(f"127.0.0.1:{port}" for port in self.alive_ports()[:3])

    @staticmethod
    def _cli(port: int, *command: str) -> str:
        done = subprocess.run(["redis-cli", "-p", str(port), *command], capture_output=True, text=True, timeout=10)
        return done.stdout

    @staticmethod
    def _wait(ready, message: str) -> None:
        for _ in range(1500):
            try:
                if ready():
                    return
            except (subprocess.SubprocessError, OSError):
                pass
            time.sleep(0.02)
        raise AssertionError(message)

    def alive_ports(self) -> list[int]:
        return [port for port, process in self.processes.items() if process.poll() is None]

    def healthy(self) -> bool:
        """Every slot served, as every live node sees it."""
        return all("cluster_state:ok" in self._cli(port, "cluster", "info") for port in self.alive_ports())

    def primaries(self) -> list[int]:
        """The ports of the primaries that serve slots now."""
        found = []
        for line in self._cli(self.alive_ports()[0], "cluster", "nodes").splitlines():
            fields = line.split()
            if "master" in fields[2] and "fail" not in fields[2] and len(fields) > 8:
                found.append(int(fields[1].split("@")[0].rsplit(":", 1)[1]))
        return found

    def replica_of(self, port: int) -> int:
        """The port of a replica of the primary at `port`."""
        lines = [line.split() for line in self._cli(port, "cluster", "nodes").splitlines()]
        primary = next(fields[0] for fields in lines if "myself" in fields[2])
        return next(int(fields[1].split("@")[0].rsplit(":", 1)[1]) for fields in lines
                    if "slave" in fields[2] and fields[3] == primary)

    def stop(self, port: int) -> None:
        """SIGSTOP a node: it takes nothing from its primary (nor answers anyone) until `resume`."""
        self.processes[port].send_signal(signal.SIGSTOP)

    def resume(self, port: int) -> None:
        self.processes[port].send_signal(signal.SIGCONT)

    def read(self, port: int, key: str) -> dict[str, str]:
        """A hash as the node at `port` holds it now (a replica too: READONLY)."""
        lines = subprocess.run(["redis-cli", "-p", str(port)], input=f"READONLY\nHGETALL {key}\n",
                               capture_output=True, text=True, timeout=10).stdout.splitlines()[1:]
        return dict(zip(lines[::2], lines[1::2]))

    def kill_primary(self, port: int) -> None:
        """`kill -9` of a primary, then wait until one of its replicas is a primary and every live node sees every
        slot served. (Waiting only for the dead primary to leave `primaries` returns too early: a node that merely
        suspects it, `fail?`, already leaves it out while the cluster still reads as ok.)"""
        nodes = [line.split() for line in self._cli(port, "cluster", "nodes").splitlines()]
        (victim,) = [fields[0] for fields in nodes if "myself" in fields[2]]
        replicas = [int(fields[1].split("@")[0].rsplit(":", 1)[1]) for fields in nodes if fields[3] == victim]
        self.processes[port].kill()
        self.processes[port].wait()

        def taken_over() -> bool:
            promoted = any(self._cli(replica, "role").split("\n", 1)[0].strip() == "master" for replica in replicas)
            return promoted and self.healthy()

        self._wait(taken_over, "no replica took over")

    def rejoin(self, port: int) -> None:
        """Start a killed node again and wait until it is a replica online at its primary."""
        self.start(port)
        self._wait(lambda: self.healthy() and self.replicated() and port in [
            int(line.split()[1].split("@")[0].rsplit(":", 1)[1]) for line in
            self._cli(port, "cluster", "nodes").splitlines() if "slave" in line.split()[2]],
            "the killed node never came back as a replica")

    def commands(self) -> dict[str, int]:
        """Each command's calls over the primaries (INFO commandstats; a replica counts what it copies again)."""
        counts: dict[str, int] = {}
        for port in self.primaries():
            for line in self._cli(port, "info", "commandstats").splitlines():
                if line.startswith("cmdstat_"):
                    name, _, rest = line.partition(":")
                    calls = int(rest.split(",")[0].split("=")[1])
                    counts[name[8:]] = counts.get(name[8:], 0) + calls
        return counts

    def close(self) -> None:
        for process in self.processes.values():
            if process.poll() is None:
                process.kill()
                process.wait()
