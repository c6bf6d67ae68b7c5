"""The benchmarks' shared kit: timed rows, counted round trips, interleaved rounds.

A row is a :class:`Scenario`: one operation, timed call by call with
``perf_counter_ns``, its writes to the socket counted (:class:`CountingConnection`),
this process's CPU time and Redis' own time (``INFO commandstats``) taken around each
round (:func:`run_round`). :func:`interleave` runs rows in interleaved rounds, so a drift
of the machine touches them all alike, and in turns (:func:`in_turn`: the order of the
rows reversed every other round), so no row always runs first or last; every part has
its own ``PING`` row (:func:`ping`) in the same rounds, so that its ratios compare
figures measured side by side. :func:`request_checks` builds the checks of seed 000's
request (an IP and a user, three rates) or of one identity and one rate.
"""

from __future__ import annotations

import contextlib
import os
import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import redis
from redis.connection import Connection

from devtools.redis_harness import RedisServer
from django_ratelimits.engine import Algorithm, Check, Identity, Limit
from django_ratelimits.rates import parse_rates

T = TypeVar("T")

ONE_RATE = "10/s"
SEED_000_RATES = "10/s, 120/m, 240/h"


class CountingConnection(Connection):
    """A real connection that counts its writes to the socket (round trips).

    The handshake of a new connection (redis-py's ``CLIENT SETINFO``, ``HELLO``,
    ``AUTH``, ``SELECT``) is not counted: it is the pool's, once per connection, and
    a busy machine that times a connection out would otherwise show it as a call's.
    """

    sends = 0
    handshaking = False

    @contextlib.contextmanager
    def _handshake(self) -> Iterator[None]:
        was, self.handshaking = self.handshaking, True
        try:
            yield
        finally:
            self.handshaking = was

    def on_connect(self) -> None:  # redis-py 5 connects through this
        with self._handshake():
            super().on_connect()

    def on_connect_check_health(self, check_health: bool = True) -> None:  # redis-py 6+
        with self._handshake():
            super().on_connect_check_health(check_health)

    def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        if not self.handshaking:
            CountingConnection.sends += 1
        super().send_packed_command(command, check_health)


@dataclass
class Scenario:
    name: str
    call: Callable[[], bool]  # one timed operation; returns whether it was allowed
    algorithm: Algorithm | None = None
    two_by_three: bool = False
    command: str = "evalsha"  # whose INFO commandstats give the Redis time
    times_ns: list[int] = field(default_factory=list)
    calls: int = 0
    sends: int = 0
    denied: int = 0
    redis_calls: int = 0
    redis_usec: float = 0.0
    inner_usec: float = 0.0  # of the commands scripts call (redis.call), Lua excluded
    client_cpu_ns: int = 0  # this process's CPU time (user + system) over the timed calls

    @property
    def median_us(self) -> float:
        return statistics.median(self.times_ns) / 1000

    @property
    def p99_us(self) -> float:
        ordered = sorted(self.times_ns)
        return ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] / 1000

    @property
    def round_trips(self) -> float:
        return self.sends / self.calls

    @property
    def redis_us(self) -> float | None:
        return self.redis_usec / self.redis_calls if self.redis_calls else None

    @property
    def inner_us(self) -> float | None:
        return self.inner_usec / self.redis_calls if self.redis_calls else None

    @property
    def client_cpu_us(self) -> float:
        return self.client_cpu_ns / self.calls / 1000


def request_checks(
    algorithm: Algorithm, rates: str, n: int, two: bool, tag: str
) -> list[list[Check]]:
    """``n`` requests' worth of checks, each on identities no other request uses."""
    limits = [Limit("api", rate, algorithm) for rate in parse_rates(rates)]
    requests = []
    for i in range(n):
        ip = Identity("ip", f"{tag}-10.{i // 65536}.{i // 256 % 256}.{i % 256}")
        if two:
            user = Identity("user", f"{tag}-{i}")
            requests.append(
                [
                    Check(ip, limits, metadata=f"user:{user.value}|/api", record_every=True),
                    Check(user, limits, metadata=f"ip:{ip.value}|/api", record_every=True),
                ]
            )
        else:
            requests.append([Check(ip, limits)])
    return requests


