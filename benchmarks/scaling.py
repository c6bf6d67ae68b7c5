"""What one Redis core serves per policy shape, and a Redis Cluster's checks/s by masters in use.

::

    python -m benchmarks.scaling                    # both parts, 4 client processes, 5 s each
    python -m benchmarks.scaling --instructions     # also callgrind's counts (valgrind, minutes)
    python -m benchmarks.scaling --quick            # half a second of each, printed only
    python -m benchmarks.scaling --processes 6 --seconds 10 --output /tmp/scaling.md

docs/scaling.md pastes its tables and works from them. Not part of ``make bench``.

**One Redis core.** A standalone ``redis-server`` (``devtools.redis_harness``)
is driven by ``--processes`` client processes, each its own redis-py client
and :class:`~django_ratelimits.engine.Engine`, calling ``check`` for one shape
at a time (:data:`SHAPES`) on identities of its own, all allowed. Redis' CPU
per check is the server's ``INFO cpu`` (user + system) over the checks made:
Redis is single-threaded, so ``1e6 /`` that is what one core serves. With
``--instructions``, :func:`benchmarks.instructions.rows` counts the same shapes
under callgrind, and the empty script's count over its user CPU per call gives
the instructions this CPU runs per second (callgrind counts user space only).

**The cluster.** The harness's 3 masters; for 1, 2 and 3 of them, each
process checks the 2 x 3 + metadata shape for requests whose two identities
(client address and user) both live in shards served by those masters, so the
others stay idle. Reported: checks/s, Redis CPU per check summed over the
masters (the cost of a request on a cluster: one script call per slot, and the
two identities are usually in two slots), each master's busy share, and the
script calls each master ran (only the masters in use may run any).

The client processes run on the same machine as the servers: on a small one
they, not Redis, are the bottleneck (see each master's busy share), so read
the growth from Redis CPU per check and the busy shares as much as from
checks/s.
"""

from __future__ import annotations

import argparse
import functools
import multiprocessing
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from multiprocessing.synchronize import Barrier, Event
from pathlib import Path
from typing import Any

import redis
from redis.cluster import RedisCluster
from redis.crc import key_slot

from benchmarks import instructions
from benchmarks.kit import ONE_RATE, SEED_000_RATES, cpu, request_checks
from benchmarks.rediscpu import cpu_times_us
from devtools.redis_harness import RedisClusterHarness, RedisServer, temporary_workdir
from django_ratelimits.engine import Algorithm, Check, Engine, KeySpace

EMPTY = "floor: EVALSHA of `return 1`"
# Shape -> (algorithm, rates, two identities with metadata); the names are
# benchmarks.instructions' rows, so its counts line up. None: the empty script.
SHAPES: dict[str, tuple[Algorithm, str, bool] | None] = {
    EMPTY: None,
    "sliding_window, 1 x 1": (Algorithm.SLIDING_WINDOW, ONE_RATE, False),
    "sliding_window, 2 x 3 + metadata": (Algorithm.SLIDING_WINDOW, SEED_000_RATES, True),
    "sliding_log, 2 x 3 + metadata": (Algorithm.SLIDING_LOG, SEED_000_RATES, True),
}
CLUSTER_SHAPE = "sliding_window, 2 x 3 + metadata"
PREFIX = "scale"
# Requests per process, each checked in turn: none nears its limits (10/s). A process
# checks at most some 25,000 times a second (an engine call costs it 40 µs and more).
POOL = 20_000
QUICK_POOL = 5_000
START_TIMEOUT = 180.0  # seconds for the processes to connect and warm up


@dataclass(frozen=True)
class Job:
    """What one client process checks: ``shape`` for ``pool`` requests of its own."""

    shape: str
    host: str
    port: int
    cluster: bool
    serving: tuple[int, ...]  # on a cluster: the ports of the masters its identities live on
    tag: str
    pool: int
    seconds: float


@dataclass(frozen=True)
class Done:
    checks: int
    denied: int
    seconds: float
    client_cpu_s: float


def _client(job: Job) -> redis.Redis | RedisCluster:
    if job.cluster:
        return RedisCluster(host=job.host, port=job.port, socket_timeout=10)
    return redis.Redis(host=job.host, port=job.port, socket_timeout=10)


