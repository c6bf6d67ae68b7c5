"""Real servers on loopback, loaded from this process (issue 5, item 7).

gunicorn (2 sync workers; 2 gthread workers of 4 threads) serves
``benchmarks.settings``, with and without
``RateLimitMiddleware``, and the 10 policies of
:func:`benchmarks.site.policy_rows` (``api``: client address and user, 3
rates each, recording who; here with limits no run reaches, since every
request comes from 127.0.0.1). The load: a few threads in this process, each
with one ``http.client`` connection (kept alive where the server allows),
``GET /api/items/<n>`` as the next of many users, for a bounded time and
count. Before the timed load, half a second of warm-up; after it, 6 requests
to ``/limited/1`` (5/m per address) from an address of their own show
whether the middleware is really there.
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
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path

from benchmarks import site
from benchmarks.kit import Scenario, counting_client, interleave, ping
from devtools.redis_harness import RedisServer, free_port

ROOT = Path(__file__).resolve().parent.parent
SERVER_RATES = "100000/s, 1000000/m, 1000000/h"
POLICIES = 10
THREADS = 4
MAX_REQUESTS = 200_000
START_TIMEOUT = 30.0
WARM_SECONDS = 0.5


def _commands(port: int) -> dict[str, list[str]]:
    wsgi = "django.core.wsgi:get_wsgi_application()"
    gunicorn = [sys.executable, "-m", "gunicorn", "--bind", f"127.0.0.1:{port}", "--workers", "2"]
    # Not uvicorn: through it every response to http.client took about 48 ms, with or
    # without the middleware (a stall like Nagle's against delayed ACKs), which would
    # measure that stall rather than the server.
    return {
        "gunicorn sync": [*gunicorn, "--worker-class", "sync", wsgi],
        "gunicorn gthread": [*gunicorn, "--worker-class", "gthread", "--threads", "4", wsgi],
    }


@dataclass
class Load:
    """What the load generator saw."""

    seconds: float = 0.0
    latencies_ns: list[int] = field(default_factory=list)
    statuses: Counter[int] = field(default_factory=Counter)
    errors: int = 0

    @property
    def rps(self) -> float:
        return len(self.latencies_ns) / self.seconds

    def percentile_ms(self, q: float) -> float:
        ordered = sorted(self.latencies_ns)
        return ordered[min(len(ordered) - 1, int(len(ordered) * q))] / 1e6

    @property
    def p50_ms(self) -> float:
        return statistics.median(self.latencies_ns) / 1e6


@dataclass
class Result:
    server: str
    middleware: bool
    load: Load
    check: list[int]  # statuses of the 6 requests to /limited/1

    @property
    def limits_bite(self) -> bool:
        limited = [200] * site.LIMITED + [429]
        return self.check == (limited if self.middleware else [200] * (site.LIMITED + 1))


@dataclass
class Report:
    floor: Scenario  # PING, just before the servers
    results: list[Result]
    seconds: float


def _get(connection: http.client.HTTPConnection, path: str, user: int) -> int:
    connection.request("GET", path, headers={"X-Bench-User": str(user)})
    response = connection.getresponse()
    response.read()
    return response.status


def load(port: int, seconds: float, threads: int = THREADS) -> Load:
    """``GET /api/items/<n>`` from ``threads`` connections for ``seconds`` (or MAX_REQUESTS)."""
    result = Load()
    counter = itertools.count()
    lock = threading.Lock()
    deadline = time.perf_counter() + seconds

    def worker() -> None:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        times, statuses, errors = [], Counter[int](), 0
        while time.perf_counter() < deadline and (n := next(counter)) < MAX_REQUESTS:
            started = time.perf_counter_ns()
            try:
                statuses[_get(connection, f"/api/items/{n % 1000}", 1 + n % 10_000)] += 1
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
    pool = [threading.Thread(target=worker) for _ in range(threads)]
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
    site.store_policies(site.policy_rows(POLICIES, SERVER_RATES))
    seconds = 1.0 if quick else 5.0
    floor = ping(counting_client(server))
    interleave([floor], 1, 1000, server.client(decode_responses=True))
    port = free_port()
    results = []
    sources = itertools.count(1)
    for name, argv in _commands(port).items():
        if quick and name != "gunicorn sync":
            continue
        for middleware in (False, True):
            env = {
                **os.environ,
                **site.environment(server, workdir, middleware=middleware),
                "PYTHONPATH": str(ROOT),
            }
            log = workdir / f"{name.replace(' ', '-')}-{int(middleware)}.log"
            with serving(argv, env, port, log):
                load(port, WARM_SECONDS)
                measured = load(port, seconds)
                source = f"127.0.1.{next(sources)}"
                connection = http.client.HTTPConnection(
                    "127.0.0.1", port, timeout=10, source_address=(source, 0)
                )
                check = [_get(connection, "/limited/1", 1) for _ in range(site.LIMITED + 1)]
                connection.close()
            results.append(Result(name, middleware, measured, check))
    return Report(floor, results, seconds)


def render(report: Report) -> str:
    ping_us = report.floor.median_us
    lines = [
        "## A real server",
        "",
        f"{THREADS} client threads in the benchmark's process, one connection each, on"
        f" loopback; {report.seconds:.0f} s per configuration after {WARM_SECONDS} s of"
        " warm-up. *p50 added*: the median latency with the middleware minus without,"
        f" also as a multiple of the PING median ({ping_us:.0f} µs, measured just before)."
        " Under load that includes queueing: the servers, Redis and the load generator"
        f" share this machine's {os.cpu_count()} cores. *limits bite*: of 6 requests to"
        f" `/limited/1` ({site.LIMITED}/m per address), the 6th was refused with the"
        " middleware and none without.",
        "",
        "| server | middleware | requests | requests/s | p50 ms | p99 ms | not 200"
        " | rps change | p50 added ms | added x PING | limits bite |",
        "|---|---|--:|--:|--:|--:|--:|--:|--:|--:|---|",
    ]
    without: dict[str, Result] = {}
    for result in report.results:
        load_ = result.load
        change = added = ratio = ""
        if not result.middleware:
            without[result.server] = result
        else:
            base = without[result.server].load
            change = f"{load_.rps / base.rps - 1:+.0%}"
            extra_ms = load_.p50_ms - base.p50_ms
            added, ratio = f"{extra_ms:+.2f}", f"{extra_ms * 1000 / ping_us:.1f}"
        others = sum(n for status, n in load_.statuses.items() if status != 200) + load_.errors
        lines.append(
            f"| {result.server} | {'on' if result.middleware else 'off'}"
            f" | {len(load_.latencies_ns):,} | {load_.rps:,.0f} | {load_.p50_ms:.2f}"
            f" | {load_.percentile_ms(0.99):.2f} | {others} | {change} | {added} | {ratio}"
            f" | {'yes' if result.limits_bite else f'**no** {result.check}'} |"
        )
    return "\n".join(lines) + "\n"
