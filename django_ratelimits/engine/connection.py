"""Getting the Redis client that the engine talks to.

``DJANGO_RATELIMITS['REDIS']`` (see :mod:`django_ratelimits.conf`) names one of:

* a django-redis cache alias (or ``None``: the ``default`` cache if it is a
  django-redis cache, else the first one in ``CACHES``). The client shares that
  cache's connection pool, so the cache's own OPTIONS (timeouts, sentinels,
  passwords) apply;
* a ``redis://``, ``rediss://`` or ``unix://`` URL, or a dict with ``URL``,
  ``CLUSTER`` and ``OPTIONS``: a client of our own with the bounded
  ``SOCKET_TIMEOUT`` / ``SOCKET_CONNECT_TIMEOUT`` and no retries.

Clients are made on first use and kept, one per settings value, until
``DJANGO_RATELIMITS`` or ``CACHES`` changes. Making a standalone client does
not touch the network; a cluster client reads the slot map when it is made,
and a failure there is raised as :class:`~django_ratelimits.engine.errors.BackendError`.
Configuration mistakes (a URL redis-py cannot read, an option it does not take
among them) raise :class:`UnusableRedis`: a system check error, and to a request a
Redis failure like any other.
"""

from __future__ import annotations

import functools
import inspect
import threading
from collections.abc import Callable, Mapping
from typing import Any, Final, TypeAlias, TypeVar

import redis
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.core.signals import setting_changed
from django.dispatch import receiver
from django.utils.module_loading import import_string
from redis.backoff import NoBackoff
from redis.cluster import REDIS_ALLOWED_KEYS, RedisCluster
from redis.connection import Connection, ConnectionPool, parse_url
from redis.exceptions import RedisClusterException
from redis.retry import Retry

from django_ratelimits.conf import SETTING_NAME, RateLimitSettings, RedisServer
from django_ratelimits.engine.errors import BackendError

__all__ = ["RedisClient", "UnusableRedis", "cache_pool", "client_for", "get_redis"]

RedisClient: TypeAlias = redis.Redis | RedisCluster

DJANGO_REDIS_BACKEND: Final = "django_redis.cache.RedisCache"
_DEFAULT_CLIENT: Final = "django_redis.client.DefaultClient"

_clients: dict[RateLimitSettings, RedisClient] = {}
# The settings object asked for last, and its client: every request asks for the same
# one, found without hashing the settings' thirty fields.
_last: tuple[RateLimitSettings, RedisClient] | None = None
_lock = threading.Lock()


def get_redis(config: RateLimitSettings) -> RedisClient:
    """The client for ``config``: the same object on every call with equal settings."""
    global _last
    last = _last
    if last is not None and last[0] is config:
        return last[1]
    client = _clients.get(config)
    if client is None:
        with _lock:
            client = _clients.get(config)
            if client is None:
                client = _clients[config] = _connect(config)
    _last = (config, client)
    return client


@receiver(setting_changed)
def _forget_clients(*, setting: str, **kwargs: object) -> None:
    """Drop cached clients when the settings they were made from change."""
    global _last
    if setting in (SETTING_NAME, "CACHES"):
        with _lock:
            _clients.clear()
            _last = None


class UnusableRedis(BackendError, ImproperlyConfigured):
    """The settings give no client the engine can use.

    A configuration error to the system checks (E003), and to a request a
    backend failure like any other: it fails open or closed, never a 500.
    """


def _connect(config: RateLimitSettings) -> RedisClient:
    target = config.redis
    try:
        if isinstance(target, RedisServer):
            return _from_server(target, config)
        return _from_cache(target if target is not None else default_alias())
    except UnusableRedis:
        raise
    except ImproperlyConfigured as error:
        raise UnusableRedis(str(error)) from error


def bounded(config: RateLimitSettings) -> dict[str, Any]:
    """Client options of every connection the engine makes: the settings' timeouts and
    no retries (a check re-sent after a timeout could be counted twice, and a retry
    loop would stretch the bounded timeouts)."""
    return {
        "socket_timeout": config.socket_timeout,
        "socket_connect_timeout": config.socket_connect_timeout,
        "retry": Retry(NoBackoff(), 0),
    }


_Client = TypeVar("_Client")