def _commandstats(stats: redis.Redis) -> dict[str, tuple[int, float]]:
    return {
        name.removeprefix("cmdstat_"): (int(entry["calls"]), float(entry["usec"]))
        for name, entry in stats.info("commandstats").items()
    }


def _inner(before: dict[str, tuple[int, float]], after: dict[str, tuple[int, float]]) -> float:
    """Microseconds of the commands run from scripts: all but the client's own."""
    own = {"fcall", "evalsha", "eval", "function|load", "ping", "info", "config|resetstat"}
    return sum(
        usec - before.get(name, (0, 0.0))[1] for name, (_, usec) in after.items() if name not in own
    )


def run_round(scenario: Scenario, n: int, stats: redis.Redis) -> None:
    call = scenario.call
    clock = time.perf_counter_ns
    before = _commandstats(stats)
    before_sends = CountingConnection.sends
    before_cpu = time.process_time_ns()
    times = scenario.times_ns
    denied = 0
    for _ in range(n):
        started = clock()
        allowed = call()
        times.append(clock() - started)
        denied += not allowed
    scenario.client_cpu_ns += time.process_time_ns() - before_cpu
    scenario.sends += CountingConnection.sends - before_sends
    scenario.calls += n
    scenario.denied += denied
    after = _commandstats(stats)
    command = scenario.command
    scenario.redis_calls += after.get(command, (0, 0.0))[0] - before.get(command, (0, 0.0))[0]
    scenario.redis_usec += after.get(command, (0, 0.0))[1] - before.get(command, (0, 0.0))[1]
    scenario.inner_usec += _inner(before, after)


def cpu() -> str:
    """How many CPUs, and their model as /proc/cpuinfo names it."""
    model = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{os.cpu_count()} x {model}"


def met(ok: bool) -> str:
    return "met" if ok else "**missed**"


def within(ratio: float, target: float) -> bool:
    """Whether ``ratio`` ≤ ``target``, judged as the pages print ratios (two decimals):
    a run that shows 1.00x is not told it missed 1.0x by 0.004."""
    return round(ratio, 2) <= target


Enter = Callable[[Scenario], AbstractContextManager[object]]


def counting_client(server: RedisServer) -> redis.Redis:
    """A redis-py client whose connections count their writes."""
    pool = redis.ConnectionPool(
        connection_class=CountingConnection, host=server.host, port=server.port
    )
    return redis.Redis(connection_pool=pool)


def ping(client: redis.Redis) -> Scenario:
    return Scenario("PING (the floor)", lambda: bool(client.ping()), command="ping")


def interleave(
    scenarios: Sequence[Scenario],
    rounds: int,
    per_round: int,
    stats: redis.Redis,
    enter: Enter = lambda _: contextlib.nullcontext(),
) -> None:
    """Warm every row up with ``per_round`` calls, then time ``rounds`` rounds of each.

    ``enter(row)`` is held around the row's warm-up and each of its rounds.
    """
    for scenario in scenarios:
        with enter(scenario):
            for _ in range(per_round):
                scenario.call()
    for turn in range(rounds):
        for scenario in in_turn(scenarios, turn):
            with enter(scenario):
                run_round(scenario, per_round, stats)


def in_turn(rows: Sequence[T], turn: int) -> Sequence[T]:
    """``rows`` in the order of round ``turn`` (from 0): as given, reversed every other
    round. A row that always ran first (or last) would always find the machine as the
    row before it left it (its caches, its garbage, Redis' memory): in turns, each
    row's median mixes both ends."""
    return rows if turn % 2 == 0 else rows[::-1]


def cells(scenario: Scenario, floor: Scenario) -> str:
    """median µs | p99 µs | x PING | round trips | denied | client CPU µs."""
    return (
        f"{scenario.median_us:.1f} | {scenario.p99_us:.1f}"
        f" | {scenario.median_us / floor.median_us:.2f} | {scenario.round_trips:.3g}"
        f" | {scenario.denied} | {scenario.client_cpu_us:.1f}"
    )


CELLS_HEAD = "median µs | p99 µs | x PING | round trips | denied | client CPU µs"
CELLS_RULE = "--:|--:|--:|--:|--:|--:"
