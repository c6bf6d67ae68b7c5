"""The engine against one bare round trip: a benchmark, not a test (issue 5, items 1, 2, 5, 6).

::

    python -m benchmarks.engine          # full run, the tables on stdout
    python -m benchmarks.engine --quick  # a few hundred calls per row

``make bench`` (``python -m benchmarks``) runs it with the other parts and
writes docs/benchmarks.md.

It starts its own ``redis-server`` on loopback (``devtools.redis_harness``) and,
in one process and one run, measures:

1. the floor: ``PING`` through redis-py (median and p99 of single calls);
2. one :meth:`Engine.check <django_ratelimits.engine.Engine.check>` per
   algorithm, 1 identity x 1 rate (10/s), then 2 identities (IP, user) x 3
   rates (10/s, 120/m, 240/h) with metadata, for every algorithm; each as a
   ratio to the PING median, with the round trips per check counted;
3. Redis CPU per check: ``INFO commandstats`` deltas of ``fcall`` (Redis 7) or
   ``evalsha`` (Redis 6);
4. memory per identity: ``MEMORY USAGE`` of the keys one identity creates
   (found through the engine's ``KeySpace``), and of a metadata list at its cap.

Every timed check is on the allowed path: the identities rotate over a pool
large enough that none of them nears its limits (denials are counted and
shown; they must be 0). Scenarios are measured in interleaved rounds, so a
drift of the machine during the run touches all of them alike.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from importlib.metadata import version
from pathlib import Path
from typing import Any

import redis
from redis.connection import Connection

from devtools.redis_harness import RedisServer, temporary_workdir
from django_ratelimits.engine import Algorithm, Check, Engine, Identity, KeySpace, Limit
from django_ratelimits.rates import parse_rates

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "benchmarks.md"
ONE_RATE = "10/s"
SEED_000_RATES = "10/s, 120/m, 240/h"
ROUNDS = 5  # interleaved rounds of every row
PER_ROUND = 1500  # timed calls per row and round, each on its own identities
METADATA_CAP = 50  # the engine's (and METADATA_MAX_ENTRIES') default

# Targets of issue 5.
TARGET_RATIO = 1.3
TARGET_REDIS_US = 25.0
TARGET_BYTES_PER_RATE = 200


class CountingConnection(Connection):
    """A real connection that counts its writes to the socket (round trips)."""

    sends = 0

    def send_packed_command(self, command: Any, check_health: bool = True) -> None:
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


@dataclass
class Report:
    scenarios: list[Scenario]
    memory: list[tuple[str, int, int, int]]  # algorithm, bytes after 1 check, at limit, keys
    metadata_bytes: int
    metadata_entries: int
    machine: dict[str, str]
    rounds: int
    per_round: int
    seconds: float

    @property
    def floor(self) -> Scenario:
        return self.scenarios[0]


def _checks(algorithm: Algorithm, rates: str, n: int, two: bool, tag: str) -> list[list[Check]]:
    """``n`` requests' worth of checks, each on identities no other request uses."""
    limits = [Limit("api", rate, algorithm) for rate in parse_rates(rates)]
    requests = []
    for i in range(n):
        ip = Identity("ip", f"{tag}-10.{i // 65536}.{i // 256 % 256}.{i % 256}")
        if two:
            user = Identity("user", f"{tag}-{i}")
            requests.append(
                [
                    Check(ip, limits, metadata=f"user:{user.value}|/api"),
                    Check(user, limits, metadata=f"ip:{ip.value}|/api"),
                ]
            )
        else:
            requests.append([Check(ip, limits)])
    return requests


def _engine_call(engine: Engine, requests: list[list[Check]]) -> Callable[[], bool]:
    position = 0

    def call() -> bool:
        nonlocal position
        request = requests[position]
        position = (position + 1) % len(requests)
        return engine.check(request).allowed

    return call


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


def _run_round(scenario: Scenario, n: int, stats: redis.Redis) -> None:
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


