"""Shared pieces of the engine tests."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from redis import Redis
from redis.cluster import ClusterNode, RedisCluster

from django_ratelimits.engine import Engine, Identity, KeySpace, get_engine
from django_ratelimits.testing import FakeClock

_prefixes = itertools.count()
# A fixed, realistic epoch (2027-01-15) so window arithmetic sees real magnitudes.
EPOCH_US = 1_800_000_000_000_000


def fresh_engine(client: Redis | RedisCluster, clock: FakeClock | None = None, **kw: int) -> Engine:
    """An engine with a key prefix no other test or example has used."""
    return Engine(client, keys=KeySpace(prefix=f"t{next(_prefixes)}"), clock=clock, **kw)


def client_of(
    nodes: list[tuple[str, int]], cluster: bool, connections: int
) -> Redis | RedisCluster:
    """A new client of the test Redis, for a process of its own (spawned workers)."""
    if cluster:
        return RedisCluster(startup_nodes=[ClusterNode(host, port) for host, port in nodes])
    return Redis(host=nodes[0][0], port=nodes[0][1], max_connections=connections)


def check_calls(*clients: Redis) -> int:
    """How many times the check ran on these Redis servers so far: the calls of
    its function (Redis 7+) or of its script (EVALSHA, or EVAL after a flush)."""
    total = 0
    for client in clients:
        stats = client.info("commandstats")
        for command in ("fcall", "evalsha", "eval"):
            total += int(stats.get(f"cmdstat_{command}", {}).get("calls", 0))
    return total


def all_keys(client: Redis | RedisCluster) -> list[bytes]:
    """Every key in the test Redis (tests may scan; the engine never does)."""
    if isinstance(client, RedisCluster):
        return list(client.scan_iter(count=1000, target_nodes=RedisCluster.PRIMARIES))
    return list(client.scan_iter(count=1000))


def outcomes(decision: object) -> list[tuple[Identity, bool, int, int, int]]:
    """Who decided each limit, and how (as :class:`devtools.reference.ReferenceEngine` answers)."""
    return [
        (r.identity, r.allowed, r.remaining, r.retry_after_us, r.reset_after_us)
        for r in decision.results  # type: ignore[attr-defined]
    ]


class EngineCalls:
    """Counts the calls of the configured engine's ``check`` and ``acheck`` from now on
    (what reaches Redis as a check; a denial cache's own commands, the epoch and the
    batches, are not checks): ``n``."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.n = 0
        engine = get_engine()
        check, acheck = engine.check, engine.acheck

        def counted(checks: Any, **kwargs: Any) -> Any:
            self.n += 1
            return check(checks, **kwargs)

        async def acounted(checks: Any, **kwargs: Any) -> Any:
            self.n += 1
            return await acheck(checks, **kwargs)

        monkeypatch.setattr(engine, "check", counted)
        monkeypatch.setattr(engine, "acheck", acounted)
