"""Real app servers (gunicorn, uvicorn) for the end-to-end tests, and traffic to send them.

Used by ``tests/load/test_servers.py`` and the reliability tests (faults, cluster
faults, soak). A site is prepared once (``prepare``: a SQLite file migrated
and filled with policies by a subprocess), then served by any number of
server processes (``serve``), each in its own process group so that the
whole group is killed at the end. Requests go over real sockets
(``http.client``), from any 127.0.0.x source address (Linux routes the whole
127/8 to loopback), so a test can be many clients.

``Traffic`` keeps concurrent clients busy in background threads and records
every answer with its start time, so a test can ask what happened during a
fault: how many were served, the statuses, the latency percentiles, when the
limiter was deciding again.
"""

from __future__ import annotations

import http.client
import math
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from devtools.redis_harness import RedisServer, reserved_port

ROOT = Path(__file__).resolve().parents[2]
WORKERS = 2  # gunicorn's worker processes in the reliability tests
# The bounds a fault must keep on a quiet machine, in seconds. Each is widened by
# SLOWDOWN times the slowest healthy request of the same run, so that a busy machine
# (CI shares two cores with Redis, gunicorn and Chromium) cannot fail them, while a
# request that waits on a dead Redis still does.
P99_BOUND = 1.0  # of the requests sent during a fault
WORST_BOUND = 2.0  # any one request during a fault
RECOVERY_BOUND = 5.0  # from Redis' return until every worker decides again
SLOWDOWN = 3
START_TIMEOUT = 30.0  # seconds for a server to answer its first request
REQUEST_TIMEOUT = 10.0  # seconds for any one request, so a hang fails instead of stalling
PROBE_SLEEP = 0.005  # seconds the traffic's stall probe sleeps at a time


@dataclass(frozen=True)
class Reply:
    status: int
    headers: dict[str, str]  # lower-case names
    body: bytes
    seconds: float
    started: float = 0.0  # time.monotonic() when the request was sent

    @property
    def remaining(self) -> int:
        """``r`` of the ``RateLimit`` header field."""
        found = re.search(r";r=(\d+);", self.headers["ratelimit"])
        assert found, self.headers["ratelimit"]
        return int(found.group(1))

    @property
    def decided(self) -> bool:
        """Whether Redis decided this request (an allowed answer carries RateLimit)."""
        return "ratelimit" in self.headers

    @property
    def worker(self) -> str:
        return self.headers.get("x-worker-pid", "?")


@dataclass(frozen=True)
class Site:
    name: str
    port: int
    log: Path

    def get(
        self, path: str, *, source: str = "127.0.0.1", headers: dict[str, str] | None = None
    ) -> Reply:
        connection = http.client.HTTPConnection(
            "127.0.0.1", self.port, timeout=REQUEST_TIMEOUT, source_address=(source, 0)
        )
        started = time.monotonic()
        try:
            connection.request(
                "GET", path, headers={"Accept": "application/json", **(headers or {})}
            )
            response = connection.getresponse()
            body = response.read()
        finally:
            connection.close()
        names = {name.lower(): value for name, value in response.getheaders()}
        return Reply(response.status, names, body, time.monotonic() - started, started)

    def log_since(self, offset: int) -> str:
        """The server's output after byte ``offset`` (``log_size()`` taken earlier)."""
        with open(self.log, "rb") as output:
            output.seek(offset)
            return output.read().decode(errors="replace")

    def log_size(self) -> int:
        return self.log.stat().st_size


# --------------------------------------------------------------------------- servers


def _django(env: dict[str, str], *args: str) -> None:
    subprocess.run(
        [sys.executable, "-m", "django", *args],
        env=env,
        cwd=ROOT,
        check=True,
        timeout=120,
        capture_output=True,
    )