def _memory(
    server: RedisServer, engine: Engine, stats: redis.Redis
) -> list[tuple[str, int, int, int]]:
    rows = []
    rate = parse_rates(ONE_RATE)[0]
    for algorithm in Algorithm:
        limit = Limit("mem", rate, algorithm)
        identity = Identity("ip", f"mem-{algorithm.code}")
        keys = engine.keys.of(identity)
        engine.check([Check(identity, [limit])])
        state = keys.log(limit) if limit.is_log else keys.state
        names = [state, keys.metadata, keys.record, keys.override]
        present = [k for k in names if stats.exists(k)]
        after_one = sum(int(stats.memory_usage(k, samples=0) or 0) for k in present)
        for _ in range(rate.limit - 1):  # up to the limit, all allowed
            engine.check([Check(identity, [limit])])
        at_limit = sum(int(stats.memory_usage(k, samples=0) or 0) for k in present)
        rows.append((algorithm.value, after_one, at_limit, len(present)))
    return rows


def _metadata(engine: Engine, stats: redis.Redis) -> tuple[int, int]:
    limit = Limit("meta", parse_rates("1000000/h")[0], Algorithm.FIXED_WINDOW)
    ip = Identity("ip", "meta-203.0.113.9")
    for n in range(METADATA_CAP + 10):
        engine.check([Check(ip, [limit], metadata=f"user:{100_000 + n}|/api/orders")])
    key = engine.keys.of(ip).metadata
    return int(stats.memory_usage(key, samples=0) or 0), int(stats.llen(key))


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


def _machine(server: RedisServer, stats: redis.Redis) -> dict[str, str]:
    info = stats.info("server")
    return {
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "cpu": cpu(),
        "os": platform.platform(),
        "python": platform.python_version(),
        "redis-py": version("redis"),
        "redis": f"{info['redis_version']} ({server.binary})",
    }


def run(server: RedisServer, quick: bool = False) -> Report:
    # Each request (its identities) is checked once per round: its first check is in the
    # warm-up, so every timed check finds the script loaded and the long-window keys there.
    rounds, per_round = (3, 100) if quick else (ROUNDS, PER_ROUND)
    pool = warm = per_round
    connection = redis.ConnectionPool(
        connection_class=CountingConnection, host=server.host, port=server.port
    )
    client = redis.Redis(connection_pool=connection)
    stats = server.client(decode_responses=True)
    engine = Engine(client, keys=KeySpace(prefix="bench"))

    empty = client.script_load("return 1")
    scenarios = [
        Scenario("PING (the floor)", lambda: bool(client.ping()), command="ping"),
        Scenario("EVALSHA of `return 1`", lambda: client.evalsha(empty, 0) == 1),
    ]
    for algorithm in Algorithm:
        requests = _checks(algorithm, ONE_RATE, pool, False, f"a{algorithm.code}")
        scenarios.append(
            Scenario(f"{algorithm.value}, 1 x 1", _engine_call(engine, requests), algorithm)
        )
    for algorithm in Algorithm:
        requests = _checks(algorithm, SEED_000_RATES, pool, True, f"b{algorithm.code}")
        scenarios.append(
            Scenario(
                f"{algorithm.value}, 2 x 3 + metadata",
                _engine_call(engine, requests),
                algorithm,
                two_by_three=True,
            )
        )

    started = time.perf_counter()
    for scenario in scenarios:  # connect, load the script, create the keys
        for _ in range(warm):
            scenario.call()
        if scenario.algorithm is not None:  # FCALL on Redis 7, EVALSHA before
            scenario.command = engine.check_command.lower()
    for _ in range(rounds):
        for scenario in scenarios:
            _run_round(scenario, per_round, stats)
    memory = _memory(server, engine, stats)
    metadata_bytes, entries = _metadata(engine, stats)
    return Report(
        scenarios,
        memory,
        metadata_bytes,
        entries,
        _machine(server, stats),
        rounds,
        per_round,
        time.perf_counter() - started,
    )


def _met(ok: bool) -> str:
    return "met" if ok else "**missed**"


