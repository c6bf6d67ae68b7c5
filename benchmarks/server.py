"""Real servers on loopback, loaded from this process (issue 5, item 7).

gunicorn (2 sync workers; 2 gthread workers of 4 threads) serves
``benchmarks.settings``, with and without
``RateLimitMiddleware``, and the 10 policies of
:func:`benchmarks.site.policy_rows` (``api``: client address and user, 3
rates each, recording who; here with limits no run reaches). The load: a few
threads in this process, each a client with one ``http.client`` connection (kept
alive where the server allows) from a loopback address of its own, as one user of
its own, ``GET /api/items/<n>`` for a bounded time and count. One more row loads
the middleware's server the way a client rotating accounts would: every request
from 127.0.0.1 as the next of 10,000 users, so past its identity budget (50 new
users an hour per address) each counts against the address
(docs/client-ip.md#identity-budgets). The server without the middleware and the
one with it run side by side, and their rows are loaded in turns (five rounds);
before the timed load, half a second of warm-up; after it, 6 requests to
``/limited/1`` (5/m per address) from an address of their own show whether the
middleware is really there.

The server without the middleware is also loaded on ``/django-ratelimit/load/<n>``:
the same view under django-ratelimit's ``@ratelimit`` (1 limit by address, a rate
no run reaches), so that issue 12 can set what the middleware costs a server
beside what django-ratelimit's decorator costs it, in the same run. After it,
21 requests to a view of that decorator at 10/h show it counted and refused. And on
``/ping/items/<n>``: the view after one PING to Redis and nothing else, what one round trip
per request costs a server whatever limiter makes it.
"""

from __future__ import annotations

import http.client
import itertools
import os
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path

from benchmarks import site
from benchmarks.kit import Scenario, counting_client, in_turn, interleave, met, ping, within
from devtools.redis_harness import RedisServer, free_port

ROOT = Path(__file__).resolve().parent.parent
POLICIES = 10
ROTATED_USERS = 10_000  # the rotating row's users, all from one address
THREADS = 4
MAX_REQUESTS = 200_000
START_TIMEOUT = 30.0
WARM_SECONDS = 0.5
ROUNDS = 5  # each configuration's load, in turns with the others'
CHECKED = 21  # requests to django-ratelimit's view at 10/h after its load

# What limits a configuration's requests.
NONE = "none"
MIDDLEWARE = "RateLimitMiddleware, 2 x 3 + metadata"
DECORATOR = "django-ratelimit `@ratelimit`, 1 limit"
ROUND_TRIP = "one PING per request, no limiter"
ROTATING = f"{MIDDLEWARE}, one address rotating {ROTATED_USERS:,} users"
PATHS = {
    NONE: "/api/items",
    MIDDLEWARE: "/api/items",
    DECORATOR: "/django-ratelimit/load",
    ROUND_TRIP: "/ping/items",
    ROTATING: "/api/items",
}

SYNC = "gunicorn sync"
# Issue 12: requests/s that gunicorn sync loses with the middleware, at most.
TARGET_LOSS = 0.20


# The servers, by name: their worker settings. Not uvicorn: through it every response
# to http.client took about 48 ms, with or without the middleware (a stall like Nagle's
# against delayed ACKs), which would measure that stall rather than the server.
_WORKERS = {
    SYNC: ["--worker-class", "sync"],
    "gunicorn gthread": ["--worker-class", "gthread", "--threads", "4"],
}


def _command(name: str, port: int) -> list[str]:
    """The command line of the server ``name`` on ``port``."""
    bind = ["--bind", f"127.0.0.1:{port}", "--workers", "2", *_WORKERS[name]]
    return [sys.executable, "-m", "gunicorn", *bind, "django.core.wsgi:get_wsgi_application()"]


@dataclass
class Load:
    """What the load generator saw."""

    seconds: float = 0.0
    latencies_ns: list[int] = field(default_factory=list)
    statuses: Counter[int] = field(default_factory=Counter)
    errors: int = 0
    rounds: list[float] = field(default_factory=list)  # requests/s of each load added

    @property
    def rps(self) -> float:
        return len(self.latencies_ns) / self.seconds

    def add(self, other: Load) -> None:
        self.rounds.append(other.rps)
        self.seconds += other.seconds
        self.latencies_ns += other.latencies_ns
        self.statuses.update(other.statuses)
        self.errors += other.errors

    def percentile_ms(self, q: float) -> float:
        ordered = sorted(self.latencies_ns)
        return ordered[min(len(ordered) - 1, int(len(ordered) * q))] / 1e6

    @property
    def p50_ms(self) -> float:
        return statistics.median(self.latencies_ns) / 1e6


@dataclass
class Result:
    server: str
    limiter: str  # NONE, MIDDLEWARE, ROTATING, DECORATOR or ROUND_TRIP
    load: Load
    check: list[int]  # statuses of the requests that show whether the limiter limits

    @property
    def limits_bite(self) -> bool:
        if self.limiter == DECORATOR:
            return site.bites(self.check, 10)
        limited = [200] * site.LIMITED + [429]
        middleware = self.limiter in (MIDDLEWARE, ROTATING)
        return self.check == (limited if middleware else [200] * len(limited))


