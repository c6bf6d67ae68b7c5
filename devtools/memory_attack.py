"""Memory under an identity-rotation attack: what each attacker identity costs in Redis.

Every identity (a new IP address each) sends two requests to a login-like policy
of 1 per minute, with a metadata entry each: the first is counted, the second
denied, so each identity leaves everything the engine ever writes for one
identity: its limit state, its metadata list, its offender record and its
entries in the offender index. Then:

* bytes per identity: Redis' ``used_memory`` growth divided by the identities;
* every key has a TTL (a full SCAN with PTTL): memory is bounded by time, the
  longest TTL says by how much;
* the offender index holds at most ``offender_index_max`` entries, however
  many identities were denied.

Run from the repository root (starts its own redis-server)::

    python -m devtools.memory_attack --identities 1000000
    python -m devtools.memory_attack --footprint    # bytes per new identity, per denial

``tests/load/test_memory.py`` runs the same attack with fewer identities.
"""

from __future__ import annotations

import argparse
import itertools
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial

import redis

from devtools.redis_harness import RedisServer, temporary_workdir
from django_ratelimits.engine import Algorithm, Check, Engine, Identity, Limit
from django_ratelimits.engine.offenders import OffenderReader
from django_ratelimits.rates import Rate

LOGIN = Limit("login", Rate(1, 60), Algorithm.SLIDING_LOG)


def attacker(n: int) -> Identity:
    """The ``n``-th attacking address: 10.0.0.0/8, then IPv6, never the same twice."""
    if n < 1 << 24:
        return Identity("ip", f"10.{n >> 16 & 255}.{n >> 8 & 255}.{n & 255}")
    return Identity("ip", f"2001:db8::{n:x}")


def _attack_range(engine: Engine, limit: Limit, first: int, count: int) -> None:
    for n in range(first, first + count):
        check = [Check(attacker(n), [limit], metadata="user:-|POST /login")]
        engine.check(check)
        assert not engine.check(check).allowed


@dataclass(frozen=True)
class Report:
    identities: int
    seconds: float
    bytes_per_identity: float
    keys: int
    keys_without_ttl: int
    longest_ttl_s: float
    index_entries: int

    def line(self) -> str:
        return (
            f"{self.identities:,} identities in {self.seconds:.1f} s: "
            f"{self.bytes_per_identity:,.0f} bytes and {self.keys / self.identities:.2f} keys "
            f"per identity, {self.keys_without_ttl} keys without a TTL, longest TTL "
            f"{self.longest_ttl_s:,.0f} s, {self.index_entries:,} offender index entries"
        )


def attack(engine: Engine, identities: int, clients: int = 8, limit: Limit = LOGIN) -> Report:
    """Run the attack through ``engine`` (a standalone client) and measure it."""
    client = engine.client
    assert isinstance(client, redis.Redis)
    before = int(client.info("memory")["used_memory"])
    started = time.monotonic()
    step = -(-identities // clients)
    with ThreadPoolExecutor(clients) as pool:
        firsts = range(0, identities, step)
        counts = [min(step, identities - first) for first in firsts]
        list(pool.map(_attack_range, [engine] * len(firsts), [limit] * len(firsts), firsts, counts))
    seconds = time.monotonic() - started
    grown = int(client.info("memory")["used_memory"]) - before
    keys = without_ttl = longest = 0
    for batch in _batches(client.scan_iter(count=1000), 1000):
        pipe = client.pipeline(transaction=False)
        for key in batch:
            pipe.pttl(key)
        for ttl in pipe.execute():
            if ttl == -2:  # expired since the SCAN saw it
                continue
            keys += 1
            without_ttl += ttl == -1
            longest = max(longest, ttl)
    index = OffenderReader(engine).page(period=86_400, limit=0).total
    return Report(identities, seconds, grown / identities, keys, without_ttl, longest / 1000, index)


def _batches(keys: Iterator[bytes], size: int) -> Iterator[list[bytes]]:
    while batch := list(itertools.islice(keys, size)):
        yield batch


FOOTPRINT_CALLS = 5000
FOOTPRINT_METADATA = "user:-|POST /accounts/login/"


def _policies(policies: int, rates: int) -> list[Limit]:
    """``policies`` sliding-window policies of ``rates`` rates each (10/m, 100/2m, 1000/3m)."""
    return [
        Limit(f"p{p}", Rate(10**r, 60 * r), Algorithm.SLIDING_WINDOW)
        for p in range(policies)
        for r in range(1, rates + 1)
    ]


def _new(limits: list[Limit], metadata: str | None, times: int, n: int) -> list[list[Check]]:
    """Identity ``n`` checked ``times`` times."""
    return [[Check(attacker(n), limits, metadata)]] * times


def _same(limits: list[Limit], metadata: str | None, n: int) -> list[list[Check]]:
    """Identity 0, whatever ``n``."""
    return [[Check(attacker(0), limits, metadata)]]


def _grown(engine: Engine, requests: Callable[[int], list[list[Check]]]) -> float:
    """Redis' ``used_memory`` growth per identity ``n`` (0 .. FOOTPRINT_CALLS - 1),
    each sending ``requests(n)``."""
    client = engine.client
    assert isinstance(client, redis.Redis)
    before = int(client.info("memory")["used_memory"])
    for n in range(FOOTPRINT_CALLS):
        for checks in requests(n):
            engine.check(checks)
    return (int(client.info("memory")["used_memory"]) - before) / FOOTPRINT_CALLS


def footprint(engine: Engine) -> list[str]:
    """Bytes per new identity (counted once), and per denied request of one identity."""
    lines = []
    for policies, rates in ((1, 1), (2, 3)):
        for metadata in (None, FOOTPRINT_METADATA):
            engine.client.flushall()
            each = _grown(engine, partial(_new, _policies(policies, rates), metadata, 1))
            lines.append(
                f"new identity, {policies}x{rates} limits, metadata {bool(metadata)}: {each:,.0f} B"
            )
    login = [Limit("login", Rate(1, 3600))]
    for metadata in (None, FOOTPRINT_METADATA):
        engine.client.flushall()
        each = _grown(engine, partial(_new, login, metadata, 2))
        lines.append(f"new identity counted, then denied, metadata {bool(metadata)}: {each:,.0f} B")
        each = _grown(engine, partial(_same, login, metadata))
        lines.append(
            f"each further denial of one identity, metadata {bool(metadata)}: {each:,.1f} B"
        )
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m devtools.memory_attack", description=__doc__)
    parser.add_argument("--identities", type=int, default=100_000)
    parser.add_argument("--clients", type=int, default=8, help="threads sending checks")
    parser.add_argument(
        "--footprint",
        action="store_true",
        help=f"bytes per new identity and per denied request ({FOOTPRINT_CALLS:,} calls each)",
    )
    parser.add_argument(
        "--index-max", type=int, default=1_000_000, help="OFFENDER_INDEX_MAX (the default)"
    )
    args = parser.parse_args(argv)
    with temporary_workdir() as workdir:
        server = RedisServer(workdir, name="memory-attack").start()
        try:
            client = server.client(max_connections=args.clients)
            engine = Engine(client, offender_index_max=args.index_max)
            if args.footprint:
                print("\n".join(footprint(engine)))
            else:
                print(attack(engine, args.identities, args.clients).line())
        finally:
            server.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
