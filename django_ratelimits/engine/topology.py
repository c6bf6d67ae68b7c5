"""Whether a Redis server runs in cluster mode: the client kind must match it.

A cluster node reached through a standalone client (``DJANGO_RATELIMITS['REDIS']``
a plain URL, or a django-redis cache, without ``CLUSTER: True``) answers PING and
every command whose keys hash to its own slots, and ``MOVED`` to every other: the
checks of most identities fail, and policies fail open without a word from PING.
The reverse, ``CLUSTER: True`` against a server not in cluster mode, fails when the
client is made. System check E011 and ``manage.py ratelimits status`` ask here.

Read with ``INFO cluster`` (``cluster_enabled``), else ``CLUSTER INFO`` (which a
server not in cluster mode refuses with "cluster support disabled"); when a server
refuses both (ACLs, renamed commands), the answer is None: unknown.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import redis
from redis.exceptions import ResponseError

__all__ = ["CLUSTER_DISABLED", "cluster_enabled", "cluster_enabled_at"]

CLUSTER_DISABLED = "cluster support disabled"
"""What a server not in cluster mode answers to ``CLUSTER INFO``."""


def cluster_enabled(client: redis.Redis) -> bool | None:
    """Whether the server a standalone client talks to runs in cluster mode; None when
    it refuses to say. Redis errors other than a refusal (unreachable) are raised."""
    try:
        return bool(int(client.info("cluster").get("cluster_enabled", 0)))
    except (ResponseError, ValueError):
        pass
    try:
        client.execute_command("CLUSTER INFO")
    except ResponseError as error:
        return False if CLUSTER_DISABLED in str(error) else None
    return True


def cluster_enabled_at(url: str, options: Mapping[str, Any]) -> bool | None:
    """:func:`cluster_enabled` of the server at ``url``, through a standalone client of
    its own (closed after); None when no such client can be made or asked."""
    try:
        client = redis.Redis.from_url(url, **options)
    except (TypeError, ValueError):
        return None
    try:
        return cluster_enabled(client)
    except (redis.RedisError, TypeError, ValueError):  # TypeError: a cluster-only option
        return None
    finally:
        client.close()