@dataclass
class Report:
    floor: Scenario  # PING, just before the servers
    results: list[Result]
    seconds: float

    def result(self, server: str, limiter: str) -> Result:
        return next(r for r in self.results if (r.server, r.limiter) == (server, limiter))

    def changes(self, server: str, limiter: str) -> list[float]:
        """Each round's requests/s with ``limiter`` over the same round's without one,
        less 1 (rounds take turns, so each compares loads a few seconds apart)."""
        ours, bare = self.result(server, limiter).load, self.result(server, NONE).load
        return [a / b - 1 for a, b in zip(ours.rounds, bare.rounds, strict=True)]

    def loss(self, server: str, limiter: str) -> float:
        """The share of requests/s that ``limiter`` costs ``server``: the median of the
        rounds' (:meth:`changes`)."""
        return -statistics.median(self.changes(server, limiter))


def _get(connection: http.client.HTTPConnection, path: str, user: int) -> int:
    connection.request("GET", path, headers={"X-Bench-User": str(user)})
    response = connection.getresponse()
    response.read()
    return response.status


def load(
    port: int,
    seconds: float,
    path: str = PATHS[NONE],
    threads: int = THREADS,
    rotating: bool = False,
) -> Load:
    """``GET path/<n>`` from ``threads`` connections for ``seconds`` (or MAX_REQUESTS):
    each from 127.0.2.<its number> as user <its number>, or, ``rotating``, all from
    127.0.0.1, each request as the next of :data:`ROTATED_USERS` users."""
    result = Load()
    counter = itertools.count()
    lock = threading.Lock()
    deadline = time.perf_counter() + seconds

    def worker(number: int) -> None:
        source = None if rotating else (f"127.0.2.{number}", 0)
        connection = http.client.HTTPConnection(
            "127.0.0.1", port, timeout=10, source_address=source
        )
        times, statuses, errors = [], Counter[int](), 0
        while time.perf_counter() < deadline and (n := next(counter)) < MAX_REQUESTS:
            user = 1 + n % ROTATED_USERS if rotating else number
            started = time.perf_counter_ns()
            try:
                statuses[_get(connection, f"{path}/{n % 1000}", user)] += 1
            except (OSError, http.client.HTTPException):
                errors += 1
                connection.close()
                continue
            times.append(time.perf_counter_ns() - started)
        connection.close()
        with lock:
            result.latencies_ns += times
            result.statuses.update(statuses)
            result.errors += errors

    started = time.perf_counter()
    pool = [threading.Thread(target=worker, args=(number,)) for number in range(1, threads + 1)]
    for thread in pool:
        thread.start()
    for thread in pool:
        thread.join()
    result.seconds = time.perf_counter() - started
    return result


