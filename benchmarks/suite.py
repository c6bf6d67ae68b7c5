"""``make bench``: every part of issue 5's benchmark in one process and one run.

::

    python -m benchmarks            # everything; the report in docs/benchmarks.md
    python -m benchmarks --quick    # small, printed only (--output to write it too)
    python -m benchmarks --quick --parts peers request   # some parts only

One ``redis-server`` on loopback (``devtools.redis_harness``) serves every part:

* ``engine`` (:mod:`benchmarks.engine`): PING, one check per algorithm, seed
  000's 2 x 3, Redis CPU, memory per identity;
* ``peers`` (:mod:`benchmarks.peers`): django-ratelimit, DRF, ``limits``;
* ``request`` (:mod:`benchmarks.request`): whole-request overhead in Django;
* ``server`` (:mod:`benchmarks.server`): gunicorn (sync, gthread) under load;
* ``flood`` (:mod:`benchmarks.flood`): one identity's flood, with and without the cache;
* ``blocklist`` (:mod:`benchmarks.blocklist`): the blocked networks' lookup per request;
* ``accuracy``: ``devtools.accuracy``'s table (reference model, fake clock).

Django runs in this process with ``benchmarks.settings`` and a SQLite file in
the run's temporary directory. Every timing part has its own PING row, and
its ratios are to that.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from importlib.metadata import version
from pathlib import Path

from benchmarks import blocklist, engine, flood, peers, request, server, site
from benchmarks.kit import cpu, met, within
from devtools import accuracy
from devtools.redis_harness import RedisServer, temporary_workdir

DOC = engine.DOC
PARTS = ("engine", "peers", "request", "server", "flood", "blocklist", "accuracy")
PACKAGES = (
    "django",
    "django-redis",
    "redis",
    "django-ratelimit",
    "djangorestframework",
    "limits",
    "gunicorn",
)


@dataclass
class Run:
    redis: str
    engine: engine.Report | None = None
    peers: peers.Report | None = None
    request: request.Report | None = None
    server: server.Report | None = None
    flood: flood.Report | None = None
    blocklist: blocklist.Report | None = None
    accuracy: str | None = None
    seconds: dict[str, float] = field(default_factory=dict)


def run(parts: Sequence[str], quick: bool) -> Run:
    with temporary_workdir("ratelimits-bench-") as workdir:
        redis_server = RedisServer(workdir, name="bench").start()
        try:
            return _run(redis_server, workdir, parts, quick)
        finally:
            redis_server.stop()


def _run(redis_server: RedisServer, workdir: Path, parts: Sequence[str], quick: bool) -> Run:
    with redis_server.client() as client:
        result = Run(f"{client.info('server')['redis_version']} ({redis_server.binary})")

    def timed(part: str) -> float:
        started = time.perf_counter()
        print(f"benchmarks: {part}...", file=sys.stderr, flush=True)
        return started

    if "engine" in parts:
        started = timed("engine")
        result.engine = engine.run(redis_server, quick=quick)
        result.seconds["engine"] = time.perf_counter() - started
    if {"peers", "request", "server", "flood", "blocklist"} & set(parts):
        site.setup(redis_server, workdir)
    if "peers" in parts:
        started = timed("peers")
        result.peers = peers.run(redis_server, quick=quick)
        result.seconds["peers"] = time.perf_counter() - started
    if "request" in parts:
        started = timed("request")
        result.request = request.run(redis_server, quick=quick)
        result.seconds["request"] = time.perf_counter() - started
    if "server" in parts:
        started = timed("server")
        result.server = server.run(redis_server, workdir, quick=quick)
        result.seconds["server"] = time.perf_counter() - started
    if "flood" in parts:
        started = timed("flood")
        result.flood = flood.run(redis_server, workdir, quick=quick)
        result.seconds["flood"] = time.perf_counter() - started
    if "blocklist" in parts:
        started = timed("blocklist")
        result.blocklist = blocklist.run(redis_server, quick=quick)
        result.seconds["blocklist"] = time.perf_counter() - started
    if "accuracy" in parts:
        started = timed("accuracy")
        result.accuracy = accuracy.table()
        result.seconds["accuracy"] = time.perf_counter() - started
    return result


def _machine() -> str:
    return f"{cpu()}, {platform.platform()}"


def _versions() -> str:
    return ", ".join(f"{name} {version(name)}" for name in PACKAGES)


def _pings(result: Run) -> str:
    floors = {
        "engine": result.engine and result.engine.floor,
        "peers": result.peers and result.peers.floor,
        "request": result.request and result.request.floor,
        "server": result.server and result.server.floor,
    }
    return ", ".join(f"{part} {s.median_us:.0f} µs" for part, s in floors.items() if s)


def targets(result: Run) -> list[tuple[str, str, str]]:
    """(target, measured, met or missed) for every target of issue 5 this run measured."""
    rows = []
    if result.engine is not None:
        report = result.engine
        floor = report.floor.median_us
        two = [s for s in report.scenarios if s.two_by_three]
        default = next(s for s in two if s.algorithm == engine.Algorithm.SLIDING_WINDOW)
        best = min(two, key=lambda s: s.median_us)
        cheapest = min(two, key=lambda s: s.redis_us or 0)
        trips = {s.round_trips for s in two}
        rows.append(
            (
                f"engine, 2 x 3 + metadata ≤ {engine.TARGET_RATIO}x PING, 1 round trip",
                f"{default.algorithm and default.algorithm.value} {default.median_us / floor:.2f}x"
                f" (best: {best.name.split(',')[0]} {best.median_us / floor:.2f}x);"
                f" round trips {', '.join(f'{t:g}' for t in sorted(trips))}",
                met(within(best.median_us / floor, engine.TARGET_RATIO) and trips == {1}),
            )
        )
        rows.append(
            (
                f"Redis CPU per 2 x 3 check < {engine.TARGET_REDIS_US:.0f} µs",
                f"sliding_window {default.redis_us or 0:.0f} µs"
                f" (least: {cheapest.name.split(',')[0]} {cheapest.redis_us or 0:.0f} µs)",
                met((cheapest.redis_us or 0) < engine.TARGET_REDIS_US),
            )
        )
        o1 = [m for m in report.memory if m[0] != engine.Algorithm.SLIDING_LOG.value]
        largest = max(max(one, full) for _, one, full, _ in o1)
        rows.append(
            (
                f"memory per identity, O(1) algorithms < {engine.TARGET_BYTES_PER_RATE} B per rate",
                f"at most {largest} B",
                met(largest < engine.TARGET_BYTES_PER_RATE),
            )
        )
    if result.request is not None:
        rows += request.targets(result.request)
    if result.flood is not None:
        rows += flood.targets(result.flood)
    return rows


def issue_12(result: Run) -> list[tuple[str, str, str, str]]:
    """(figure, this run, target, met or missed) of issue 12's rows this run measured."""
    rows = []
    if result.engine is not None:
        rows += engine.issue_12(result.engine)
    if result.peers is not None:
        rows += peers.issue_12(result.peers)
    if result.request is not None:
        rows += request.issue_12(result.request)
    if result.server is not None:
        rows += server.issue_12(result.server)
    return rows