def client_for(url: str, make: Callable[..., _Client], options: Mapping[str, Any]) -> _Client:
    """``make(url, **options)``: the ``from_url`` of a redis-py client class, sync or
    asyncio, whose client the engine can use; otherwise :class:`UnusableRedis` saying why.

    redis-py raises ValueError for a URL part it cannot read (a port or a db that is no
    number, as an unexpanded ``${REDIS_PORT}`` leaves) and TypeError for an option (in
    OPTIONS or the URL's query) that its classes do not take. A standalone client makes
    its connections on first use, so one is made here, unconnected (no network): a
    mistyped option is found now, not by every request's connection.
    """
    name = f"{SETTING_NAME}['REDIS']"
    try:
        if parse_url(url).get("decode_responses"):  # redis-py decodes for any value
            raise _decoding_error(f"{name} URL")
        client = make(url, **options)
        _one_unconnected(client)
    except (TypeError, ValueError) as error:  # the message names the part, never the URL
        made = getattr(make, "__self__", make)  # the class whose from_url refused
        raise UnusableRedis(
            f"{name} gives no {made.__module__}.{made.__qualname__} client: {error}"
        ) from error
    return client


def _one_unconnected(client: object) -> None:
    """Make one connection of ``client``'s pool, unconnected (no network): redis-py
    raises TypeError for an option its connection class does not take only then, so
    every request's first connection would (a cluster client has no pool of its own).
    A value it refuses raises ValueError, or its own error for some (``protocol=4``,
    ``ssl_cert_reqs=bogus``): made without the network, that is a value too."""
    pool = getattr(client, "connection_pool", None)
    if pool is not None:
        try:
            pool.connection_class(**pool.connection_kwargs)
        except redis.RedisError as error:
            raise ValueError(str(error)) from error


def _from_server(server: RedisServer, config: RateLimitSettings) -> RedisClient:
    options = {**bounded(config), **server.options}
    if not server.cluster:
        return client_for(server.url, redis.Redis.from_url, options)
    try:
        return client_for(server.url, RedisCluster.from_url, _carrying(server.url, options))
    except (redis.RedisError, RedisClusterException) as error:
        raise BackendError(f"cannot reach the Redis Cluster: {error}") from error


def _carrying(url: str, options: dict[str, Any]) -> dict[str, Any]:
    """``options`` for redis-py's sync ``RedisCluster.from_url(url)``, made to reach its
    nodes whole. It gives its nodes' clients only the keywords it lists
    (``REDIS_ALLOWED_KEYS``) and drops the rest unsaid: ``ssl_min_version``,
    ``ssl_ciphers``, the OCSP options, ``health_check_interval`` in every version,
    ``ssl_ca_path`` and ``ssl_check_hostname`` in redis-py 5. Sync requests then talked
    to Redis with weaker TLS than configured, where the asyncio cluster client (and a
    standalone one) applied it. Those its nodes' connection class takes go to each
    node's pool through ``connection_pool_class`` (a keyword it does list), as a
    standalone client's pool gets them. What it still drops is no connection's: a
    mistyped name (the asyncio client refuses it: E003), ``single_connection_client``
    (likewise), or a setting of the asyncio cluster client's own."""
    try:
        given = {**options, **parse_url(url)}  # the URL's win, as in RedisCluster
    except ValueError:
        return options  # client_for says why
    connection = given.get("connection_class", Connection)
    takes = _parameters(connection) if isinstance(connection, type) else frozenset()
    carried = {
        name: value
        for name, value in given.items()
        if name not in REDIS_ALLOWED_KEYS
        and name not in _parameters(RedisCluster)
        and name in takes
    }
    base = options.get("connection_pool_class", ConnectionPool)
    if not carried or not (isinstance(base, type) and issubclass(base, ConnectionPool)):
        return options

    def __init__(self: ConnectionPool, **kwargs: Any) -> None:
        base.__init__(self, **{**carried, **kwargs})

    pool = type(f"Carrying{base.__name__}", (base,), {"__init__": __init__})
    return {**options, "connection_pool_class": pool}


@functools.cache
def _parameters(cls: type[Any]) -> frozenset[str]:
    """The keywords ``cls(...)`` takes by name: those of each ``__init__`` of its MRO
    (a connection class passes what it does not name to its base)."""
    return frozenset(
        name
        for klass in cls.__mro__
        if "__init__" in vars(klass)
        for name, parameter in inspect.signature(vars(klass)["__init__"]).parameters.items()
        if parameter.kind in (parameter.POSITIONAL_OR_KEYWORD, parameter.KEYWORD_ONLY)
    )


def _is_django_redis(cache: object) -> bool:
    """Whether a CACHES entry uses django-redis (or a subclass of its backend)."""
    if not isinstance(cache, Mapping):
        return False
    backend = cache.get("BACKEND")
    if backend == DJANGO_REDIS_BACKEND:
        return True
    try:
        backend_class = import_string(str(backend))
        django_redis_class = import_string(DJANGO_REDIS_BACKEND)
    except ImportError:
        return False
    return isinstance(backend_class, type) and issubclass(backend_class, django_redis_class)


