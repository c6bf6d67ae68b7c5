"""The asyncio twin of the engine's Redis client, for the async request path.

It is made from the same settings as :func:`~django_ratelimits.engine.connection.get_redis`:
a URL or cluster dict gives a ``redis.asyncio`` client with the same bounded
timeouts; a django-redis alias using the default client class gives one for the
alias's first ``LOCATION`` with the options django-redis gives the sync client's pool
(:func:`~django_ratelimits.engine.connection.cache_pool`: timeouts, username,
password, ``CONNECTION_POOL_KWARGS``), and the bounded timeouts where it sets none.
Other django-redis client classes, connection factories and pool classes (Sentinel,
sharded) have no asyncio twin here: :func:`get_async_redis` returns ``None`` and the
engine runs the sync call in a worker thread, so the event loop is never blocked
either way.

asyncio connections belong to the event loop that made them, so clients are
kept per running loop. Settings that give no client raise
:class:`~django_ratelimits.engine.connection.UnusableRedis`, as the sync side does.
"""

from __future__ import annotations

import asyncio
import threading
import weakref
from collections.abc import Callable
from typing import TypeAlias

import redis.asyncio
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster

from django_ratelimits.conf import RateLimitSettings, RedisServer
from django_ratelimits.engine.connection import bounded, cache_pool, client_for

AsyncClient: TypeAlias = redis.asyncio.Redis | AsyncRedisCluster

_clients: weakref.WeakKeyDictionary[
    asyncio.AbstractEventLoop, dict[RateLimitSettings, AsyncClient | None]
] = weakref.WeakKeyDictionary()
_lock = threading.Lock()


def get_async_redis(config: RateLimitSettings) -> AsyncClient | None:
    """The asyncio client for ``config`` on the running loop, or ``None`` if there is none."""
    loop = asyncio.get_running_loop()
    per_loop = _clients.get(loop)
    if per_loop is not None and config in per_loop:  # every request but the first
        return per_loop[config]
    with _lock:
        per_loop = _clients.setdefault(loop, {})
        if config not in per_loop:
            per_loop[config] = make_async_redis(config)
        return per_loop[config]


def make_async_redis(config: RateLimitSettings) -> AsyncClient | None:
    """A new asyncio client for ``config``, or ``None`` if there is none. Touches no
    network, and needs no running loop (the system checks make one)."""
    kwargs = bounded(config)
    target = config.redis
    if isinstance(target, RedisServer):
        cls = AsyncRedisCluster if target.cluster else redis.asyncio.Redis
        make: Callable[..., AsyncClient] = cls.from_url
        return client_for(target.url, make, {**kwargs, **target.options})
    pool = cache_pool(target)
    if pool is None:
        return None
    url, options = pool
    return client_for(url, redis.asyncio.Redis.from_url, {**kwargs, **options})