def document(result: Run) -> str:
    total = sum(result.seconds.values())
    took = ", ".join(f"{part} {seconds:.0f} s" for part, seconds in result.seconds.items())
    lines = [
        "# Benchmarks",
        "",
        f"Run {datetime.now(UTC):%Y-%m-%d %H:%M} UTC on {_machine()}; Python"
        f" {platform.python_version()}, {_versions()}; Redis {result.redis} on loopback."
        f" `make bench` (`python -m benchmarks`) took {total:.0f} s ({took}).",
        "",
        "Every figure is also a ratio to the median of one bare round trip (`PING` through"
        " redis-py) measured in the same interleaved rounds (the rows' order reversed every"
        " other round, so that none always runs first or last): absolute times drift between"
        " machines and between runs (other work shares this machine's cores), ratios much less."
        f" This run's PING medians: {_pings(result)}; a busy machine moves even those.",
        "",
        "What one Redis core serves per policy shape, and how a Redis Cluster grows:"
        " [scaling.md](scaling.md) (`python -m benchmarks.scaling`).",
        "",
        "## Targets",
        "",
        "| target (issue 5) | this run | |",
        "|---|---|---|",
        *(f"| {t} | {m} | {ok} |" for t, m, ok in targets(result)),
        "",
    ]
    twelve = issue_12(result)
    if twelve:
        lines += [
            "## Targets (issue 12)",
            "",
            "Each figure a ratio of two rows measured in this run (the rows are in the"
            " sections below): this package's over the peer's, or a share of requests/s.",
            "",
            "| figure | this run | target | |",
            "|---|---|---|---|",
            *(f"| {f} | {m} | {t} | {ok} |" for f, m, t, ok in twelve),
            "",
        ]
    if result.engine is not None:
        lines += [engine.tables(result.engine), ""]
    if result.peers is not None:
        lines += [peers.render(result.peers)]
    if result.request is not None:
        lines += [request.render(result.request)]
    if result.server is not None:
        lines += [server.render(result.server)]
    if result.flood is not None:
        lines += [flood.render(result.flood)]
    if result.blocklist is not None:
        lines += [blocklist.render(result.blocklist)]
    if result.accuracy is not None:
        lines += [
            "## Accuracy",
            "",
            f"`python -m devtools.accuracy`: a limit of {accuracy.LIMIT} per"
            f" {accuracy.WINDOW_US // 1_000_000} s on three traces (fake clock, the reference"
            " model that the property tests hold identical to the Redis scripts). For each"
            " algorithm: requests admitted, and in brackets how many more (or fewer) than"
            " the exact sliding log admits; then the most admitted in any one window, as a"
            " multiple of the limit (the sliding log's is 1.00x by definition).",
            "",
            result.accuracy,
            "",
        ]
    lines.append(where_the_time_goes(result))
    if result.engine is not None:
        lines += ["", engine.notes(result.engine)]
    return "\n".join(lines)


