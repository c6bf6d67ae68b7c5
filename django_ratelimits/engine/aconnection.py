"""The asyncio twin of the engine's Redis client, for the async request path.

It is made from the same settings as :func:`~django_ratelimits.engine.connection.get_redis`:
a URL or cluster dict gives a ``redis.asyncio`` client with the same bounded
timeouts; a django-redis alias using the default client class gives one for the
alias's first ``LOCATION`` with the options django-redis gives the sync client's pool
(:func:`~django_ratelimits.engine.connection.cache_pool`: timeouts, username,
password, ``CONNECTION_POOL_KWARGS``), and the bounded timeouts where it sets none.
Other django-redis client classes, connection factories and pool classes (Sentinel,
sharded) have no asyncio twin here, nor do settings with a TLS option the sync client
takes and the asyncio class refuses (:func:`sync_only`): :func:`get_async_redis`
returns ``None`` and the engine runs the sync call in a worker thread, so the event
loop is never blocked either way.

asyncio connections belong to the event loop that made them, so clients are
kept per running loop. Settings that give no client raise
:class:`~django_ratelimits.engine.connection.UnusableRedis`, as the sync side does.
"""

from __future__ import annotations

import asyncio
import threading
import weakref
from collections.abc import Callable, Collection
from typing import Any, Final, NamedTuple, TypeAlias
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import redis.asyncio
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
from redis.connection import parse_url

from django_ratelimits.conf import RateLimitSettings, RedisServer
from django_ratelimits.engine.connection import UnusableRedis, bounded, cache_pool, client_for

AsyncClient: TypeAlias = redis.asyncio.Redis | AsyncRedisCluster

# TLS options of redis-py's sync connection that an asyncio class refuses: the OCSP
# ones in every version, ssl_ca_path and ssl_password before redis-py 8 (and on the
# asyncio cluster class in every version). Only the sync client can apply them.
SYNC_TLS_OPTIONS: Final = (
    "ssl_ca_path",
    "ssl_password",
    "ssl_validate_ocsp",
    "ssl_validate_ocsp_stapled",
    "ssl_ocsp_context",
    "ssl_ocsp_expected_cert",
)

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
    """A new asyncio client for ``config``, or ``None`` if there is none (the async path
    then runs the sync client in a thread): a django-redis pool no twin can follow, or
    options only the sync client takes (:func:`sync_only`). Touches no network, and
    needs no running loop (the system checks make one)."""
    twin = _twin(config)
    if twin is None:
        return None
    try:
        return _made(twin)
    except UnusableRedis:
        if sync_only(config):
            return None
        _made(twin, without=_sync_tls_options(twin))  # what else it refuses, named
        raise


def sync_only(config: RateLimitSettings) -> tuple[str, ...]:
    """The TLS options of ``config`` (in ``OPTIONS``, ``CONNECTION_POOL_KWARGS`` or the
    URL's query) that redis-py's sync client applies and its asyncio class refuses,
    where the asyncio client takes all the rest: those for which the async path runs
    the sync client in a worker thread. Empty if the asyncio client takes them all, or
    refuses something else too (an error, :class:`UnusableRedis`, for both paths)."""
    twin = _twin(config)
    names = _sync_tls_options(twin) if twin is not None else []
    if twin is None or not names or not _takes(twin, without=names):
        return ()
    return tuple(name for name in names if not _takes(twin, without=set(names) - {name}))


class _Twin(NamedTuple):
    url: str
    make: Callable[..., AsyncClient]
    options: dict[str, Any]


def _twin(config: RateLimitSettings) -> _Twin | None:
    """How the asyncio client of ``config`` is made; ``None`` if it has none."""
    kwargs = bounded(config)
    target = config.redis
    if isinstance(target, RedisServer):
        cls = AsyncRedisCluster if target.cluster else redis.asyncio.Redis
        options = {**kwargs, **target.options}
        return _Twin(target.url, cls.from_url, options)
    pool = cache_pool(target)
    if pool is None:
        return None
    url, options = pool
    return _Twin(url, redis.asyncio.Redis.from_url, {**kwargs, **options})


def _sync_tls_options(twin: _Twin) -> list[str]:
    """The :data:`SYNC_TLS_OPTIONS` ``twin`` gives (in its options or its URL's query),
    which the sync client applies (a cluster's passes them to its nodes' connections)."""
    try:
        given = {*twin.options, *parse_url(twin.url)}
    except ValueError:  # a URL redis-py cannot read: an error, for both
        return []
    return [name for name in SYNC_TLS_OPTIONS if name in given]


def _made(twin: _Twin, *, without: Collection[str] = ()) -> AsyncClient:
    """The asyncio client of ``twin`` (no network), made without the options ``without``
    names (in its options and its URL's query); else :class:`UnusableRedis` saying why."""
    url, options = twin.url, twin.options
    if without:
        parts = urlsplit(url)
        query = parse_qsl(parts.query, keep_blank_values=True)
        url = urlunsplit(parts._replace(query=urlencode([q for q in query if q[0] not in without])))
        options = {k: v for k, v in options.items() if k not in without}
    return client_for(url, twin.make, options)


def _takes(twin: _Twin, *, without: Collection[str]) -> bool:
    """Whether the asyncio client of ``twin`` is made without the options ``without``."""
    try:
        _made(twin, without=without)
    except UnusableRedis:
        return False
    return True