def _calls(job: Job, client: redis.Redis | RedisCluster) -> list[Callable[[], bool]]:
    """One call per request of the job's pool; each returns whether it was allowed."""
    shape = SHAPES[job.shape]
    if shape is None:
        sha = client.script_load("return 1")
        return [lambda: client.evalsha(sha, 0) == 1]
    algorithm, rates, two = shape
    engine = Engine(client, keys=KeySpace(prefix=PREFIX))

    def serves(check: Check) -> bool:
        if not isinstance(client, RedisCluster):
            return True
        return client.get_node_from_key(engine.keys.of(check.identity).state).port in job.serving

    requests: list[list[Check]] = []
    batch = 0
    while len(requests) < job.pool:
        candidates = request_checks(algorithm, rates, job.pool, two, f"{job.tag}-{batch}")
        requests += [checks for checks in candidates if all(map(serves, checks))]
        batch += 1

    def allowed(request: list[Check]) -> bool:
        return engine.check(request).allowed

    return [functools.partial(allowed, request) for request in requests[: job.pool]]


def _work(job: Job, ready: Barrier, go: Event, results: Any) -> None:
    """A client process: warm up (keys, the engine's code on every node), wait, check."""
    try:
        client = _client(job)
        calls = _calls(job, client)
        for call in calls:
            call()
        ready.wait(START_TIMEOUT)
    except BaseException:
        ready.abort()
        raise
    go.wait()
    checks = denied = 0
    cpu_started, started = time.process_time(), time.perf_counter()
    deadline = started + job.seconds
    while time.perf_counter() < deadline:
        denied += not calls[checks % len(calls)]()
        checks += 1
    seconds = time.perf_counter() - started
    results.put(Done(checks, denied, seconds, time.process_time() - cpu_started))


@dataclass(frozen=True)
class Usage:
    """A server's counters: CPU (user, system) and script calls (FCALL, EVALSHA)."""

    user_us: float
    sys_us: float
    scripts: int

    @classmethod
    def of(cls, client: redis.Redis) -> Usage:
        stats = client.info("commandstats")
        scripts = sum(int(stats.get(f"cmdstat_{c}", {}).get("calls", 0)) for c in _SCRIPTS)
        return cls(*cpu_times_us(client), scripts)

    def __sub__(self, other: Usage) -> Usage:
        return Usage(
            self.user_us - other.user_us, self.sys_us - other.sys_us, self.scripts - other.scripts
        )


_SCRIPTS = ("fcall", "evalsha")


@dataclass
class Measured:
    shape: str
    masters: int | None  # in use, on the cluster; None: standalone
    done: list[Done]
    wall: float
    usage: list[Usage]  # per server, over the run

    @property
    def checks(self) -> int:
        return sum(d.checks for d in self.done)

    @property
    def denied(self) -> int:
        return sum(d.denied for d in self.done)

    @property
    def rate(self) -> float:
        """Checks per second, all processes together."""
        return sum(d.checks / d.seconds for d in self.done)

    @property
    def redis_us(self) -> float:
        """Redis CPU per check, user + system, summed over the servers."""
        return sum(u.user_us + u.sys_us for u in self.usage) / self.checks

    @property
    def redis_user_us(self) -> float:
        return sum(u.user_us for u in self.usage) / self.checks

    @property
    def scripts_per_check(self) -> float:
        return sum(u.scripts for u in self.usage) / self.checks

    @property
    def client_cpu_us(self) -> float:
        return sum(d.client_cpu_s for d in self.done) * 1e6 / self.checks

    def busy(self, usage: Usage) -> float:
        """The share of one core a server was busy over the run."""
        return (usage.user_us + usage.sys_us) / 1e6 / self.wall

    @property
    def ceiling(self) -> float:
        """Checks/s when the busiest server's core is full, at this run's Redis CPU per
        check and spread of the load: what the servers could serve without the clients'
        bottleneck."""
        return self.rate / max(self.busy(u) for u in self.usage)


