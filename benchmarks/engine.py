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
   ratio to the PING median, with the round trips per check counted; and a
   concurrency limit's check with the release of its slot (two round trips;
   its Redis µs are the check's alone); and GCRA 1 x 1 under a policy with an
   escalating ban, allowed: what a ban costs a request it does not count;
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
import platform
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib.metadata import version
from pathlib import Path
from string import Template

import redis

from benchmarks.kit import (
    ONE_RATE,
    SEED_000_RATES,
    Scenario,
    counting_client,
    cpu,
    in_turn,
    met,
    ping,
    request_checks,
    run_round,
    within,
)
from devtools.redis_harness import RedisServer, temporary_workdir
from django_ratelimits.engine import (
    RATE_ALGORITHMS,
    Algorithm,
    Ban,
    Check,
    Engine,
    Identity,
    KeySpace,
    Limit,
)
from django_ratelimits.rates import parse_rates

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "benchmarks.md"
ROUNDS = 5  # interleaved rounds of every row
PER_ROUND = 1500  # timed calls per row and round, each on its own identities
METADATA_CAP = 50  # the engine's (and METADATA_MAX_ENTRIES') default

# Targets of issue 5.
TARGET_RATIO = 1.3
TARGET_REDIS_US = 25.0
# Issue 12: the engine call's client CPU, 1 x 1 (GCRA), over PING's.
TARGET_CLIENT_CPU = 1.3
TARGET_BYTES_PER_RATE = 200


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


def _engine_call(
    engine: Engine, requests: list[list[Check]], release: bool = False
) -> Callable[[], bool]:
    """One check per call, each request in turn; with ``release``, then the release of
    the concurrency slots it took (the second round trip of a concurrency policy)."""
    position = 0

    def call() -> bool:
        nonlocal position
        request = requests[position]
        position = (position + 1) % len(requests)
        decision = engine.check(request)
        if release:
            for held in decision.held:
                engine.release(held)
        return decision.allowed

    return call