def prepare(
    workdir: Path, redis: str, policies: Sequence[dict[str, object]], **extra_env: str
) -> dict[str, str]:
    """A migrated database holding ``policies``; the environment the servers need.

    ``redis`` is the URL of the servers' Redis; ``extra_env`` adds variables
    (``DJANGO_SETTINGS_MODULE`` among them, to serve other settings than
    ``tests.server_settings``).
    """
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tests.server_settings",
        "RATELIMITS_SERVER_DB": str(workdir / "db.sqlite3"),
        "RATELIMITS_SERVER_REDIS": redis,
        "PYTHONPATH": str(ROOT),
        **extra_env,
    }
    _django(env, "migrate", "--noinput")
    create = "from django_ratelimits.models import Policy\n"
    create += f"for fields in {list(policies)!r}:\n    Policy.objects.create(**fields)"
    _django(env, "shell", "-c", create)
    return env


def gunicorn(port: int, workdir: Path, workers: int = 2) -> list[str]:
    """gunicorn with ``workers`` sync workers; statuses go to ``workdir/access.log``."""
    return [
        sys.executable, "-m", "gunicorn",
        "--workers", str(workers), "--worker-class", "sync",
        "--bind", f"127.0.0.1:{port}",
        "--access-logfile", str(workdir / "access.log"),
        "--access-logformat", "%(p)s %(s)s %(U)s",
        "--graceful-timeout", "2",
        "demo_project.wsgi:application",
    ]  # fmt: skip


@contextmanager
def gunicorn_site(
    redis: RedisServer,
    workdir: Path,
    policies: list[dict[str, object]],
    *,
    workers: int = 2,
    options: tuple[str, ...] = (),
) -> Iterator[Site]:
    """The site under gunicorn with ``policies``, on ``redis`` (started if it is not),
    until the block ends; then no server error may be in its log."""
    if not redis.is_running():
        redis.start()
    env = prepare(workdir, redis.url, policies)
    port = reserved_port()
    argv = [*gunicorn(port, workdir, workers), *options]
    with serve("gunicorn", argv, env, workdir, port, workers) as served:
        yield served
    assert_no_server_error(served)


def uvicorn(port: int) -> list[str]:
    return [
        sys.executable, "-m", "uvicorn",
        "--host", "127.0.0.1", "--port", str(port),
        "--lifespan", "off", "--no-access-log",
        "demo_project.asgi:application",
    ]  # fmt: skip


def access_statuses(workdir: Path) -> list[str]:
    """Every status gunicorn logged in ``workdir/access.log``."""
    return [line.split()[1] for line in (workdir / "access.log").read_text().splitlines()]


def assert_no_server_error(*sites: Site) -> None:
    """No traceback and no "Internal Server Error" in the servers' output."""
    for site in sites:
        output = site.log.read_text()
        assert "Traceback" not in output and "Internal Server Error" not in output, output


