"""The asyncio twin of the engine's Redis client, for the async request path.

It is made from the same settings as :func:`~django_ratelimits.engine.connection.get_redis`:
a URL or cluster dict gives a ``redis.asyncio`` client with the same bounded
timeouts; a django-redis alias using the default client class gives one for the
alias's first ``LOCATION`` with the alias's timeouts and password. Other
django-redis client classes (Sentinel, sharded) have no asyncio twin here:
:func:`get_async_redis` returns ``None`` and the engine runs the sync call in a
worker thread, so the event loop is never blocked either way.

asyncio connections belong to the event loop that made them, so clients are
kept per running loop. Settings that give no client raise
:class:`~django_ratelimits.engine.connection.UnusableRedis`, as the sync side does.
"""

from __future__ import annotations

import asyncio
import threading
import weakref
from collections.abc import Callable, Mapping
from typing import Any, TypeAlias

import redis.asyncio
from django.conf import settings
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster

from django_ratelimits.conf import RateLimitSettings, RedisServer
from django_ratelimits.engine.connection import bounded, client_for, default_alias

AsyncClient: TypeAlias = redis.asyncio.Redis | AsyncRedisCluster

_DEFAULT_CLIENT = "django_redis.client.DefaultClient"
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
    cache: Mapping[str, Any] = settings.CACHES[target if target is not None else default_alias()]
    options: Mapping[str, Any] = cache.get("OPTIONS", {})
    if options.get("CLIENT_CLASS", _DEFAULT_CLIENT) != _DEFAULT_CLIENT:
        return None
    location = cache["LOCATION"]
    if isinstance(location, str):
        location = location.split(",")
    kwargs["socket_timeout"] = options.get("SOCKET_TIMEOUT", config.socket_timeout)
    kwargs["socket_connect_timeout"] = options.get(
        "SOCKET_CONNECT_TIMEOUT", config.socket_connect_timeout
    )
    if options.get("PASSWORD"):
        kwargs["password"] = options["PASSWORD"]
    return client_for(str(location[0]).strip(), redis.asyncio.Redis.from_url, kwargs)