def _memory(
    server: RedisServer, engine: Engine, stats: redis.Redis
) -> list[tuple[str, int, int, int]]:
    rows = []
    rate = parse_rates(ONE_RATE)[0]
    for algorithm in RATE_ALGORITHMS:
        limit = Limit("mem", rate, algorithm)
        identity = Identity("ip", f"mem-{algorithm.code}")
        keys = engine.keys.of(identity)
        engine.check([Check(identity, [limit])])
        state = keys.log(limit) if limit.is_log else keys.state
        names = [state, keys.metadata, keys.record]
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
    for n in range(METADATA_CAP + METADATA_CAP // 5):  # every hit: the default records denials
        entry = f"user:{100_000 + n}|/api/orders"
        engine.check([Check(ip, [limit], metadata=entry, record_every=True)])
    key = engine.keys.of(ip).metadata
    return int(stats.memory_usage(key, samples=0) or 0), int(stats.llen(key))


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
    client = counting_client(server)
    stats = server.client(decode_responses=True)
    engine = Engine(client, keys=KeySpace(prefix="bench"))

    empty = client.script_load("return 1")
    scenarios = [
        ping(client),
        Scenario("EVALSHA of `return 1`", lambda: client.evalsha(empty, 0) == 1),
    ]
    for algorithm in RATE_ALGORITHMS:
        requests = request_checks(algorithm, ONE_RATE, pool, False, f"a{algorithm.code}")
        scenarios.append(
            Scenario(f"{algorithm.value}, 1 x 1", _engine_call(engine, requests), algorithm)
        )
    # GCRA 1 x 1 of a policy that bans after 100 denials within an hour: the ban's field
    # is read with the limits, nothing written on an allowed check (docs/bans.md).
    ban = Ban(after=100, within=3600, duration=600, maximum=86_400)
    banning = [Limit("api", rate, Algorithm.GCRA, ban=ban) for rate in parse_rates(ONE_RATE)]
    requests = [
        [Check(c.identity, banning) for c in checks]
        for checks in request_checks(Algorithm.GCRA, ONE_RATE, pool, False, "aban")
    ]
    scenarios.append(
        Scenario("gcra, 1 x 1, with a ban", _engine_call(engine, requests), Algorithm.GCRA)
    )
    # A concurrency limit: the check, then the release of its slot (a second script).
    requests = request_checks(Algorithm.CONCURRENCY, "5/m", pool, False, "acc")
    scenarios.append(
        Scenario(
            "concurrency, 1 x 1, check + release",
            _engine_call(engine, requests, release=True),
            Algorithm.CONCURRENCY,
        )
    )
    for algorithm in RATE_ALGORITHMS:
        requests = request_checks(algorithm, SEED_000_RATES, pool, True, f"b{algorithm.code}")
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
    for turn in range(rounds):
        for scenario in in_turn(scenarios, turn):
            run_round(scenario, per_round, stats)
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


def issue_12(report: Report) -> list[tuple[str, str, str, str]]:
    """(figure, this run, target, met or missed) of issue 12's client-CPU row."""
    ping_cpu = report.floor.client_cpu_us
    ones = [s for s in report.scenarios if s.algorithm is not None and s.name.endswith(" 1 x 1")]
    gcra = next(s for s in ones if s.algorithm is Algorithm.GCRA)
    least = min(ones, key=lambda s: s.client_cpu_us)
    ratio = gcra.client_cpu_us / ping_cpu
    return [
        (
            "client CPU of the engine call, 1 x 1 (GCRA) ÷ PING's",
            f"{ratio:.2f}x ({gcra.client_cpu_us:.1f} against {ping_cpu:.1f} µs; least:"
            f" {least.name.split(',')[0]} {least.client_cpu_us / ping_cpu:.2f}x)",
            f"≤ {TARGET_CLIENT_CPU}x",
            met(within(ratio, TARGET_CLIENT_CPU)),
        )
    ]


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
                f"≤ {TARGET_RATIO}x and 1 trip: {met(ok_ratio)};"
                f" < {TARGET_REDIS_US:.0f} µs: {met(ok_cpu)}"
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
        target = met(max(one, full) < TARGET_BYTES_PER_RATE) if o1 else "- (O(limit))"
        lines.append(f"| {algorithm} | {keys} | {one} | {full} | {target} |")
    lines += [
        "",
        f"Metadata list at its longest ({report.metadata_entries} entries of"
        f" `user:<id>|/api/orders|<ms>|A`: its cap of {METADATA_CAP} and the fifth more it"
        f" holds before it is trimmed back): {report.metadata_bytes:,} bytes per identity.",
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


NOTES = ROOT / "docs" / "templates" / "benchmarks-engine.md"


def notes(report: Report) -> str:
    """The engine's method and where its time goes: the prose of :data:`NOTES` (an HTML
    comment, then Markdown with ``$name`` placeholders) filled in with this run's figures."""
    by_name = {s.name: s for s in report.scenarios}
    ping = report.floor
    row = by_name[f"{Algorithm.SLIDING_WINDOW.value}, 2 x 3 + metadata"]
    one = by_name[f"{Algorithm.SLIDING_WINDOW.value}, 1 x 1"]
    empty = report.scenarios[1]
    extra = row.median_us - ping.median_us
    redis_extra = (row.redis_us or 0) - (ping.redis_us or 0)
    client_extra = row.client_cpu_us - ping.client_cpu_us
    figures = {
        "per_round": f"{report.per_round:,}",
        "rounds": f"{report.rounds}",
        "row_median": f"{row.median_us:.0f}",
        "ping_median": f"{ping.median_us:.0f}",
        "extra": f"{extra:.0f}",
        "row_redis": f"{row.redis_us or 0:.1f}",
        "ping_redis": f"{ping.redis_us or 0:.1f}",
        "redis_extra": f"{redis_extra:.0f}",
        "one_redis": f"{one.redis_us or 0:.1f}",
        "row_inner": f"{row.inner_us or 0:.1f}",
        "one_inner": f"{one.inner_us or 0:.1f}",
        "empty_redis": f"{empty.redis_us or 0:.1f}",
        "row_cpu": f"{row.client_cpu_us:.1f}",
        "ping_cpu": f"{ping.client_cpu_us:.1f}",
        "ping_cpu_whole": f"{ping.client_cpu_us:.0f}",
        "client_extra": f"{client_extra:.0f}",
        "rest": f"{extra - redis_extra - client_extra:.0f}",
        "cpus": report.machine["cpu"].split(" x ")[0],
        "redis_ratio": f"{redis_extra / ping.median_us:.2f}",
        "target_ratio": f"{TARGET_RATIO}",
    }
    prose = NOTES.read_text().split("-->\n", 1)[1]
    return Template(prose).substitute(figures)


if __name__ == "__main__":
    sys.exit(main())
