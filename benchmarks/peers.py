"""The peers on the same Redis, in the same run: one rate-limit decision each (issue 5, item 3).

Each peer is paired with what this package offers for the same job, and
every row is one decision on the allowed path (10/s, each call on its own
client address, as in the engine benchmark):

* django-ratelimit's ``is_ratelimited`` (django-redis cache) against
  ``django_ratelimits.compat.is_ratelimited``, its drop-in; and the same pair for
  one busy address (:data:`BUSY_RATE`, never reached), the case of a client that
  sends more than one request per window: django-ratelimit's ``add`` then finds
  its key and it counts with an ``EVAL``, two round trips where its first request
  of a window made one;
* DRF's ``AnonRateThrottle`` (django-redis cache) against ``PolicyThrottle``
  with a sliding-log policy (DRF's throttle keeps a log of timestamps too);
* the ``limits`` library's fixed window, moving window and sliding window
  counter ``hit`` against one ``Engine.check`` of the same algorithm
  (fixed window, sliding log, sliding window counter).

The Django rows build a fresh ``HttpRequest`` per call, as a server would.
Every peer is also checked to limit: 11 decisions at 10/h for one address
must allow exactly 10. Redis' own CPU per decision (:mod:`benchmarks.rediscpu`)
is taken around each row's rounds: issue 12 compares it, and the time, as
this package's row over the peer's.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import redis
from django.http import HttpRequest

from benchmarks.kit import (
    CELLS_HEAD,
    CELLS_RULE,
    Scenario,
    cells,
    counting_client,
    interleave,
    met,
    ping,
    within,
)
from benchmarks.rediscpu import Cost, Meter
from devtools.redis_harness import RedisServer

LIMIT = 10
# Issue 12's peer rows, by the start of their names.
DJANGO_RATELIMIT = "django-ratelimit `is_ratelimited` (fixed window)"
# The busy rows' rate: one address sends every call of its row, and never reaches it.
BUSY_RATE = "1000000/h"
BUSY = "one busy address"
DJANGO_RATELIMIT_BUSY = f"django-ratelimit `is_ratelimited`, {BUSY}"
# Issue 12: this package's Redis CPU per 1-limit decision over django-ratelimit's.
TARGET_REDIS_CPU = 1.0
UNITS = {"s": "second", "h": "hour"}
Decide = Callable[[str], bool]  # client address -> allowed
Make = Callable[[str], Decide]  # a rate, "10/s" -> a decide function


@dataclass
class Row:
    name: str
    make: Make
    ours: bool
    busy: bool = False  # every call from one address, at BUSY_RATE
    scenario: Scenario = field(init=False)
    check: list[bool] = field(default_factory=list)

    @property
    def limits_at_its_limit(self) -> bool:
        return self.check == [True] * LIMIT + [False]


@dataclass
class Report:
    floor: Scenario
    rows: list[Row]
    rounds: int
    per_round: int
    costs: dict[str, Cost]  # Redis' CPU, by row name

    def pair(self, peer: str) -> tuple[Row, Row]:
        """The peer's row whose name starts with ``peer``, and this package's under it."""
        n = next(n for n, row in enumerate(self.rows) if row.name.startswith(peer))
        return self.rows[n], self.rows[n + 1]

    def ratios(self, peer: str) -> tuple[float, float]:
        """Ours over the peer's: median time, and Redis CPU per decision."""
        theirs, ours = self.pair(peer)
        time = ours.scenario.median_us / theirs.scenario.median_us
        cpu = self.costs[ours.name].cpu_per_call / self.costs[theirs.name].cpu_per_call
        return time, cpu


def _request(address: str) -> HttpRequest:
    request = HttpRequest()
    request.method = "GET"
    request.path = request.path_info = "/api/items"
    request.META = {"REMOTE_ADDR": address, "SERVER_NAME": "testserver", "SERVER_PORT": "80"}
    return request


def _django_ratelimit(rate: str) -> Decide:
    from django_ratelimit.core import is_ratelimited

    return lambda address: (
        not is_ratelimited(_request(address), group="bench", key="ip", rate=rate, increment=True)
    )


def _compat(rate: str) -> Decide:
    from django_ratelimits.compat import is_ratelimited

    return lambda address: (
        not is_ratelimited(_request(address), group="bench", key="ip", rate=rate, increment=True)
    )


