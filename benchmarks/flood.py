"""A flood of one identity through gunicorn, with and without the cache of denials
(issue 12, ``docs/flood.md``).

gunicorn (2 sync workers) serves :mod:`benchmarks.flood_settings` with the
middleware and two policies of :func:`benchmarks.site.policy_rows`: ``limited``
(``/limited/``, 5/m per address, sliding log) is what the flooder exceeds, from
an address of its own; ``api`` (limits no run reaches) is what the other clients
use, ``GET /api/items/<n>`` from addresses of theirs. Per configuration (the cache
off, ``DENIAL_CACHE`` 0, then on, the default), with a server of its own:

1. the flooder is denied, and each worker learns it (a few requests);
2. *flood alone*: ``flood`` requests of the flooder, and the calls Redis answered
   meanwhile (:data:`CALLS`, in ``INFO commandstats``): checks, epoch reads and
   batches alike. Without the cache that is one check per request, by
   construction;
3. the other clients alone (``others`` requests), then again while the flooder
   sends requests as fast as it can: their latency percentiles.
"""

from __future__ import annotations

import http.client
import itertools
import os
import statistics
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import redis

from benchmarks import site
from benchmarks.kit import met
from benchmarks.server import serving
from devtools.redis_harness import RedisServer, free_port

ROOT = Path(__file__).resolve().parent.parent
RATES = "100000/s, 1000000/m, 1000000/h"  # of ``api``: no run reaches them
FLOODER = "127.0.3.1"
THREADS = 2  # of the flooder, and of the other clients
TARGET_CALLS = 0.05  # calls to Redis per denied request, with the cache


@dataclass
class Result:
    cache: bool
    denied: int  # 429s of the flood alone
    calls: int  # calls to Redis meanwhile
    alone_ms: list[float] = field(default_factory=list)  # other clients' latencies
    flooded_ms: list[float] = field(default_factory=list)  # the same, under the flood
    flood_sent: int = 0  # the flooder's requests during the flooded phase

    @property
    def per_denied(self) -> float:
        return self.calls / self.denied


@dataclass
class Report:
    results: list[Result]
    flood: int
    others: int


def _get(port: int, source: str, path: str, user: int | None = None) -> tuple[int, float]:
    """One request on a new connection (sync workers close each): status, milliseconds."""
    connection = http.client.HTTPConnection(
        "127.0.0.1", port, timeout=10, source_address=(source, 0)
    )
    started = time.perf_counter_ns()
    try:
        connection.request("GET", path, headers={"X-Bench-User": str(user or 1)})
        response = connection.getresponse()
        response.read()
    finally:
        connection.close()
    return response.status, (time.perf_counter_ns() - started) / 1e6


def _threads(work: Callable[[int], None]) -> None:
    pool = [threading.Thread(target=work, args=(t,)) for t in range(THREADS)]
    for thread in pool:
        thread.start()
    for thread in pool:
        thread.join()


def _flood(port: int, count: int) -> Counter[int]:
    """``count`` requests of the flooder from ``THREADS`` threads: their statuses."""
    statuses: Counter[int] = Counter()
    lock = threading.Lock()
    todo = iter(range(count))

    def work(_: int) -> None:
        mine: Counter[int] = Counter()
        for _n in todo:
            mine[_get(port, FLOODER, "/limited/1")[0]] += 1
        with lock:
            statuses.update(mine)

    _threads(work)
    return statuses


def _others(port: int, count: int) -> list[float]:
    """``count`` requests of the other clients (an address per thread, a user per
    request): their latencies (ms); raises if one is not 200."""
    latencies: list[float] = []
    lock = threading.Lock()
    todo = iter(range(count))

    def work(t: int) -> None:
        mine = []
        for n in todo:
            status, ms = _get(port, f"127.0.2.{t + 1}", f"/api/items/{n % 1000}", 1000 + n)
            if status != 200:
                raise RuntimeError(f"another client got {status}")
            mine.append(ms)
        with lock:
            latencies.extend(mine)

    _threads(work)
    return latencies


# The commands clients send the limiter's Redis, each one call: a check or a batch
# (a script or function call, or what loads one), an epoch read (SET NX with a GET,
# pipelined; the check script never runs SET). The commands scripts run inside are
# in INFO commandstats too, but are no call of anyone's.
CALLS = ("fcall", "evalsha", "eval", "script", "function", "set")


def _calls(client: redis.Redis) -> int:
    """Calls of the limiter that Redis answered so far."""
    stats = client.info("commandstats")
    return sum(stats.get(f"cmdstat_{name}", {}).get("calls", 0) for name in CALLS)