def render(report: Report) -> str:
    m = report.machine
    return "\n".join(
        [
            "# Engine benchmark",
            "",
            f"Run {m['date']}: {m['cpu']}, {m['os']}; Python {m['python']},"
            f" redis-py {m['redis-py']}, Redis {m['redis']} on loopback.",
            "",
            tables(report),
        ]
    )


def tables(report: Report) -> str:
    """The latency and memory tables, with this run's targets."""
    floor = report.floor.median_us
    lines = [
        "## Engine: latency of one call, and Redis CPU per call",
        "",
        f"{report.rounds} interleaved rounds of {report.per_round:,} calls per row, after"
        f" warm-up; {report.seconds:.1f} s.",
        "",
        "| operation | median µs | p99 µs | x PING | round trips | denied | Redis µs"
        " | of which commands µs | calls/s per Redis core | client CPU µs | target |",
        "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|---|",
    ]
    for s in report.scenarios:
        ratio = s.median_us / floor
        redis_us = s.redis_us
        target = ""
        if s.two_by_three:
            ok_ratio = ratio <= TARGET_RATIO and s.round_trips == 1
            ok_cpu = redis_us is not None and redis_us < TARGET_REDIS_US
            target = (
                f"≤ {TARGET_RATIO}x and 1 trip: {_met(ok_ratio)};"
                f" < {TARGET_REDIS_US:.0f} µs: {_met(ok_cpu)}"
            )
        lines.append(
            f"| {s.name} | {s.median_us:.1f} | {s.p99_us:.1f} | {ratio:.2f} | {s.round_trips:g}"
            f" | {s.denied} | {'-' if redis_us is None else f'{redis_us:.1f}'}"
            f" | {'-' if s.inner_us is None else f'{s.inner_us:.1f}'}"
            f" | {'-' if not redis_us else f'{1e6 / redis_us:,.0f}'}"
            f" | {s.client_cpu_us:.1f} | {target} |"
        )
    lines += [
        "",
        f"## Memory per identity, 1 rate ({ONE_RATE})",
        "",
        "`MEMORY USAGE key SAMPLES 0` summed over the keys the identity has"
        " (state key; no metadata, no denial, so no offender record).",
        "",
        f"| algorithm | keys | bytes after 1 check | bytes at the limit ({ONE_RATE}) |"
        f" target (< {TARGET_BYTES_PER_RATE} B/rate, O(1) algorithms) |",
        "|---|--:|--:|--:|---|",
    ]
    for algorithm, one, full, keys in report.memory:
        o1 = algorithm != Algorithm.SLIDING_LOG.value
        target = _met(max(one, full) < TARGET_BYTES_PER_RATE) if o1 else "- (O(limit))"
        lines.append(f"| {algorithm} | {keys} | {one} | {full} | {target} |")
    lines += [
        "",
        f"Metadata list at its cap ({report.metadata_entries} entries of"
        f" `user:<id>|/api/orders|<ms>|A`): {report.metadata_bytes:,} bytes per identity.",
        "",
    ]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.engine", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="a few hundred calls per row")
    parser.add_argument("--output", type=Path, help="also write the report here")
    args = parser.parse_args(argv)
    output = args.output
    with temporary_workdir("ratelimits-bench-engine-") as workdir:
        server = RedisServer(workdir, name="bench-engine").start()
        try:
            report = run(server, quick=args.quick)
        finally:
            server.stop()
    text = render(report)
    print(text)
    if output is not None:
        output.write_text(document(report))
        print(f"\nwritten to {output}")
    return 0


def document(report: Report) -> str:
    """The tables, the method and where the time goes, with this run's figures."""
    text = render(report).replace("# Engine benchmark", "# Benchmarks", 1)
    return f"{text}\n`python -m benchmarks.engine --output` wrote this file.\n\n{notes(report)}"