def _drf(rate: str) -> Decide:
    from rest_framework.request import Request
    from rest_framework.throttling import AnonRateThrottle
    from rest_framework.views import APIView

    throttle = type("Anon", (AnonRateThrottle,), {"rate": rate})
    view = APIView()
    return lambda address: throttle().allow_request(Request(_request(address)), view)


def _policy_throttle(rate: str) -> Decide:
    from rest_framework.request import Request
    from rest_framework.views import APIView

    from django_ratelimits.contrib.drf import PolicyThrottle
    from django_ratelimits.engine import Algorithm
    from django_ratelimits.policies import get_registry
    from django_ratelimits.policies.spec import PolicySpec
    from django_ratelimits.rates import parse_rates

    name = "peer-drf-" + rate.replace("/", "-per-")
    get_registry().declare(PolicySpec(name, parse_rates(rate), Algorithm.SLIDING_LOG))
    throttle = type("Throttle", (PolicyThrottle,), {"policy": name})
    view = APIView()
    return lambda address: throttle().allow_request(Request(_request(address)), view)


def _limits(client: redis.Redis, strategy: str) -> Make:
    from limits import parse, storage, strategies

    store = storage.RedisStorage("redis://", connection_pool=client.connection_pool)
    limiter = getattr(strategies, strategy)(store)

    def make(rate: str) -> Decide:
        count, unit = rate.split("/")
        item = parse(f"{count}/{UNITS[unit]}")
        return lambda address: limiter.hit(item, "bench", address)

    return make


def _engine(client: redis.Redis, algorithm_name: str) -> Make:
    from django_ratelimits.engine import Algorithm, Check, Engine, Identity, KeySpace, Limit
    from django_ratelimits.rates import parse_rates

    engine = Engine(client, keys=KeySpace(prefix="peers"))
    algorithm = Algorithm(algorithm_name)

    def make(rate: str) -> Decide:
        limits = [Limit("peer", parse_rates(rate)[0], algorithm)]
        return lambda address: engine.check([Check(Identity("ip", address), limits)]).allowed

    return make


def rows(client: redis.Redis) -> list[Row]:
    """The peers, each followed by this package's answer to the same job."""
    return [
        Row(DJANGO_RATELIMIT, _django_ratelimit, False),
        Row("django_ratelimits.compat `is_ratelimited`", _compat, True),
        Row(f"{DJANGO_RATELIMIT_BUSY} (`SET NX`, then `EVAL`)", _django_ratelimit, False, True),
        Row(f"django_ratelimits.compat `is_ratelimited`, {BUSY}", _compat, True, True),
        Row("DRF `AnonRateThrottle` (log of timestamps)", _drf, False),
        Row("django_ratelimits `PolicyThrottle` (sliding log)", _policy_throttle, True),
        Row("limits fixed window `hit`", _limits(client, "FixedWindowRateLimiter"), False),
        Row("django_ratelimits fixed_window `check`", _engine(client, "fixed_window"), True),
        Row("limits moving window `hit`", _limits(client, "MovingWindowRateLimiter"), False),
        Row("django_ratelimits sliding_log `check`", _engine(client, "sliding_log"), True),
        Row(
            "limits sliding window counter `hit`",
            _limits(client, "SlidingWindowCounterRateLimiter"),
            False,
        ),
        Row(
            "django_ratelimits sliding_window_counter `check`",
            _engine(client, "sliding_window_counter"),
            True,
        ),
    ]


def _rotating(decide: Decide, tag: int, n: int) -> Callable[[], bool]:
    """Each call on the next of ``n`` addresses of its own."""
    addresses = [f"10.{tag}.{i // 256}.{i % 256}" for i in range(n)]
    position = 0

    def call() -> bool:
        nonlocal position
        address = addresses[position]
        position = (position + 1) % n
        return decide(address)

    return call