def default_alias() -> str:
    """The CACHES alias used when REDIS is None: "default", else the first django-redis cache."""
    caches: Mapping[str, object] = settings.CACHES
    if _is_django_redis(caches.get("default")):
        return "default"
    for alias, cache in caches.items():
        if _is_django_redis(cache):
            return alias
    raise ImproperlyConfigured(
        f"{SETTING_NAME}['REDIS'] is not set and no cache in CACHES uses "
        f"{DJANGO_REDIS_BACKEND}: set {SETTING_NAME}['REDIS'] to a redis:// URL "
        "or add a django-redis cache"
    )


def _django_redis_cache(alias: str) -> Mapping[str, Any]:
    """The CACHES entry of ``alias``, a django-redis cache (else ImproperlyConfigured)."""
    name = f"{SETTING_NAME}['REDIS'] = {alias!r}"
    caches: Mapping[str, Any] = settings.CACHES
    if alias not in caches:
        raise ImproperlyConfigured(
            f"{name} names no cache in CACHES (the aliases are {', '.join(map(repr, caches))}) "
            "and is not a redis://, rediss:// or unix:// URL"
        )
    cache: Mapping[str, Any] = caches[alias]
    if not _is_django_redis(cache):
        raise ImproperlyConfigured(
            f"{name} names a cache that does not use {DJANGO_REDIS_BACKEND}; "
            "rate limits need a django-redis cache or a Redis URL"
        )
    return cache


def cache_pool(alias: str | None) -> tuple[str, dict[str, Any]] | None:
    """The URL and the options django-redis makes the pool of the cache ``alias`` with
    (``None``: the default one), those of the client :func:`get_redis` shares: for its
    twin of another redis-py class (the asyncio one). The URL is the first
    ``LOCATION``'s; the options are OPTIONS' ``USERNAME``, ``PASSWORD``,
    ``SOCKET_TIMEOUT`` and ``SOCKET_CONNECT_TIMEOUT``, then ``CONNECTION_POOL_KWARGS``
    (a password, a username, ``ssl_cert_reqs``...), as django-redis' own connection
    factory makes them. ``None`` when django-redis makes the pool another way (a client
    class, a connection factory or a pool class of its own: Sentinel, sharding), which
    no twin could follow."""
    try:
        cache = _django_redis_cache(alias if alias is not None else default_alias())
    except ImproperlyConfigured as error:
        raise UnusableRedis(str(error)) from error
    options: dict[str, Any] = dict(cache.get("OPTIONS", {}))
    if options.get("CLIENT_CLASS", _DEFAULT_CLIENT) != _DEFAULT_CLIENT:
        return None
    from django_redis.pool import ConnectionFactory, get_connection_factory

    factory = get_connection_factory(options=options)  # by name: 5.4 takes a path first
    if type(factory) is not ConnectionFactory or factory.pool_cls is not redis.ConnectionPool:
        return None
    location = cache["LOCATION"]
    if isinstance(location, str):
        location = location.split(",")
    params = factory.make_connection_params(str(location[0]).strip())
    params.update(factory.pool_cls_kwargs)
    del params["parser_class"]  # the sync client's: a twin takes its own
    return params.pop("url"), params


def _from_cache(alias: str) -> RedisClient:
    name = f"{SETTING_NAME}['REDIS'] = {alias!r}"
    _django_redis_cache(alias)
    from django_redis import get_redis_connection

    try:
        client: redis.Redis = get_redis_connection(alias)
        _one_unconnected(client)  # a mistyped CONNECTION_POOL_KWARGS key
    # A client class without get_client(); a LOCATION or an option redis-py refuses.
    except (NotImplementedError, TypeError, ValueError) as error:
        raise ImproperlyConfigured(f"{name}: {error}") from error
    if _decodes_responses(client):
        raise _decoding_error(name)
    return client


def _decodes_responses(client: RedisClient) -> bool:
    if isinstance(client, RedisCluster):
        return bool(client.encoder.decode_responses)
    return bool(client.connection_pool.connection_kwargs.get("decode_responses", False))


def _decoding_error(name: str) -> UnusableRedis:
    """The engine reads raw bytes; a client that decodes replies is a configuration error."""
    return UnusableRedis(
        f"{name} gives a client with decode_responses=True; rate limits need bytes replies"
    )