PROFILE = """## Engine: what was profiled and changed, and what remains

Counted with `python -m benchmarks.instructions` (callgrind: instructions Redis 7.0.15
runs per check, the same however busy the machine is), before and after the engine
work of 2026-11-22:

| check | before: a key per limit, `EVALSHA` | now: a HASH per identity, `FCALL` |
|---|--:|--:|
| empty script (`return 1`), the floor | 11,887 | 11,918 |
| gcra, 1 x 1 | 166,882 | 129,021 |
| sliding_window, 1 x 1 | 192,302 | 163,672 |
| fixed_window, 2 x 3 + metadata | 537,682 | 357,958 (-33%) |
| sliding_window, 2 x 3 + metadata | 585,915 | 444,861 (-24%) |
| sliding_window_counter, 2 x 3 + metadata | 606,359 | 406,713 (-33%) |
| sliding_log, 2 x 3 + metadata | 608,596 | 545,603 (-10%) |
| token_bucket, 2 x 3 + metadata | 560,363 | 422,244 (-25%) |
| gcra, 2 x 3 + metadata | 481,582 | 352,048 (-27%) |

- **Fewer calls into Redis from Lua.** Each `redis.call` costs 3,500 to 8,000
  instructions of its own (argument conversion, command lookup, propagation), a
  write more than a read. A 2 x 3 check made 27 of them; it now makes 13: `TIME`,
  then per identity `GET` (override), one `HMGET` of all its limits, one `HSET`,
  `PTTL` (the TTL is extended only when needed), `LPUSH` and `PTTL` of the metadata
  list (renewed only once less than `METADATA_TTL` is left). The algorithms became
  pure functions of a field's value.
- **Code built once.** On Redis 7 the check is a function library: its closures are
  built at `FUNCTION LOAD`, not on every call (about 60,000 instructions a call
  under `EVALSHA` on Redis 6.2), and limit specs are parsed once.
- **A one-string reply**, and one `string.format` per limit for it (each
  number-to-string conversion in Lua is about 2,500 instructions, mostly per call).
- **Client side**: key names, specs and the engine's settings are sent as bytes
  encoded once, printable text is checked at C speed, and the reply is one string.
  Client CPU per 2 x 3 check, measured over 1,000 checks: 258 µs before, 130 µs
  after, against 63 µs for `PING` in the same process.

What remains is the Lua interpreter itself: about 30,000 instructions per limit
and 100,000 per identity beyond the commands, most of it converting numbers to and
from strings (`tonumber`, `string.format`: Redis hands Lua every argument and
every reply as a string), building tables and collecting their garbage, and the
`KEYS`/`ARGV` tables Redis builds for each call. The sliding window costs more than
the other O(1) algorithms because it reads and writes up to 11 bucket counts per
limit (a denser encoding measured worse: 581,000). On this machine (PING 50 to 160
µs depending on what else runs; an empty script 2 to 4 µs of Redis time) the
25 µs and 1.3x targets are out of reach for a check that runs Lua at all; on the
same Redis a 2 x 3 check with metadata costs what 30 (GCRA) to 37 (sliding window) empty
scripts do.
"""