def measure(
    jobs: Sequence[Job], servers: Sequence[RedisServer], masters: int | None = None
) -> Measured:
    """Run ``jobs`` in processes of their own, at once, and read the ``servers`` around."""
    context = multiprocessing.get_context("spawn")
    ready, go, results = context.Barrier(len(jobs) + 1), context.Event(), context.Queue()
    workers = [context.Process(target=_work, args=(j, ready, go, results)) for j in jobs]
    for worker in workers:
        worker.start()
    stats = [server.client(decode_responses=True) for server in servers]
    try:
        ready.wait(START_TIMEOUT)
        before = [Usage.of(client) for client in stats]
        started = time.perf_counter()
        go.set()
        done = [results.get(timeout=START_TIMEOUT + jobs[0].seconds) for _ in jobs]
        wall = time.perf_counter() - started
        usage = [Usage.of(client) - b for client, b in zip(stats, before, strict=True)]
    finally:
        for worker in workers:
            worker.join(10)
            if worker.is_alive():
                worker.kill()
        for client in stats:
            client.close()
    return Measured(jobs[0].shape, masters, done, wall, usage)


@dataclass(frozen=True)
class Settings:
    processes: int
    seconds: float
    pool: int

    @property
    def each(self) -> tuple[int, float]:
        """A job's pool and seconds."""
        return self.pool, self.seconds


def standalone(server: RedisServer, settings: Settings) -> list[Measured]:
    """Each shape on one standalone server."""
    out = []
    for n, shape in enumerate(SHAPES):
        jobs = [
            Job(shape, server.host, server.port, False, (), f"one{n}p{p}", *settings.each)
            for p in range(settings.processes)
        ]
        out.append(measure(jobs, [server]))
    return out


def cluster(harness: RedisClusterHarness, settings: Settings) -> list[Measured]:
    """:data:`CLUSTER_SHAPE` on the first 1, 2 and 3 masters."""
    out = []
    host, port = harness.nodes[0]
    for m in range(1, len(harness.masters) + 1):
        serving = tuple(s.port for s in harness.masters[:m])
        jobs = [
            Job(CLUSTER_SHAPE, host, port, True, serving, f"c{m}p{p}", *settings.each)
            for p in range(settings.processes)
        ]
        out.append(measure(jobs, harness.masters, m))
    return out


def shards_per_master(harness: RedisClusterHarness) -> list[int]:
    """How many of the key space's shards (hash tags) each master serves."""
    client = harness.client()
    try:
        keys = KeySpace(prefix=PREFIX)
        ports = [client.get_node_from_key(keys.index(n)).port for n in range(keys.shards)]
    finally:
        client.close()
    return [ports.count(s.port) for s in harness.masters]


SLOTS = 16384  # of a Redis Cluster
PLACEMENT_SHARDS = (64, 256, 1024)  # the default SHARDS, and more (1024 is the most)
PLACEMENT_MASTERS = (3, 8, 16, 32, 64, 128, 256)