def run(server: RedisServer, quick: bool = False) -> Report:
    """Needs Django set up (:func:`benchmarks.site.setup`)."""
    rounds, per_round = (3, 50) if quick else (5, 800)
    client = counting_client(server)
    stats = server.client(decode_responses=True)
    floor = ping(client)
    peers = rows(client)
    for tag, row in enumerate(peers, start=1):
        if row.busy:
            call = _rotating(row.make(BUSY_RATE), tag, 1)
        else:
            call = _rotating(row.make(f"{LIMIT}/s"), tag, per_round)
        row.scenario = Scenario(row.name, call)
        once = row.make(f"{LIMIT}/h")
        row.check = [once(f"192.0.2.{tag}") for _ in range(LIMIT + 1)]
    meter = Meter(stats)
    interleave([floor, *(row.scenario for row in peers)], rounds, per_round, stats, meter)
    return Report(floor, peers, rounds, per_round, meter.costs)


# Issue 12's comparisons: (peer row, what it is).
LIMITS = ("limits fixed window", "limits moving window", "limits sliding window counter")
TARGET_VS_LIMITS = 1.0  # the engine's check no slower than `limits`' hit


def issue_12(report: Report) -> list[tuple[str, str, str, str]]:
    """(figure, this run, target, met or missed) of issue 12's peer rows."""
    rows = []
    cases = ((DJANGO_RATELIMIT, "a new address each call"), (DJANGO_RATELIMIT_BUSY, BUSY))
    for peer, case in cases:
        time, cpu = report.ratios(peer)
        theirs, ours = (report.costs[row.name] for row in report.pair(peer))
        rows.append(
            (
                "Redis CPU per decision, 1 limit: `django_ratelimits.compat` ÷ django-ratelimit,"
                f" {case}",
                f"{cpu:.2f}x ({ours.cpu_per_call:.1f} against {theirs.cpu_per_call:.1f} µs;"
                f" time {time:.2f}x)",
                f"≤ {TARGET_REDIS_CPU}x",
                met(within(cpu, TARGET_REDIS_CPU)),
            )
        )
    for peer in LIMITS:
        time, cpu = report.ratios(peer)
        algorithm = report.pair(peer)[1].name.split()[1]
        rows.append(
            (
                f"engine `check` 1 x 1 ÷ {peer} `hit` ({algorithm})",
                f"time {time:.2f}x, Redis CPU {cpu:.2f}x",
                f"time ≤ {TARGET_VS_LIMITS}x",
                met(within(time, TARGET_VS_LIMITS)),
            )
        )
    return rows


def render(report: Report) -> str:
    lines = [
        "## Peers on the same Redis",
        "",
        f"One decision, allowed, at {LIMIT}/s, each call from an address of its own (the"
        f" *{BUSY}* rows: every call from one address, at {BUSY_RATE}); {report.rounds}"
        f" interleaved rounds of {report.per_round:,} calls per row, with their own PING row."
        " *Redis CPU*: the"
        " server's CPU time (`INFO cpu`, user + system: commands, Lua, protocol and socket"
        " system calls) per decision; *in commands*: the part inside commands (`INFO"
        " commandstats`). *ours ÷ peer*: on this package's row, its median and its Redis"
        " CPU over those of the peer's row above it (the same job). *limits*: of"
        f" {LIMIT + 1} decisions at {LIMIT}/h for one address, exactly the first {LIMIT}"
        " were allowed.",
        "",
        f"| operation | {CELLS_HEAD} | Redis CPU µs | in commands µs | ours ÷ peer: time"
        " | ours ÷ peer: Redis CPU | limits |",
        f"|---|{CELLS_RULE}|--:|--:|--:|--:|---|",
    ]

    def line(scenario: Scenario, ratios: str, limits: str) -> str:
        cost = report.costs[scenario.name]
        return (
            f"| {scenario.name} | {cells(scenario, report.floor)} | {cost.cpu_per_call:.1f}"
            f" | {cost.commands_per_call:.1f} | {ratios} | {limits} |"
        )

    lines.append(line(report.floor, " | ", ""))
    peer = ""
    for row in report.rows:
        ratios = " | "
        if row.ours:
            ratios = " | ".join(f"{ratio:.2f}x" for ratio in report.ratios(peer))
        else:
            peer = row.name
        allowed = sum(row.check)
        limits = "yes" if row.limits_at_its_limit else f"**no** ({allowed} allowed)"
        lines.append(line(row.scenario, ratios, limits))
    return "\n".join(lines) + "\n"