def _configuration(
    server: RedisServer, workdir: Path, cache: bool, flood: int, others: int
) -> Result:
    port = free_port()
    env = {
        **os.environ,
        **site.environment(server, workdir, middleware=True),
        "DJANGO_SETTINGS_MODULE": "benchmarks.flood_settings",
        "RATELIMITS_BENCH_DENIAL_CACHE": "10000" if cache else "0",
        "PYTHONPATH": str(ROOT),
    }
    argv = [
        sys.executable, "-m", "gunicorn", "--bind", f"127.0.0.1:{port}", "--workers", "2",
        "--worker-class", "sync", "django.core.wsgi:get_wsgi_application()",
    ]  # fmt: skip
    with (
        serving(argv, env, port, workdir / f"flood-{int(cache)}.log"),
        server.client() as client,
    ):
        client.flushall()  # a fresh quota for the flooder (the policies are in SQLite)
        _others(port, 20)
        # Denied, and learnt by both workers (a denial per worker makes it read the epoch).
        _flood(port, site.LIMITED + 4 * THREADS)
        before = _calls(client)
        statuses = _flood(port, flood)
        result = Result(cache, statuses[429], _calls(client) - before)
        if statuses[429] != flood:
            raise RuntimeError(f"the flood was not denied: {dict(statuses)}")
        result.alone_ms = _others(port, others)
        stop = threading.Event()
        sent = itertools.count()

        def flooder() -> None:
            while not stop.is_set():
                _get(port, FLOODER, "/limited/1")
                next(sent)

        pool = [threading.Thread(target=flooder) for _ in range(THREADS)]
        for thread in pool:
            thread.start()
        try:
            result.flooded_ms = _others(port, others)
        finally:
            stop.set()
            for thread in pool:
                thread.join()
        result.flood_sent = next(sent)
    return result


def run(server: RedisServer, workdir: Path, quick: bool = False) -> Report:
    """Needs Django set up in this process (:func:`benchmarks.site.setup`), for the policies."""
    site.store_policies(site.policy_rows(2, RATES))
    flood, others = (1000, 300) if quick else (5000, 2000)
    results = [_configuration(server, workdir, cache, flood, others) for cache in (False, True)]
    return Report(results, flood, others)


def _p(latencies: list[float], q: float) -> float:
    ordered = sorted(latencies)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))]


def targets(report: Report) -> list[tuple[str, str, str]]:
    on = next(r for r in report.results if r.cache)
    return [
        (
            f"flood: calls to Redis per denied request ≤ {TARGET_CALLS}",
            f"{on.per_denied:.3f} ({on.calls} for {on.denied:,})",
            met(round(on.per_denied, 3) <= TARGET_CALLS),  # judged as printed
        )
    ]


def render(report: Report) -> str:
    lines = [
        "## Flood",
        "",
        f"One address sends requests to `/limited/1` (5/m per address) through gunicorn"
        f" (2 sync workers), {THREADS} threads, a new connection each; it is denied"
        f" throughout. *Calls per denied*: the calls Redis answered during {report.flood:,}"
        " of its requests alone (checks, and the cache's epoch reads and batches; counted"
        " in `INFO commandstats` by command: script calls and SET, never run by a script"
        f" here), divided by them. Then {report.others:,} requests of other clients"
        f" ({THREADS} threads, an address each, `GET /api/items/<n>`, always allowed),"
        " alone and while the flooder sends as fast as it can: their latency. The servers,"
        f" Redis and both load generators share this machine's {os.cpu_count()} cores, so"
        " the flood's own CPU shows in the other clients' latency however little Redis"
        " it costs.",
        "",
        "| cache of denials | denied | calls to Redis | per denied | others p50 ms"
        " | others p99 ms | under flood p50 ms | under flood p99 ms | flood requests meanwhile |",
        "|---|--:|--:|--:|--:|--:|--:|--:|--:|",
    ]
    for r in report.results:
        lines.append(
            f"| {'on (10,000)' if r.cache else 'off (0)'} | {r.denied:,} | {r.calls:,}"
            f" | {r.per_denied:.3f} | {statistics.median(r.alone_ms):.2f}"
            f" | {_p(r.alone_ms, 0.99):.2f} | {statistics.median(r.flooded_ms):.2f}"
            f" | {_p(r.flooded_ms, 0.99):.2f} | {r.flood_sent:,} |"
        )
    return "\n".join(lines) + "\n"