def notes(report: Report) -> str:
    """The engine's method and where its time goes, with this run's figures."""
    by_name = {s.name: s for s in report.scenarios}
    ping = report.floor
    row = by_name[f"{Algorithm.SLIDING_WINDOW.value}, 2 x 3 + metadata"]
    one = by_name[f"{Algorithm.SLIDING_WINDOW.value}, 1 x 1"]
    empty = report.scenarios[1]
    extra = row.median_us - ping.median_us
    redis_extra = (row.redis_us or 0) - (ping.redis_us or 0)
    client_extra = row.client_cpu_us - ping.client_cpu_us
    rest = extra - redis_extra - client_extra
    return f"""## Engine: method

- One `redis-server` on 127.0.0.1, started by the benchmark (`devtools.redis_harness`),
  one redis-py client with one connection, all in one process and one run.
- **PING**: `Redis.ping()`, the floor: one bare round trip through redis-py.
- **1 x 1**: `Engine.check([Check(ip, [Limit("api", 10/s, algorithm)])])`, no metadata.
- **2 x 3 + metadata**: seed 000's request: an IP and a user, each with 10/s,
  120/m, 240/h, each check carrying metadata (`user:<id>|/api`), so every call
  also pushes to two capped metadata lists.
- Every timed check is **allowed**: each row rotates over {report.per_round:,} requests
  with their own identities, each checked once per round ({report.rounds} rounds, rows
  interleaved, so machine drift touches every row alike), seconds apart, far below
  its limits. The first check of each identity happens in the warm-up; by the next
  one its 10/s key has usually expired and is created again, its 120/m and 240/h keys
  are there. The *denied* column counts denials among the timed calls (0).
- **median / p99**: of single calls timed with `perf_counter_ns`; *x PING* is the
  median over the PING median of the same run.
- **round trips**: writes to the socket per call, counted by a `Connection`
  subclass (`send_packed_command`).
- **Redis µs**: `INFO commandstats` deltas around each round, `usec / calls` of
  `fcall` or `evalsha` (the engine's one call: a function on Redis 7, a script
  before) or `ping`. This is Redis's own time
  in the command, Lua and the `redis.call`s inside it included; not the time spent
  reading the request and writing the reply. *calls/s per Redis core* is 1e6 / that.
  *of which commands* is the time of the commands the script ran (`redis.call`:
  `GET`, `INCRBY`, `LPUSH`..., the `commandstats` of every other command in the
  same deltas); the rest of *Redis µs* is Lua itself. `EVALSHA` of `return 1` is
  the floor of any script call.
- **client CPU µs**: this process's CPU time (user + system, `process_time_ns`)
  over the timed calls, per call: Python in the engine and redis-py (building the
  call, packing the command, parsing the reply, building the `Decision`) plus the
  kernel's share of the socket writes and reads.
- **Memory**: `MEMORY USAGE key SAMPLES 0` over the keys the engine's `KeySpace`
  names for the identity (`keys.of(identity).state`, or `.log(limit)` for a
  sliding log, `.metadata`,
  `.record`, `.override`), those that exist; never `KEYS` or `SCAN`.

## Engine: where the time goes (this run)

For the default algorithm (sliding window), 2 x 3 with metadata:
{row.median_us:.0f} µs against PING's {ping.median_us:.0f} µs, {extra:.0f} µs more. Of those,

- Redis running the script: {row.redis_us or 0:.1f} µs against {ping.redis_us or 0:.1f} µs
  for PING, **{redis_extra:.0f} µs** more (1 x 1: {one.redis_us or 0:.1f} µs). Only
  {row.inner_us or 0:.1f} µs of it (1 x 1: {one.inner_us or 0:.1f} µs) is the Redis
  commands the script calls, and an empty script costs {empty.redis_us or 0:.1f} µs: the
  bulk is the Lua the script runs on every call, before and around those commands;
- this process's CPU: {row.client_cpu_us:.1f} µs against {ping.client_cpu_us:.1f} µs
  for PING, **{client_extra:.0f} µs** more, mostly Python (one write and, for a reply
  this small, normally one read, as for PING): the engine preparing six limits'
  arguments and key names, redis-py packing a command of a few dozen arguments
  and parsing a nested reply, and the `Decision` built from it (this run does not
  split it further);
- the remaining {rest:.0f} µs: what neither side's CPU counters see (the two
  processes waking each other up, and on a {report.machine["cpu"].split(" x ")[0]}-CPU
  machine the two sharing cores; Redis reading and writing a larger payload).

The floor itself is mostly not Redis: PING costs Redis {ping.redis_us or 0:.1f} µs of its
{ping.median_us:.0f} µs; the rest is redis-py ({ping.client_cpu_us:.0f} µs of client CPU,
syscalls included) and the loopback wake-ups. The Redis side of a 2 x 3 check
alone is {redis_extra / ping.median_us:.2f}x the PING median, against a target of
{TARGET_RATIO}x for the whole check. Other work on the same machine during the run
moves the absolute figures; compare the ratios.

{PROFILE}"""


if __name__ == "__main__":
    sys.exit(main())
