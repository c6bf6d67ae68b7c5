"""Three real ``redis-server`` masters (and, if asked, their replicas) as one Redis Cluster."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import redis
from redis.cluster import RedisCluster

from devtools.redis_harness.binaries import find_redis_server
from devtools.redis_harness.server import RedisServer, RedisStartError
from devtools.redis_harness.tls import TLSFiles

CLUSTER_TIMEOUT = 30.0  # seconds until a new cluster must agree on its slot map


class RedisClusterHarness:
    """Three ``redis-server`` masters forming one Redis Cluster, and ``replicas``
    replicas of each (none by default).

    Built with plain commands (CLUSTER ADDSLOTS / CLUSTER MEET / CLUSTER
    REPLICATE), which Redis 6.2 understands, so no ``redis-cli --cluster`` is
    needed. ``servers`` lists the masters first, then the replicas. With ``tls`` every
    node serves clients, its cluster bus and replication over TLS only.
    """

    SLOT_RANGES = ((0, 5460), (5461, 10922), (10923, 16383))

    def __init__(
        self,
        workdir: Path,
        *,
        binary: Path | None = None,
        replicas: int = 0,
        tls: TLSFiles | None = None,
    ) -> None:
        self.workdir = Path(workdir)
        self.binary = binary or find_redis_server()
        self.tls = tls
        masters = len(self.SLOT_RANGES)
        over_tls = ["--tls-cluster", "yes", "--tls-replication", "yes"] if tls else []
        self.servers = [
            RedisServer(
                self.workdir / f"node{i}",
                binary=self.binary,
                cluster_bus=True,
                name=f"cluster-node{i}",
                tls=tls,
                extra_args=[
                    *over_tls,
                    "--cluster-enabled",
                    "yes",
                    "--cluster-config-file",
                    "nodes.conf",
                    "--cluster-node-timeout",
                    "2000",
                    # A replica's first sync starts at once, not after Redis 7's 5 s wait.
                    *(["--repl-diskless-sync-delay", "0"] if replicas else []),
                ],
            )
            for i in range(masters * (1 + replicas))
        ]
        self.masters = self.servers[:masters]
        # replica n follows master n % 3
        self.replicas = self.servers[masters:]

    @property
    def nodes(self) -> list[tuple[str, int]]:
        return [(s.host, s.port) for s in self.servers]

    @property
    def url(self) -> str:
        return self.servers[0].url

    @property
    def version(self) -> tuple[int, ...]:
        return self.servers[0].version

    @property
    def log_paths(self) -> list[Path]:
        return [s.log_path for s in self.servers]

    def client(self, **kwargs: Any) -> RedisCluster:
        """A new ``redis.cluster.RedisCluster`` that starts from the first node."""
        kwargs.setdefault("socket_timeout", 5)
        kwargs.setdefault("socket_connect_timeout", 5)
        for key, value in self.tls.client_options().items() if self.tls is not None else ():
            kwargs.setdefault(key, value)
        host, port = self.nodes[0]
        return RedisCluster(host=host, port=port, **kwargs)

    def node_clients(self, **kwargs: Any) -> list[redis.Redis]:
        """One plain ``redis.Redis`` per node started as a master."""
        return [s.client(**kwargs) for s in self.masters]

    def master_of(self, slot: int) -> RedisServer:
        """The master serving ``slot`` now (after failovers and migrations too)."""
        live = next(s for s in self.servers if s.is_running())
        with live.client() as conn:
            for first, last, port in self._slot_map(conn):
                if first <= slot <= last:
                    return next(s for s in self.servers if s.port == port)
        raise AssertionError(f"no node serves slot {slot}")

    def replica_of(self, master: RedisServer) -> RedisServer:
        """The one replica of ``master``."""
        master_id = node_id(master)
        with master.client(decode_responses=True) as conn:
            nodes = str(conn.execute_command("CLUSTER", "NODES")).splitlines()
        # <id> <ip:port@bus> <flags> <master id> ...
        ports = [
            int(line.split()[1].split("@")[0].rpartition(":")[2])
            for line in nodes
            if line.split()[3] == master_id
        ]
        (replica,) = [s for s in self.servers if s.port in ports]
        return replica

    def start(self, timeout: float = CLUSTER_TIMEOUT) -> RedisClusterHarness:
        for server in self.servers:
            server.start()
        try:
            self._form(timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        for server in self.servers:
            server.stop()

    def ensure_running(self, timeout: float = CLUSTER_TIMEOUT) -> None:
        """Restart stopped nodes (same ports, same nodes.conf) and wait for agreement."""
        for server in self.servers:
            server.start()
        clients = self.node_clients(decode_responses=True)
        try:
            self._wait_until_agreed(clients, timeout)
        finally:
            for conn in clients:
                conn.close()

    def _form(self, timeout: float) -> None:
        clients = [s.client(decode_responses=True) for s in self.servers]
        try:
            for conn, (first, last) in zip(clients, self.SLOT_RANGES, strict=False):
                conn.execute_command("CLUSTER", "ADDSLOTS", *range(first, last + 1))
            for server in self.servers[1:]:
                clients[0].execute_command("CLUSTER", "MEET", server.host, server.port)
            self._wait_until_agreed(clients, timeout)
            if self.replicas:
                self._attach_replicas(clients, timeout)
        finally:
            for conn in clients:
                conn.close()

    def _attach_replicas(self, clients: list[redis.Redis], timeout: float) -> None:
        masters = len(self.masters)
        ids = [conn.execute_command("CLUSTER", "MYID") for conn in clients[:masters]]
        deadline = time.monotonic() + timeout
        for n, conn in enumerate(clients[masters:]):
            while True:  # the replica must have heard of its master through gossip
                try:
                    conn.execute_command("CLUSTER", "REPLICATE", ids[n % masters])
                    break
                except redis.ResponseError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.1)
        while time.monotonic() < deadline:
            links = [conn.info("replication") for conn in clients[masters:]]
            known = [self._replicas_known(conn) for conn in clients]
            if all(i.get("master_link_status") == "up" for i in links) and min(known) == len(
                self.replicas
            ):
                return
            time.sleep(0.1)
        raise RedisStartError(f"the replicas did not sync within {timeout:.0f}s")

    @staticmethod
    def _replicas_known(conn: redis.Redis) -> int:
        """How many replicas the node ``conn`` knows of (they need votes to fail over)."""
        raw = conn.execute_command("CLUSTER", "NODES")
        text = raw if isinstance(raw, str) else raw.decode()
        # <id> <ip:port@bus> <flags> ...: flags such as "slave" or "myself,slave"
        return sum("slave" in line.split()[2].split(",") for line in text.splitlines())

    def _wait_until_agreed(self, clients: list[redis.Redis], timeout: float) -> None:
        expected = sorted(
            (first, last, s.port)
            for (first, last), s in zip(self.SLOT_RANGES, self.masters, strict=True)
        )
        deadline = time.monotonic() + timeout
        last_seen: dict[int, Any] = {}
        while time.monotonic() < deadline:
            agreed = True
            for server, conn in zip(self.servers, clients, strict=False):
                info = conn.execute_command("CLUSTER", "INFO")
                text = info if isinstance(info, str) else info.decode()
                slot_map = self._slot_map(conn)
                last_seen[server.port] = (text.splitlines()[0] if text else "", slot_map)
                if "cluster_state:ok" not in text or slot_map != expected:
                    agreed = False
            if agreed:
                return
            time.sleep(0.1)
        logs = "\n".join(s.log_tail(10) for s in self.servers)
        raise RedisStartError(
            f"the cluster did not reach cluster_state:ok with one slot map within {timeout:.0f}s; "
            f"expected {expected}, saw {last_seen}.\n{logs}"
        )

    @staticmethod
    def _slot_map(conn: redis.Redis) -> list[tuple[int, int, int]]:
        # Raw CLUSTER SLOTS reply: [[start, end, [host, port, id, ...], replicas...], ...]
        raw = conn.execute_command("CLUSTER SLOTS")
        if isinstance(raw, dict):  # redis-py's parsed form: {(start, end): {"primary": ...}}
            return sorted((a, b, int(v["primary"][1])) for (a, b), v in raw.items())
        return sorted((int(r[0]), int(r[1]), int(r[2][1])) for r in raw)


def node_id(server: RedisServer) -> str:
    """The cluster node id of ``server``."""
    with server.client(decode_responses=True) as conn:
        return str(conn.execute_command("CLUSTER", "MYID"))