def where_the_time_goes(result: Run) -> str:
    """This run's figures, put together: what the overheads are made of."""
    lines = ["## Where the time goes", ""]
    req = result.request
    if req is not None:
        ping_us = req.floor.median_us
        overhead = req.overhead(req.headline)
        match = req.match_us
        most = max(request.POLICY_COUNTS)
        lines.append(
            f"- **The request**: with {request.HEADLINE} policies the middleware adds"
            f" {overhead:.0f} µs ({overhead / ping_us:.2f}x PING) to a request that costs"
            f" {req.bare.median_us:.0f} µs without it."
        )
        if req.engine is not None:
            check_us = req.engine.median_us
            meets = within(check_us / ping_us, request.TARGET_OVERHEAD)
            lines.append(
                f"  The engine call it makes, timed alone in the same rounds, is"
                f" {check_us:.0f} µs ({check_us / ping_us:.2f}x PING, one round trip"
                f" included), {check_us / overhead:.0%} of the overhead; alone it is"
                f" {'within' if meets else 'above'} the {request.TARGET_OVERHEAD}x target."
            )
        if req.engine is not None and req.python is not None:
            python_us = req.overhead(req.python)
            lines.append(
                f"  The limiter and the middleware in Python (the same requests with the"
                f" engine's answer replayed from memory) add {python_us:.0f} µs"
                f" ({python_us / ping_us:.2f}x PING): the client address and the two"
                " identities, grouping six limits into two checks, the metadata strings, the"
                " verdict, the `RateLimit` header fields. The remaining"
                f" {overhead - check_us - python_us:.0f} µs are what the same engine call"
                " costs more inside a request than alone: a larger working set for the"
                " caches, and on a 2-core machine the scheduler (this process's CPU per"
                f" request: {req.headline.client_cpu_us:.0f} µs with the middleware,"
                f" {req.python.client_cpu_us:.0f} µs with the answer replayed,"
                f" {req.bare.client_cpu_us:.0f} µs without, and"
                f" {req.engine.client_cpu_us:.0f} µs for the engine call alone)."
            )
        lines.append(
            f"  Matching the path, timed alone: {match[1, False]:.1f} µs with 1 policy and"
            f" {match[most, False]:.1f} µs with {most:,} (answers cached per path and method);"
            f" on paths never seen {match[1, True]:.1f} and {match[most, True]:.1f} µs (the"
            " prefix index leaves only the policies whose literal prefix starts the path, and"
            " the unanchored ones, to search). That is all that the policy count changes in a"
            f" request; the overheads measured with 1 and {most:,} policies differ by"
            f" {req.growth():+.1%} ({req.growth(cold=True):+.1%} on paths never cached)"
            + (
                "."
                if max(abs(req.growth()), abs(req.growth(cold=True))) < request.TARGET_GROWTH
                else ", far more than matching costs: that difference is this run's noise"
                " (compare the p99 column), not the policies."
            )
        )
        decorator = req.overhead(req.scenario(request.DECORATOR_ROW))
        lines.append(
            f"  django-ratelimit's decorator adds {decorator:.0f} µs for one limit"
            f" ({decorator / ping_us:.2f}x PING): its 10-policy, 6-limit middleware costs"
            f" {overhead / decorator:.2f}x that."
        )
        trip = req.overhead(req.scenario(request.ROUND_TRIP_ROW))
        bound = trip / decorator
        trips = req.scenario(request.DECORATOR_ROW).round_trips
        lines.append(
            f"  One PING per request and nothing else (on the engine's client) adds"
            f" {trip:.0f} µs, {trip / ping_us:.2f}x the PING timed alone: a round trip costs"
            " a request more than a tight loop, most likely the wake-ups (between two requests"
            f" both processes go idle). That is {bound:.2f}x django-ratelimit's overhead, whose"
            f" requests here made {trips:.3g} round trip{'' if trips == 1 else 's'} each: no"
            " limiter that asks Redis once per request adds less"
            + (
                f", so the {request.TARGET_ONE_LIMIT}x target is below this machine's floor."
                if bound > request.TARGET_ONE_LIMIT
                else "."
            )
        )
        one = req.overhead(req.scenario(request.ONE_LIMIT_ROW))
        lines.append(
            f"  Past that floor, the middleware with 1 policy of 1 limit adds {one - trip:.0f} µs"
            f" (its Python, and the script's work in Redis beyond a PING's) and"
            f" django-ratelimit's decorator {decorator - trip:.0f} µs; with {request.HEADLINE}"
            f" policies and 2 x 3 limits, the middleware {overhead - trip:.0f} µs."
        )
        steady = req.scenario(request.BUSY_DECORATOR_ROW)
        busy_us = req.overhead(steady)
        busy_one = req.overhead(req.scenario(request.BUSY_ONE_ROW))
        busy_ten = req.overhead(req.scenario(request.BUSY_HEADLINE_ROW))
        lines.append(
            f"  From {request.BUSY} (a client's later requests in its window),"
            f" django-ratelimit's decorator makes {steady.round_trips:.3g} round trips per"
            f" request and adds {busy_us:.0f} µs; the middleware, one round trip whatever"
            f" the client, adds {busy_one:.0f} µs with 1 policy of 1 limit"
            f" ({busy_one / busy_us:.2f}x) and {busy_ten:.0f} µs with {request.HEADLINE}"
            f" policies and 2 x 3 limits ({busy_ten / busy_us:.2f}x). One PING per request"
            f" is {trip / busy_us:.2f}x that decorator's overhead."
        )
    if result.peers is not None:
        by_name = {
            row.name.split(" `")[0].split(" (")[0]: row.scenario
            for row in result.peers.rows
            if not row.busy
        }
        floor = result.peers.floor.median_us
        dr, compat = by_name["django-ratelimit"], by_name["django_ratelimits.compat"]
        drf, throttle = by_name["DRF"], by_name["django_ratelimits"]
        limits_fw = by_name["limits fixed window"]
        ours_fw = by_name["django_ratelimits fixed_window"]
        faster = (
            "The `limits` library is faster than the engine"
            if limits_fw.median_us < ours_fw.median_us
            else "The engine is faster than the `limits` library"
        )
        cpu = "less" if ours_fw.client_cpu_us < limits_fw.client_cpu_us else "more"
        lines.append(
            f"- **The peers**: django-ratelimit ({dr.median_us / floor:.2f}x PING, round trips"
            f" {dr.round_trips:.3g}) and DRF's throttle ({drf.median_us / floor:.2f}x, round"
            f" trips {drf.round_trips:.3g}) talk to Redis through the cache API, one command at"
            " a time (`add`, then an `EVAL` for `incr` once the key exists; `get` then `set`"
            " of a pickled list);"
            f" their drop-ins here make one script call ({compat.median_us / floor:.2f}x and"
            f" {throttle.median_us / floor:.2f}x). {faster} for one limit (fixed window"
            f" {ours_fw.median_us / floor:.2f}x against {limits_fw.median_us / floor:.2f}x PING,"
            f" both one round trip). The engine spends {cpu} client CPU per call"
            f" ({ours_fw.client_cpu_us:.0f} against {limits_fw.client_cpu_us:.0f} µs: it packs"
            " its command itself and keeps its connection between checks, where `limits` goes"
            " through redis-py's `execute_command` and pool) and runs a larger script: it also"
            " keeps the offender index and reads overrides, and decides any number of limits"
            " and identities in that one call."
        )
        costs = result.peers.costs
        theirs, ours = (costs[row.name] for row in result.peers.pair(peers.DJANGO_RATELIMIT))
        ping_cost = costs[result.peers.floor.name]
        lines.append(
            f"  Redis' own CPU per decision (`INFO cpu`): django-ratelimit"
            f" {theirs.cpu_per_call:.0f} µs, its drop-in {ours.cpu_per_call:.0f} µs"
            f" ({ours.cpu_per_call / theirs.cpu_per_call:.2f}x), of which inside commands"
            f" {theirs.commands_per_call:.0f} and {ours.commands_per_call:.0f} µs. Reading a"
            f" request and writing its reply costs Redis about {ping_cost.cpu_per_call:.0f} µs"
            " whatever the command (the PING row); past that, django-ratelimit's commands are"
            " a `SET NX` and, once the key exists, a short `EVAL`, where the engine's script"
            " runs Lua around its commands."
        )
        busy, busy_ours = result.peers.pair(peers.DJANGO_RATELIMIT_BUSY)
        theirs, ours = costs[busy.name], costs[busy_ours.name]
        lines.append(
            f"  From {peers.BUSY} (a client's later requests in its window), django-ratelimit"
            f" makes {busy.scenario.round_trips:.3g} round trips per decision, its `add`"
            " finding the key and an `EVAL` counting: Redis CPU"
            f" {theirs.cpu_per_call:.0f} µs against its drop-in's {ours.cpu_per_call:.0f} µs"
            f" ({ours.cpu_per_call / theirs.cpu_per_call:.2f}x), time"
            f" {busy.scenario.median_us / floor:.2f}x PING against"
            f" {busy_ours.scenario.median_us / floor:.2f}x."
        )
    if result.server is not None:
        report = result.server
        servers = dict.fromkeys(r.server for r in report.results)
        changes = ", ".join(
            f"{name} {-report.loss(name, server.MIDDLEWARE):+.0%}"
            f" (django-ratelimit's decorator {-report.loss(name, server.DECORATOR):+.0%};"
            f" one address rotating users {-report.loss(name, server.ROTATING):+.0%})"
            for name in servers
        )
        lines.append(
            f"- **The servers**: requests/s with the middleware against without: {changes}."
            " Each request adds one script call on Redis and the limiter's Python; with"
            f" {os.cpu_count()} cores shared by the workers, Redis and the load generator,"
            " that CPU comes straight out of throughput. A client rotating users past its"
            " identity budget costs each of its requests the budget's ZSET read, trimmed and"
            " counted, before the check counts it against its address."
        )
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="small and fast; not written")
    parser.add_argument("--output", type=Path, help=f"write the report here (default {DOC})")
    parser.add_argument("--parts", nargs="+", choices=PARTS, default=PARTS, metavar="PART")
    args = parser.parse_args(argv)
    output = args.output or (None if args.quick else DOC)
    text = document(run(args.parts, args.quick))
    print(text)
    if output is not None:
        output.write_text(text)
        print(f"\nwritten to {output}")
    return 0