def _kill_group(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM to the server's process group, then SIGKILL to whatever is left."""
    with suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    with suppress(subprocess.TimeoutExpired):
        process.wait(10)
    with suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()


@contextmanager
def serve(
    name: str, argv: list[str], env: dict[str, str], workdir: Path, port: int, workers: int = 0
) -> Iterator[Site]:
    """Run ``argv`` until the block ends, once it serves (and has booted ``workers``
    gunicorn workers)."""
    site = Site(name, port, workdir / f"{name}.log")
    with open(site.log, "wb") as output:
        process = subprocess.Popen(
            argv, env=env, cwd=ROOT, stdout=output, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        _wait_until_serving(site, process, workers)
        yield site
    finally:
        _kill_group(process)


def _wait_until_serving(site: Site, process: subprocess.Popen[bytes], workers: int) -> None:
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(f"{site.name} exited with {process.returncode}:\n{site.log.read_text()}")
        booted = site.log.read_text().count("Booting worker") >= workers
        with suppress(OSError):
            if booted and site.get("/no-policy-here").status == 404:
                return
        time.sleep(0.1)
    pytest.fail(f"{site.name} did not serve within {START_TIMEOUT} s:\n{site.log.read_text()}")


def rss_kib(pid: int) -> int:
    """Resident memory of process ``pid`` in KiB (Linux ``/proc``)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError(f"no VmRSS for {pid}")


def percentile(values: Sequence[float], fraction: float) -> float:
    """The nearest-rank percentile of ``values`` (``fraction`` 0.99 for p99)."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(fraction * len(ordered)) - 1)]


# --------------------------------------------------------------------------- traffic


Expect = Callable[[Reply], bool]


@dataclass(frozen=True)
class Target:
    """One kind of request the traffic sends, and the answers it accepts."""

    path: str
    accept: Expect
    source: str = "127.0.0.1"


@dataclass
class Traffic:
    """``clients`` threads sending ``targets`` in turn to ``site`` until stopped.

    Every reply is kept; a reply that its target does not accept, or a request
    that fails (refused, reset, timed out), is an error with its description.
    """

    site: Site
    targets: Sequence[Target]
    clients: int = 4
    pause: float = 0.0  # seconds each client waits between requests
    replies: list[Reply] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _threads: list[threading.Thread] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    # (when, how late) of each wake-up of a thread that sleeps PROBE_SLEEP at a time: how
    # long this machine stopped running anything (a shared host pausing the VM).
    _lateness: list[tuple[float, float]] = field(default_factory=list)

    def __enter__(self) -> Traffic:
        for n in range(self.clients):
            thread = threading.Thread(target=self._client, args=(n,), daemon=True)
            thread.start()
            self._threads.append(thread)
        probe = threading.Thread(target=self._probe, daemon=True)
        probe.start()
        self._threads.append(probe)
        return self

    def _probe(self) -> None:
        while not self._stop.is_set():
            before = time.monotonic()
            time.sleep(PROBE_SLEEP)
            after = time.monotonic()
            with self._lock:
                self._lateness.append((after, after - before - PROBE_SLEEP))

    def stalled(self, start: float, end: float) -> float:
        """How long the machine stood still from ``start`` to ``end``, as a thread of this
        process woke up late (summed): seconds no request could have been served in."""
        with self._lock:
            return sum(late for at, late in self._lateness if start <= at - late and at <= end)

    def during(self, start: float, end: float) -> list[Reply]:
        """The replies to requests in flight at some time from ``start`` to ``end``: sent
        then, or sent before and answered after ``start`` (a hang that catches every
        client mid-request is one of these)."""
        with self._lock:
            return [r for r in self.replies if r.started < end and r.started + r.seconds > start]

    def slowest_before(self, start: float) -> float:
        """The slowest request answered before ``start`` (a request a fault caught
        mid-flight is not one): how busy the machine is, 0 if none was."""
        before = self.during(-math.inf, start)
        return max((r.seconds for r in before if r.started + r.seconds <= start), default=0.0)

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(REQUEST_TIMEOUT + 5)

    def _client(self, n: int) -> None:
        turn = n
        while not self._stop.is_set():
            target = self.targets[turn % len(self.targets)]
            turn += 1
            try:
                reply = self.site.get(target.path, source=target.source)
            except OSError as error:
                with self._lock:
                    self.errors.append(f"{target.path}: {type(error).__name__}: {error}")
                continue
            with self._lock:
                self.replies.append(reply)
                if not target.accept(reply):
                    body = reply.body[:200].decode(errors="replace")
                    self.errors.append(f"{target.path}: {reply.status} {body}")
            if self.pause:
                time.sleep(self.pause)

    def between(self, start: float, end: float = math.inf) -> list[Reply]:
        """The replies to requests sent from ``start`` to ``end`` (monotonic seconds)."""
        with self._lock:
            return [r for r in self.replies if start <= r.started < end]

    def wait_for(self, count: int, timeout: float = 30.0) -> None:
        """Until ``count`` more replies came in."""
        with self._lock:
            goal = len(self.replies) + count
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                if len(self.replies) >= goal:
                    return
            time.sleep(0.02)
        raise AssertionError(f"fewer than {count} replies in {timeout} s: {self.errors[-5:]}")


@dataclass(frozen=True)
class Outcome:
    """What the traffic saw from a fault's start until the limiter decided again."""

    served: int  # answers to requests sent during the fault
    failed_open: int  # of those, allowed without a decision
    failed_closed: int  # of those, 503 from a fail-closed policy
    # Seconds, of the requests in flight during the fault, each less the time the whole
    # machine stood still while it was (Traffic.stalled: a shared host pausing this VM
    # stops every process, so no limiter answers then, and none is hanging).
    p99: float
    worst: float
    recovery: float  # seconds from the fault's end until every request was decided again
    healthy: float  # seconds, the slowest request before the fault: how busy the machine is
    stalled: float = 0.0  # seconds, the most taken off one request's time (printed)

    def check(self) -> None:
        """The bounds every fault must keep, widened by how slow the machine is now."""
        slack = SLOWDOWN * self.healthy
        assert self.p99 < P99_BOUND + slack and self.worst < WORST_BOUND + slack, self
        assert self.recovery < RECOVERY_BOUND + slack, self

    def line(self, what: str) -> str:
        return (
            f"{what}: {self.served} requests during the fault, 500s 0, "
            f"failed open {self.failed_open}, failed closed {self.failed_closed}, "
            f"p99 {self.p99 * 1000:.0f} ms, max {self.worst * 1000:.0f} ms, "
            f"recovered in {self.recovery:.2f} s (less {self.stalled * 1000:.0f} ms at most "
            f"of a request's time, the machine standing still)"
        )


def observe(
    traffic: Traffic, start: float, end: float, workers: int, timeout: float = 20.0
) -> Outcome:
    """Wait until each of ``workers`` processes decided a request sent after ``end``,
    then sum up the replies since ``start``."""
    deadline = time.monotonic() + timeout
    while True:
        deciding = {r.worker for r in traffic.between(end) if r.decided}
        if len(deciding) >= workers:
            break
        assert time.monotonic() < deadline, f"not deciding again after {timeout} s: {deciding}"
        time.sleep(0.05)
    traffic.wait_for(2 * traffic.clients)  # a few more, all of which should be decided
    during = traffic.during(start, end)
    undecided = [r for r in traffic.between(end) if not r.decided]
    last = max((r.started + r.seconds for r in undecided), default=end)
    stood = [traffic.stalled(r.started, r.started + r.seconds) for r in during]
    seconds = [r.seconds - still for r, still in zip(during, stood, strict=True)] or [0.0]
    return Outcome(
        served=len(during),
        failed_open=sum(1 for r in during if r.status == 200 and not r.decided),
        failed_closed=sum(1 for r in during if r.status == 503),
        p99=percentile(seconds, 0.99),
        worst=max(seconds),
        recovery=last - end - traffic.stalled(end, last),
        healthy=traffic.slowest_before(start),
        stalled=max(stood, default=0.0),
    )


# --------------------------------------------------------------------------- the reliability site

TIGHT = 5

POLICIES: list[dict[str, object]] = [
    # far above the traffic: every answer is a 200, decided or failed open
    {"name": "load", "rates": "100000/m", "path": r"^/api/hello"},
    # the same, failing closed: a 503 when Redis cannot decide
    {"name": "closed", "rates": "100000/m", "path": r"^/admin/", "fail_closed": True},
    # what proves limits are enforced: the sixth request of an address in a minute is a 429
    {"name": "tight", "rates": f"{TIGHT}/m", "algorithm": "sliding_log", "path": r"^/api/other"},
]


def _fail_open(reply: Reply) -> bool:
    return reply.status == 200


def _fail_closed(reply: Reply) -> bool:
    return reply.status == 200 if reply.decided else reply.status == 503


TARGETS = [Target("/api/hello", _fail_open), Target("/admin/login/", _fail_closed)]

_sources = (f"127.0.{a}.{b}" for a in range(1, 250) for b in range(1, 255))


def new_source() -> str:
    """A loopback address no request of this test session came from yet."""
    return next(_sources)


def limit_holds(site: Site, source: str | None = None, used: int = 0) -> None:
    """``source`` (a new client by default), which has used ``used`` requests of
    ``tight`` already, gets exactly the rest through."""
    source = source or new_source()
    statuses = [site.get("/api/other", source=source).status for _ in range(TIGHT - used + 1)]
    assert statuses == [200] * (TIGHT - used) + [429], source
