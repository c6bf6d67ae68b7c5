"""What each Redis node does once it is full: its ``maxmemory`` and ``maxmemory-policy``.

Every key the engine writes has a TTL, so every eviction policy can make room
on a Redis that holds only rate-limit keys, except ``noeviction``: with a
``maxmemory`` set, a full Redis refuses every write, so every check fails and
policies fail open (or, marked fail closed, refuse every request). A flood of
new identities is enough to fill it.

:data:`RECOMMENDED` is ``allkeys-lru``: a counter that is being used is touched
by every request of its identity, so least-recently-used eviction takes the
keys of one-off identities (a flood's) first. (``volatile-ttl`` would take the
live counters first, since their TTLs are the shortest the engine writes.)

Read with ``INFO memory`` (which managed Redis services usually allow), else
``CONFIG GET``; when a node refuses both (ACLs, renamed commands), its
:class:`NodeMemory` says why instead.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from redis import Redis
from redis.cluster import RedisCluster
from redis.exceptions import ResponseError

__all__ = ["LRU", "RECOMMENDED", "NodeMemory", "memory_of", "node_routes"]

RECOMMENDED: Final = "allkeys-lru"
LRU: Final = frozenset({"allkeys-lru", "volatile-lru"})
"""The same on a Redis of the limiter's own: every key there has a TTL."""


@dataclass(frozen=True)
class NodeMemory:
    """One node's memory limit and eviction policy, or why they could not be read."""

    address: str
    policy: str | None = None
    maxmemory: int | None = None  # bytes; 0 = no limit
    used: int | None = None  # bytes (only when INFO could be read)
    error: str | None = None

    @property
    def fails_writes(self) -> bool:
        """Whether a full node refuses writes: ``noeviction`` with a ``maxmemory``."""
        return self.policy == "noeviction" and bool(self.maxmemory)

    def as_dict(self) -> dict[str, Any]:
        return {
            "address": self.address,
            "maxmemory": self.maxmemory,
            "maxmemory_policy": self.policy,
            "used_memory": self.used,
            "fails_writes": self.fails_writes,
            "error": self.error,
        }

    def describe(self) -> str:
        """One line for people: the settings and what they mean for the limiter."""
        if self.policy is None:
            return f"{self.address}: maxmemory-policy could not be read ({self.error})"
        limit = f"maxmemory {_size(self.maxmemory)}" if self.maxmemory else "no maxmemory"
        used = f", used {_size(self.used)}" if self.used is not None else ""
        if self.fails_writes:
            verdict = f"when full, writes fail and limits fail open: use {RECOMMENDED}"
        elif not self.maxmemory:
            verdict = "Redis grows until the machine runs out of memory"
        elif self.policy in LRU:
            verdict = "recommended"
        else:
            verdict = f"writes never fail when full; {RECOMMENDED} keeps live counters better"
        return f"{self.address}: {limit}{used}, maxmemory-policy {self.policy} ({verdict})"


def _size(n: int | None) -> str:
    return f"{(n or 0) / 1_048_576:.1f} MB"


def node_routes(client: Redis | RedisCluster) -> list[tuple[str, str, dict[str, Any]]]:
    """``(address, role, route)`` of every node, sorted by address; ``route`` is
    the keyword arguments that send a command to that node."""
    if isinstance(client, RedisCluster):
        targets = [
            (f"{n.host}:{n.port}", n.server_type or "?", {"target_nodes": n})
            for n in client.get_nodes()
        ]
    else:
        kwargs = client.connection_pool.connection_kwargs
        where = kwargs.get("path") or f"{kwargs.get('host')}:{kwargs.get('port')}"
        targets = [(str(where), "server", {})]
    return sorted(targets, key=lambda t: t[0])


def memory_of(client: Redis | RedisCluster) -> list[NodeMemory]:
    """Each master's (each node's, standalone) memory limit and eviction policy.

    Replicas are left out: they ignore ``maxmemory`` by default and take no
    writes of the limiter. A refusal is reported in the node's entry; any other
    Redis error (unreachable, timeout) is raised.
    """
    return [
        _read(client, address, route)
        for address, role, route in node_routes(client)
        if role in ("server", "primary")
    ]


def _read(client: Redis | RedisCluster, address: str, route: dict[str, Any]) -> NodeMemory:
    refusals = []
    try:
        info = client.info("memory", **route)
        return NodeMemory(
            address,
            policy=_text(info["maxmemory_policy"]),
            maxmemory=int(info["maxmemory"]),
            used=int(info["used_memory"]),
        )
    except (ResponseError, KeyError) as error:
        refusals.append(f"INFO: {_why(error)}")
    try:
        found = _pairs(client.config_get("maxmemory*", **route))
        return NodeMemory(
            address, policy=found["maxmemory-policy"], maxmemory=int(found["maxmemory"])
        )
    except (ResponseError, KeyError) as error:
        refusals.append(f"CONFIG GET: {_why(error)}")
    return NodeMemory(address, error="; ".join(refusals))


def _why(error: Exception) -> str:
    return f"{type(error).__name__}: {error}"


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _pairs(reply: dict[Any, Any]) -> dict[str, str]:
    return {_text(k): _text(v) for k, v in reply.items()}