def render_placement() -> str:
    """Where the shards land when the 16,384 slots are split in equal ranges (as
    ``redis-cli --cluster create`` does): the busiest master's shards over the mean.
    Every key of an identity is in its shard's one slot, so this is the load's spread."""
    lines = [
        "| shards | " + " | ".join(f"{m} masters" for m in PLACEMENT_MASTERS) + " |",
        "|--:|" + "--:|" * len(PLACEMENT_MASTERS),
    ]
    for shards in PLACEMENT_SHARDS:
        keys = KeySpace(prefix=PREFIX, shards=shards)
        slots = [key_slot(keys.index(n).encode()) for n in range(shards)]
        cells = []
        for masters in PLACEMENT_MASTERS:
            held = [0] * masters
            for slot in slots:
                held[slot * masters // SLOTS] += 1
            cells.append(f"{max(held) / (shards / masters):.2f}x ({max(held)}, {held.count(0)})")
        lines.append(f"| {shards:,} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def render_standalone(rows: list[Measured], counts: dict[str, int] | None) -> str:
    """The per-shape table; with ``counts`` (instructions per check, by shape), what they
    give at this CPU's instructions per second."""
    processes = len(rows[0].done)
    head = (
        f"| shape | checks/s ({processes} processes) | denied | Redis busy | Redis CPU µs per"
        " check (user + sys) | of which user µs | checks per Redis core-second (INFO) |"
    )
    rule = "|---|--:|--:|--:|--:|--:|--:|"
    low = high = 0.0  # instructions per µs of user CPU: the empty script's, the fastest shape's
    if counts is not None:
        rates = {r.shape: counts[r.shape] / r.redis_user_us for r in rows}
        low, high = rates[EMPTY], max(rates.values())
        head += (
            " instructions per check | instructions per µs of user CPU | checks per"
            " core-second from instructions |"
        )
        rule += "--:|--:|--:|"
    lines = [head, rule]
    for r in rows:
        line = (
            f"| {r.shape} | {r.rate:,.0f} | {r.denied} | {r.busy(r.usage[0]):.0%}"
            f" | {r.redis_us:.1f} | {r.redis_user_us:.1f} | {1e6 / r.redis_us:,.0f} |"
        )
        if counts is not None:
            count = counts[r.shape]
            line += (
                f" {count:,} | {count / r.redis_user_us:,.0f}"
                f" | {low * 1e6 / count:,.0f} to {high * 1e6 / count:,.0f} |"
            )
        lines.append(line)
    if counts is not None:
        lines += [
            "",
            "*Checks per core-second from instructions*: the shape's count at the rate"
            f" Redis ran the empty script here ({low:,.0f} instructions per µs of user CPU:"
            " an empty call's time is mostly waking up and cache misses, so this is the"
            f" low end) to the fastest rate any shape ran at ({high:,.0f}). Callgrind"
            " counts user space only: the kernel's share (socket reads and writes), which"
            " the INFO column includes, is left out of both.",
        ]
    return "\n".join(lines) + "\n"


def render_cluster(rows: list[Measured], shards: list[int]) -> str:
    masters = len(rows[0].usage)
    busy = " | ".join(f"master {n} busy" for n in range(masters))
    calls = " | ".join(f"master {n} script calls" for n in range(masters))
    lines = [
        f"{CLUSTER_SHAPE}; {len(rows[0].done)} client processes. Shards (hash tags) per"
        f" master: {', '.join(map(str, shards))} of {sum(shards)}.",
        "",
        f"| masters in use | checks/s | denied | Redis CPU µs per check (all masters)"
        f" | script calls per check | client CPU µs per check | {busy} | {calls}"
        " | checks/s with the busiest master's core full |",
        "|--:|--:|--:|--:|--:|--:|" + "--:|" * (2 * masters + 1),
    ]
    for r in rows:
        shares = " | ".join(f"{r.busy(u):.0%}" for u in r.usage)
        scripts = " | ".join(f"{u.scripts:,}" for u in r.usage)
        lines.append(
            f"| {r.masters} | {r.rate:,.0f} | {r.denied} | {r.redis_us:.1f}"
            f" | {r.scripts_per_check:.2f} | {r.client_cpu_us:.0f} | {shares} | {scripts}"
            f" | {r.ceiling:,.0f} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.scaling", description=__doc__)
    parser.add_argument("--processes", type=int, default=4, help="client processes (4)")
    parser.add_argument("--seconds", type=float, default=5.0, help="per measurement (5)")
    parser.add_argument("--quick", action="store_true", help="half a second each, few requests")
    parser.add_argument("--instructions", action="store_true", help="also count (valgrind)")
    parser.add_argument("--redis-server", type=Path, help="the binary (default: as the tests)")
    parser.add_argument("--output", type=Path, help="also write the tables here")
    args = parser.parse_args(argv)
    settings = Settings(args.processes, args.seconds, POOL)
    if args.quick:
        settings = Settings(min(args.processes, 2), min(args.seconds, 0.5), QUICK_POOL)
    with temporary_workdir("ratelimits-scaling-") as workdir:
        server = RedisServer(workdir / "one", binary=args.redis_server, name="scaling").start()
        try:
            one = standalone(server, settings)
            binary = str(server.binary)
            version = ".".join(map(str, server.version))
        finally:
            server.stop()
        harness = RedisClusterHarness(workdir / "cluster", binary=args.redis_server).start()
        try:
            shards = shards_per_master(harness)
            many = cluster(harness, settings)
        finally:
            harness.stop()
    counts = None
    if args.instructions:  # every algorithm's rows: the shapes are not all in --quick's
        counts = dict(instructions.rows(binary))
    text = "\n".join(
        [
            f"`python -m benchmarks.scaling {' '.join(sys.argv[1:] if argv is None else argv)}`"
            f" on {cpu()} (shared by the client processes and the servers);"
            f" Redis {version} ({binary}).",
            "",
            "### One Redis core",
            "",
            render_standalone(one, counts),
            "### The cluster, by masters in use",
            "",
            render_cluster(many, shards),
            "### Shards per master, slots split in equal ranges",
            "",
            "The busiest master's shards over the mean (its shards, masters with none):",
            "",
            render_placement(),
        ]
    )
    print(text)
    if args.output is not None:
        args.output.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
