"""One real ``redis-server`` process on a free loopback port, and a temporary directory.

Every server binds 127.0.0.1 (on its TLS port alone, if given :class:`TLSFiles`), keeps
its log (``redis.log``) in its own working directory, and gets SIGTERM if the process
that started it dies (Linux). Servers still running when this process exits are stopped
(:func:`stop_all`).
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import random
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
from redis.retry import Retry

from devtools.redis_harness.binaries import find_redis_server, parse_version
from devtools.redis_harness.tls import TLSFiles

HOST = "127.0.0.1"
START_TIMEOUT = 15.0  # seconds until a new server must answer PING
STOP_TIMEOUT = 5.0  # seconds between SIGTERM and SIGKILL


def no_retry() -> Retry:
    """For probes: one attempt, so a refused connection is reported at once."""
    return Retry(NoBackoff(), 0)


class RedisStartError(RuntimeError):
    """A redis-server process did not come up."""


class PortTaken(RedisStartError):
    """Another process answers on the port this server was to take."""


# --------------------------------------------------------------------------- ports


def _can_bind(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((HOST, port))
        except OSError:
            return False
    return True


# Every port free_port has given in this process: two servers built before either starts
# (a cluster's nodes) must not be given the same one.
_HANDED_OUT: set[int] = set()


def free_port(*, with_bus: bool = False) -> int:
    """A free loopback port (and port + 10000 for a cluster bus when ``with_bus``).

    Ports are drawn from 20000-29999, below the kernel's usual ephemeral range,
    so that outgoing connections do not take them between the check and the bind.
    A start that still loses the race is retried by :class:`RedisServer`.
    """
    for _ in range(200):
        port = random.randint(20000, 29999)
        if port in _HANDED_OUT:  # free now, but a server of ours may be about to bind it
            continue
        if _can_bind(port) and (not with_bus or _can_bind(port + 10000)):
            _HANDED_OUT.add(port)
            return port
    raise RuntimeError("could not find a free port on 127.0.0.1")


# Sockets bound, never listening, for as long as this process runs: see dead_port and
# reserved_port.
_HELD: list[socket.socket] = []


def dead_port() -> int:
    """A loopback port where a connection is refused for as long as this process runs.

    A port that was merely free when looked at (:func:`free_port`) can be taken a moment
    later by any other process on the machine (another test worker's gunicorn, say), and
    a test that meant "nothing answers there" then talks to a web server. This one stays
    bound to a socket that never listens, so nobody else can take it and the kernel
    refuses every connection to it at once (Linux answers a reset).
    """
    return _held(reusable=False)


def reserved_port() -> int:
    """A loopback port kept for a server this process starts there later: until then
    (and after it stops) every connection is refused, as at a :func:`dead_port`.

    The socket that holds it lets the address be reused (``SO_REUSEADDR``), as
    redis-server, gunicorn and uvicorn bind their own: such a server may take the port
    while it is held, but no other process can, as they bind without
    (:func:`free_port`'s probe, so no server started through it). A :func:`free_port`
    port given to a server started later (a Redis that comes up while a site already
    runs, or a site's own port, between the look and the bind) could meanwhile be
    taken by another test worker's server, which the test would then talk to.
    """
    return _held(reusable=True)


def _held(*, reusable: bool) -> int:
    sock = _bound(0, reusable=reusable)
    _HELD.append(sock)
    return int(sock.getsockname()[1])


def _bound(port: int, *, reusable: bool) -> socket.socket:
    """A socket bound to ``port`` (0: any), never listening; ``reusable``: with
    ``SO_REUSEADDR``, so that a server binding with it too may take the port meanwhile."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        if reusable:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((HOST, port))
    except OSError:
        sock.close()
        raise
    return sock


# --------------------------------------------------------------------------- processes


def _set_parent_death_signal() -> None:  # pragma: no cover - runs in the child
    """Linux: let the server get SIGTERM if the test process dies without cleaning up."""
    with contextlib.suppress(Exception):
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        pr_set_pdeathsig = 1
        libc.prctl(pr_set_pdeathsig, signal.SIGTERM)


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
    (``redis.log``) and, for a cluster node, ``nodes.conf``. With ``tls`` the port is a
    TLS port (and the only one): ``url`` is a ``rediss://`` URL, ``client()`` a TLS client.
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
        tls: TLSFiles | None = None,
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
        self.tls = tls
        self.log_path = self.workdir / "redis.log"
        self.process: subprocess.Popen[bytes] | None = None
        self._holding: list[socket.socket] = []  # its ports while stopped: see stop()
        self._version: tuple[int, ...] | None = None

    def __repr__(self) -> str:
        state = "running" if self.is_running() else "stopped"
        return f"<RedisServer {self.name} {self.host}:{self.port} {state}>"

    # -- addresses and clients

    @property
    def url(self) -> str:
        """``redis://host:port/0``; for a TLS server a ``rediss://`` URL whose query
        trusts the harness's CA (and presents no client certificate)."""
        if self.tls is not None:
            return f"rediss://{self.host}:{self.port}/0?{self.tls.url_query()}"
        return f"redis://{self.host}:{self.port}/0"

    def client(self, **kwargs: Any) -> redis.Redis:
        """A new ``redis.Redis`` for this server (bytes replies unless told otherwise;
        over TLS, with the client certificate, to a TLS server)."""
        kwargs.setdefault("socket_timeout", 5)
        kwargs.setdefault("socket_connect_timeout", 5)
        for key, value in self.tls.client_options().items() if self.tls is not None else ():
            kwargs.setdefault(key, value)
        return redis.Redis(host=self.host, port=self.port, **kwargs)

    @property
    def version(self) -> tuple[int, ...]:
        if self._version is None:
            with self.client(decode_responses=True) as conn:
                info = conn.info("server")
            self._version = parse_version(str(info["redis_version"]))
        return self._version

    # -- life cycle

    def command_line(self) -> list[str]:
        if self.tls is None:
            ports = ["--port", str(self.port)]
        else:
            ports = ["--port", "0", "--tls-port", str(self.port), *self.tls.server_args()]
        return [
            str(self.binary),
            *ports,
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
            except RedisStartError as error:
                self._kill()
                taken = isinstance(error, PortTaken) or self._port_taken_in_log()
                if not self._fixed_port and attempt < 4 and taken:
                    self.port = free_port(with_bus=self.cluster_bus)
                    continue
                raise
            _LIVE.add(self)
            self._let_go()
            return self
        raise AssertionError("unreachable")

    def stop(self, timeout: float = STOP_TIMEOUT) -> None:
        """SIGTERM, then SIGKILL if the process is still there after ``timeout``.

        Its ports stay this process's until it starts again (bound, never listening,
        with ``SO_REUSEADDR`` as redis-server binds its own): every connection is
        refused meanwhile, as with no server, and no other process can take them. A
        restart then comes back where its clients (a site's servers) look for it: a port
        merely left free could be another test worker's by then, and the start moved on
        to a new one."""
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
        self._hold()

    def _hold(self) -> None:
        for port in (self.port, self.port + 10000) if self.cluster_bus else (self.port,):
            with contextlib.suppress(OSError):  # taken in the blink since the exit: as before
                self._holding.append(_bound(port, reusable=True))

    def _let_go(self) -> None:
        while self._holding:
            self._holding.pop().close()

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
                    socket_timeout=0.5, socket_connect_timeout=0.5, retry=no_retry()
                ) as conn:
                    if conn.ping():
                        self._check_it_is_ours(conn)
                        return
            except (redis.ConnectionError, redis.TimeoutError, redis.BusyLoadingError):
                pass
            time.sleep(0.05)
        raise RedisStartError(
            f"{self.binary} did not answer PING on port {self.port} within {timeout:.0f}s.\n"
            f"{self.log_tail()}"
        )

    def _check_it_is_ours(self, conn: redis.Redis) -> None:
        """A PING answered at our port may come from another server that holds it (ours
        then fails to bind and exits): the answering process must be ours."""
        assert self.process is not None
        pid = int(conn.info("server")["process_id"])
        if pid != self.process.pid:
            raise PortTaken(
                f"port {self.port} is held by another redis-server (pid {pid}), not by "
                f"{self.name} (pid {self.process.pid})"
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


# --------------------------------------------------------------------------- temp dirs


@contextlib.contextmanager
def temporary_workdir(prefix: str = "ratelimits-redis-") -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)
