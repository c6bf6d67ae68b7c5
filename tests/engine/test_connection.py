"""Getting Redis: cache aliases, URLs, unix sockets, a cluster and Sentinel, all real servers."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from django.core.exceptions import ImproperlyConfigured
from django.test import override_settings
from django_redis import get_redis_connection
from redis.cluster import RedisCluster
from redis.retry import Retry
from redis.sentinel import SentinelConnectionPool

from devtools.redis_harness import RedisClusterHarness, dead_port
from devtools.redis_harness import RedisServer as HarnessServer
from django_ratelimits.conf import RateLimitSettings, RedisServer, get_settings
from django_ratelimits.engine import Check, Engine, Identity, KeySpace, Limit, wire
from django_ratelimits.engine.connection import get_redis
from django_ratelimits.exceptions import BackendError
from django_ratelimits.rates import parse_rates

LOCMEM = {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}


def django_redis_cache(location: str, **options: Any) -> dict[str, Any]:
    # django-redis keeps one pool per LOCATION for the whole process, whatever the
    # OPTIONS: tests that check OPTIONS use a LOCATION (database) of their own.
    return {"BACKEND": "django_redis.cache.RedisCache", "LOCATION": location, "OPTIONS": options}


def redis_for(**setting: Any) -> redis.Redis | RedisCluster:
    """``get_redis`` for the current settings with ``DJANGO_RATELIMITS = setting``."""
    with override_settings(DJANGO_RATELIMITS=setting):
        return get_redis(get_settings())


def attempts(retry: Retry) -> int:
    """How often ``retry`` runs an operation that always fails to connect (1: no retry).

    Asked of the behaviour, not of ``Retry.get_retries``, which redis-py 5.0 lacks."""
    calls = 0

    def fail() -> None:
        nonlocal calls
        calls += 1
        raise redis.ConnectionError("refused")

    with pytest.raises(redis.ConnectionError):
        retry.call_with_retry(fail, lambda error: None)
    return calls


def pool_of(client: redis.Redis | RedisCluster) -> redis.ConnectionPool:
    assert isinstance(client, redis.Redis)
    return client.connection_pool


def round_trip(client: redis.Redis | RedisCluster) -> None:
    """A real SET / GET / DEL through ``client``; replies are bytes."""
    key = f"test-connection:{uuid.uuid4().hex}"
    assert client.set(key, "v", ex=60)
    assert client.get(key) == b"v"
    client.delete(key)


# --------------------------------------------------------------------------- cache aliases


def test_default_alias_shares_the_django_redis_pool(redis_standalone: HarnessServer) -> None:
    with override_settings(CACHES={"default": django_redis_cache(redis_standalone.url)}):
        client = get_redis(get_settings())
        assert isinstance(client, redis.Redis)
        assert pool_of(client) is get_redis_connection("default").connection_pool
        round_trip(client)


def test_default_resolution_takes_the_first_django_redis_cache(
    redis_standalone: HarnessServer,
) -> None:
    caches = {
        "default": LOCMEM,
        "other": LOCMEM,
        "limits": django_redis_cache(redis_standalone.url),
        "later": django_redis_cache("redis://127.0.0.1:1/0"),
    }
    with override_settings(CACHES=caches):
        client = get_redis(get_settings())
        assert pool_of(client) is get_redis_connection("limits").connection_pool
        round_trip(client)


def test_named_alias(redis_standalone: HarnessServer) -> None:
    caches = {
        "default": django_redis_cache("redis://127.0.0.1:1/0"),
        "limits": django_redis_cache(redis_standalone.url),
    }
    with override_settings(CACHES=caches):
        client = redis_for(REDIS="limits")
        assert pool_of(client) is get_redis_connection("limits").connection_pool
        round_trip(client)


def test_an_alias_keeps_the_timeouts_of_its_cache(redis_standalone: HarnessServer) -> None:
    location = redis_standalone.url.replace("/0", "/7")
    cache = django_redis_cache(location, SOCKET_TIMEOUT=0.5, SOCKET_CONNECT_TIMEOUT=0.75)
    with override_settings(CACHES={"default": cache}):
        client = redis_for(SOCKET_TIMEOUT=2)
    assert isinstance(client, redis.Redis)
    kwargs = pool_of(client).connection_kwargs
    assert (kwargs["socket_timeout"], kwargs["socket_connect_timeout"]) == (0.5, 0.75)


def test_the_engine_s_own_connections_keep_the_settings_of_the_cache(
    redis_standalone: HarnessServer,
) -> None:
    # The check's command goes over connections of the engine's own (engine/wire.py),
    # made like the pool's: the same database and timeouts.
    location = redis_standalone.url.replace("/0", "/7")
    cache = django_redis_cache(location, SOCKET_TIMEOUT=0.5, SOCKET_CONNECT_TIMEOUT=0.75)
    with override_settings(CACHES={"default": cache}):
        client = redis_for()
    engine = Engine(client, keys=KeySpace(prefix=f"own{uuid.uuid4().hex[:8]}"))
    assert isinstance(engine._line, wire.Own)
    checks = [Check(Identity("ip", "192.0.2.7"), [Limit("api", parse_rates("2/h")[0])])]
    assert [engine.check(checks).allowed for _ in range(3)] == [True, True, False]
    [kept] = engine._line._idle
    connection: Any = kept.connection
    assert (connection.db, connection.socket_timeout, connection.socket_connect_timeout) == (
        7,
        0.5,
        0.75,
    )
    with redis_standalone.client(db=7) as direct:
        assert direct.exists(engine.keys.of(checks[0].identity).state)


def test_no_django_redis_cache_is_a_configuration_error() -> None:
    with (
        override_settings(CACHES={"default": LOCMEM}),
        pytest.raises(ImproperlyConfigured) as caught,
    ):
        get_redis(get_settings())
    assert str(caught.value) == (
        "DJANGO_RATELIMITS['REDIS'] is not set and no cache in CACHES uses "
        "django_redis.cache.RedisCache: set DJANGO_RATELIMITS['REDIS'] to a redis:// URL "
        "or add a django-redis cache"
    )


def test_an_alias_of_another_backend_is_a_configuration_error() -> None:
    with (
        override_settings(CACHES={"default": LOCMEM}),
        pytest.raises(ImproperlyConfigured) as caught,
    ):
        redis_for(REDIS="default")
    assert str(caught.value) == (
        "DJANGO_RATELIMITS['REDIS'] = 'default' names a cache that does not use "
        "django_redis.cache.RedisCache; rate limits need a django-redis cache or a Redis URL"
    )


def test_a_missing_alias_is_a_configuration_error_listing_the_aliases() -> None:
    with (
        override_settings(CACHES={"default": LOCMEM, "sessions": LOCMEM}),
        pytest.raises(ImproperlyConfigured) as caught,
    ):
        redis_for(REDIS="ratelimits")
    assert str(caught.value) == (
        "DJANGO_RATELIMITS['REDIS'] = 'ratelimits' names no cache in CACHES "
        "(the aliases are 'default', 'sessions') and is not a redis://, rediss:// or unix:// URL"
    )


def test_an_alias_that_decodes_responses_is_a_configuration_error(
    redis_standalone: HarnessServer,
) -> None:
    location = redis_standalone.url.replace("/0", "/8")
    cache = django_redis_cache(location, CONNECTION_POOL_KWARGS={"decode_responses": True})
    with override_settings(CACHES={"limits": cache}), pytest.raises(ImproperlyConfigured) as caught:
        redis_for(REDIS="limits")
    assert "decode_responses=True; rate limits need bytes replies" in str(caught.value)


# --------------------------------------------------------------------------- URLs


def test_url_client_has_bounded_timeouts_and_no_retries(redis_standalone: HarnessServer) -> None:
    client = redis_for(REDIS=redis_standalone.url)
    assert isinstance(client, redis.Redis)
    kwargs = pool_of(client).connection_kwargs
    assert (kwargs["socket_timeout"], kwargs["socket_connect_timeout"]) == (0.25, 0.25)
    assert attempts(kwargs["retry"]) == 1
    assert (kwargs["host"], kwargs["port"]) == (redis_standalone.host, redis_standalone.port)
    round_trip(client)


def test_url_client_takes_the_timeout_settings(redis_standalone: HarnessServer) -> None:
    client = redis_for(
        REDIS={"URL": redis_standalone.url, "OPTIONS": {"client_name": "rl-test"}},
        SOCKET_TIMEOUT=1.5,
        SOCKET_CONNECT_TIMEOUT=0.5,
    )
    kwargs = pool_of(client).connection_kwargs
    assert (kwargs["socket_timeout"], kwargs["socket_connect_timeout"]) == (1.5, 0.5)
    assert client.client_getname() == "rl-test"


def test_url_client_is_made_without_touching_the_network() -> None:
    port = dead_port()  # every connection there is refused
    client = redis_for(REDIS=f"redis://127.0.0.1:{port}/0")
    with pytest.raises(redis.ConnectionError):
        client.ping()


def test_a_url_that_decodes_responses_is_a_configuration_error(
    redis_standalone: HarnessServer,
) -> None:
    with pytest.raises(ImproperlyConfigured, match="decode_responses=True"):
        redis_for(REDIS=f"{redis_standalone.url}?decode_responses=True")


def test_unix_socket_url(redis_binary: Path, tmp_path: Path) -> None:
    socket_path = tmp_path / "redis.sock"
    server = HarnessServer(
        tmp_path,
        binary=redis_binary,
        name="unix-socket",
        extra_args=["--unixsocket", str(socket_path), "--unixsocketperm", "700"],
    )
    server.start()
    try:
        client = redis_for(REDIS=f"unix://{socket_path}?db=3")
        assert isinstance(client, redis.Redis)
        kwargs = pool_of(client).connection_kwargs
        assert (kwargs["path"], kwargs["db"], kwargs["socket_timeout"]) == (
            str(socket_path),
            3,
            0.25,
        )
        round_trip(client)
        client.close()
    finally:
        server.stop()


# --------------------------------------------------------------------------- caching


def test_the_client_is_made_once_per_settings(redis_standalone: HarnessServer) -> None:
    with override_settings(DJANGO_RATELIMITS={"REDIS": redis_standalone.url}):
        first = get_redis(get_settings())
        assert get_redis(get_settings()) is first
        assert get_redis(RateLimitSettings(redis=RedisServer(redis_standalone.url))) is first
        with override_settings(DJANGO_RATELIMITS={"REDIS": redis_standalone.url, "SHARDS": 2}):
            assert get_redis(get_settings()) is not first
    assert redis_for(REDIS=redis_standalone.url) is not first


def test_changing_caches_forgets_alias_clients(redis_standalone: HarnessServer) -> None:
    with override_settings(CACHES={"default": django_redis_cache(redis_standalone.url)}):
        config = get_settings()
        first = get_redis(config)
        assert get_redis(config) is first
    with override_settings(
        CACHES={"default": django_redis_cache(redis_standalone.url.replace("/0", "/1"))}
    ):
        assert get_redis(config) is not first


# --------------------------------------------------------------------------- Redis Cluster


@pytest.fixture
def cluster_client(redis_cluster: RedisClusterHarness) -> Iterator[RedisCluster]:
    client = redis_for(REDIS={"URL": redis_cluster.url, "CLUSTER": True})
    assert isinstance(client, RedisCluster)
    yield client
    client.close()


def test_cluster_client_reaches_every_master(
    redis_cluster: RedisClusterHarness, cluster_client: RedisCluster
) -> None:
    masters = {f"{host}:{port}" for host, port in redis_cluster.nodes}
    assert {node.name for node in cluster_client.get_primaries()} == masters
    keys_by_master: dict[str, str] = {}
    for n in range(1000):
        key = f"test-connection:{n}"
        node = cluster_client.get_node_from_key(key)
        keys_by_master.setdefault(node.name, key)
    assert set(keys_by_master) == masters
    for key in keys_by_master.values():
        assert cluster_client.set(key, key, ex=60)
    for master, key in keys_by_master.items():
        assert cluster_client.get(key) == key.encode()
        host, port = master.rsplit(":", 1)
        with redis.Redis(host=host, port=int(port)) as node_client:
            assert node_client.get(key) == key.encode()  # stored on that very master
        cluster_client.delete(key)


def test_cluster_client_has_bounded_timeouts_and_no_retries(cluster_client: RedisCluster) -> None:
    kwargs = cluster_client.nodes_manager.connection_kwargs
    assert (kwargs["socket_timeout"], kwargs["socket_connect_timeout"]) == (0.25, 0.25)
    assert attempts(cluster_client.retry) == 1
    for node in cluster_client.get_nodes():
        assert node.redis_connection is not None
        pool_kwargs = node.redis_connection.connection_pool.connection_kwargs
        assert pool_kwargs["socket_timeout"] == 0.25


def test_cluster_options_reach_the_client(redis_cluster: RedisClusterHarness) -> None:
    client = redis_for(
        REDIS={"URL": redis_cluster.url, "CLUSTER": True, "OPTIONS": {"client_name": "rl-cl"}}
    )
    assert isinstance(client, RedisCluster)
    assert client.client_getname() == "rl-cl"
    client.close()


def test_an_unreachable_cluster_is_a_backend_error_not_a_configuration_error() -> None:
    port = dead_port()
    with override_settings(
        DJANGO_RATELIMITS={"REDIS": {"URL": f"redis://127.0.0.1:{port}", "CLUSTER": True}}
    ):
        config = get_settings()
        for _ in range(2):  # a failure is not cached: the next call tries again
            with pytest.raises(BackendError, match="cannot reach the Redis Cluster"):
                get_redis(config)


# --------------------------------------------------------------------------- Sentinel


class SentinelServer(HarnessServer):
    """``redis-server sentinel.conf --sentinel`` watching one primary."""

    def __init__(self, workdir: Path, *, binary: Path, primary: HarnessServer) -> None:
        super().__init__(workdir, binary=binary, name="sentinel")
        self.config_path = self.workdir / "sentinel.conf"
        self.config_path.write_text(
            f"sentinel monitor mymaster {primary.host} {primary.port} 1\n"
            "sentinel down-after-milliseconds mymaster 60000\n"
        )

    def command_line(self) -> list[str]:
        binary, *options = super().command_line()
        # Sentinel needs its (writable) config file first; it ignores the save options.
        return [binary, str(self.config_path), "--sentinel", *options]


def test_sentinel_alias(
    redis_binary: Path, redis_standalone: HarnessServer, tmp_path: Path
) -> None:
    sentinel = SentinelServer(tmp_path, binary=redis_binary, primary=redis_standalone)
    sentinel.start()
    cache = django_redis_cache(
        "redis://mymaster/0",
        CLIENT_CLASS="django_redis.client.SentinelClient",
        CONNECTION_FACTORY="django_redis.pool.SentinelConnectionFactory",
        SENTINELS=[(sentinel.host, sentinel.port)],
        SOCKET_TIMEOUT=0.5,
        SOCKET_CONNECT_TIMEOUT=0.5,
    )
    try:
        with override_settings(CACHES={"default": LOCMEM, "limits": cache}):
            client = redis_for(REDIS="limits")
            assert isinstance(pool_of(client), SentinelConnectionPool)
            assert pool_of(client) is get_redis_connection("limits").connection_pool
            key = f"test-connection:{uuid.uuid4().hex}"
            assert client.set(key, "via-sentinel", ex=60)
            with redis_standalone.client() as direct:  # it went to the monitored primary
                assert direct.get(key) == b"via-sentinel"
                direct.delete(key)
            # A check takes the engine's short way (engine/wire.py) through the
            # Sentinel pool, to the primary, like any command.
            engine = Engine(client, keys=KeySpace(prefix=f"sentinel{uuid.uuid4().hex[:8]}"))
            assert isinstance(engine._line, wire.Pooled)
            limits = [Limit("api", rate) for rate in parse_rates("2/h")]
            checks = [Check(Identity("ip", "192.0.2.9"), limits)]
            assert [engine.check(checks).allowed for _ in range(3)] == [True, True, False]
            with redis_standalone.client() as direct:
                assert direct.exists(engine.keys.of(checks[0].identity).state)
            client.close()
    finally:
        sentinel.stop()