def _stop(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM to the server's process group; SIGKILL to what is left after 10 s."""
    with suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(10)
    except subprocess.TimeoutExpired:
        with suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()


@contextmanager
def serving(argv: list[str], env: dict[str, str], port: int, log: Path) -> Iterator[None]:
    """The server of ``argv``, in a process group of its own, until it answers."""
    with open(log, "wb") as output:
        process = subprocess.Popen(
            argv, env=env, cwd=ROOT, stdout=output, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{argv[2]} did not serve:\n{log.read_text()[-3000:]}")
            with suppress(OSError, http.client.HTTPException):
                connection = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
                if _get(connection, "/api/items/0", 1) == 200:
                    break
            time.sleep(0.1)
        yield
    finally:
        _stop(process)


def run(server: RedisServer, workdir: Path, quick: bool = False) -> Report:
    """Needs Django set up in this process (:func:`benchmarks.site.setup`), for the policies."""
    site.store_policies(site.policy_rows(POLICIES, site.LOAD_RATES))
    seconds = 1.0 if quick else 5.0
    floor = ping(counting_client(server))
    interleave([floor], 1, 1000, server.client(decode_responses=True))
    results = []
    sources = itertools.count(1)
    # A server without the middleware serves NONE, ROUND_TRIP and DECORATOR; one with it,
    # at the same time on another port, MIDDLEWARE and ROTATING.
    configurations = ((False, (NONE, ROUND_TRIP, DECORATOR)), (True, (MIDDLEWARE, ROTATING)))
    for name in _WORKERS:
        if quick and name != SYNC:
            continue
        with ExitStack() as servers:
            port_of = {}
            for middleware, limiters in configurations:
                port = free_port()
                env = {
                    **os.environ,
                    **site.environment(server, workdir, middleware=middleware),
                    "PYTHONPATH": str(ROOT),
                }
                log = workdir / f"{name.replace(' ', '-')}-{int(middleware)}.log"
                servers.enter_context(serving(_command(name, port), env, port, log))
                port_of.update(dict.fromkeys(limiters, port))
            # Rounds that take turns, so that a drift of the machine touches every row alike.
            loads = {limiter: Load() for limiter in port_of}
            for turn, timed in enumerate((False, *[True] * ROUNDS)):
                for limiter, port in in_turn(list(port_of.items()), turn):
                    rotating = limiter == ROTATING
                    share = seconds / ROUNDS if timed else WARM_SECONDS
                    measured = load(port, share, PATHS[limiter], rotating=rotating)
                    if timed:
                        loads[limiter].add(measured)
            for limiter, port in port_of.items():
                check = _check(port, f"127.0.1.{next(sources)}", limiter)
                results.append(Result(name, limiter, loads[limiter], check))
    return Report(floor, results, seconds)


def _check(port: int, source: str, limiter: str) -> list[int]:
    """Statuses of requests from ``source`` that show whether ``limiter`` limits."""
    path, count = ("/django-ratelimit/check/1", CHECKED)
    if limiter != DECORATOR:
        path, count = "/limited/1", site.LIMITED + 1
    connection = http.client.HTTPConnection(
        "127.0.0.1", port, timeout=10, source_address=(source, 0)
    )
    try:
        return [_get(connection, path, 1) for _ in range(count)]
    finally:
        connection.close()


def issue_12(report: Report) -> list[tuple[str, str, str, str]]:
    """(figure, this run, target, met or missed) of issue 12's server row."""
    loss, peer = report.loss(SYNC, MIDDLEWARE), report.loss(SYNC, DECORATOR)
    trip = report.loss(SYNC, ROUND_TRIP)
    less = round(loss, 2) < round(peer, 2)  # as printed
    return [
        (
            f"{SYNC} requests/s lost with the middleware (2 x 3 + metadata)",
            f"{loss:.0%} ({'' if less else 'not '}less than django-ratelimit's decorator, 1"
            f" limit: {peer:.0%}; one PING per request and nothing else: {trip:.0%})",
            f"≤ {TARGET_LOSS:.0%}, and less than the decorator",
            met(within(loss, TARGET_LOSS) and less),
        )
    ]


def render(report: Report) -> str:
    ping_us = report.floor.median_us
    lines = [
        "## A real server",
        "",
        f"{THREADS} client threads in the benchmark's process, one connection each, on"
        f" loopback; {report.seconds:.0f} s per configuration after {WARM_SECONDS} s of"
        f" warm-up, in {ROUNDS} rounds that take turns (the server without the middleware and"
        " the one with it run side by side, on two ports). *rps change*: the median, over"
        " the rounds, of the row's requests/s over the same round's with no limiter (the"
        " rounds' least and most in brackets); *p50 added*: against the same server's row"
        " with no limiter, the median latency with the row's limiter minus without,"
        f" also as a multiple of the PING median ({ping_us:.0f} µs, measured just before)."
        " Under load that includes queueing: the servers, Redis and the load generator"
        f" share this machine's {os.cpu_count()} cores. *limits bite*: of 6 requests to"
        f" `/limited/1` ({site.LIMITED}/m per address), the 6th was refused with the"
        f" middleware and none without; of {CHECKED} requests to a view of django-ratelimit's"
        " decorator at 10/h, the first 10 or more passed and the rest were refused. The"
        f" {THREADS} clients, each from a loopback address of its own and as a user of its"
        f" own, load every row but the last of each server, whose load comes from one"
        f" address as the next of {ROTATED_USERS:,} users: past its identity budget, each"
        " request counts against the address (the identity budget's ZSET read, trimmed and"
        " counted each time). The"
        " django-ratelimit row is the server without the middleware, loaded on a view under"
        " that decorator (1 limit by address, never reached; each client's address is busy,"
        " so after each second's first request it sends `SET NX` and then an `EVAL` to"
        " count: two round trips); the PING row, on the view after one PING to Redis on"
        " the engine's client: one round trip per request, no limiter.",
        "",
        "| server | limiter | requests | requests/s | p50 ms | p99 ms | not 200"
        " | rps change | p50 added ms | added x PING | limits bite |",
        "|---|---|--:|--:|--:|--:|--:|--:|--:|--:|---|",
    ]
    for result in report.results:
        load_ = result.load
        change = added = ratio = ""
        if result.limiter != NONE:
            base = report.result(result.server, NONE).load
            rounds = report.changes(result.server, result.limiter)
            change = (
                f"{-report.loss(result.server, result.limiter):+.0%}"
                f" ({min(rounds):+.0%} to {max(rounds):+.0%})"
            )
            extra_ms = load_.p50_ms - base.p50_ms
            added, ratio = f"{extra_ms:+.2f}", f"{extra_ms * 1000 / ping_us:.1f}"
        others = sum(n for status, n in load_.statuses.items() if status != 200) + load_.errors
        lines.append(
            f"| {result.server} | {result.limiter}"
            f" | {len(load_.latencies_ns):,} | {load_.rps:,.0f} | {load_.p50_ms:.2f}"
            f" | {load_.percentile_ms(0.99):.2f} | {others} | {change} | {added} | {ratio}"
            f" | {'yes' if result.limits_bite else f'**no** {result.check}'} |"
        )
    return "\n".join(lines) + "\n"
