"""Misconfigurations that would turn limiting off quietly are system check errors, all at once
(issue #9, findings 2, 7, 8 and 9); the request path never answers 500 because of them."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from django.core.checks import CheckMessage, run_checks
from django.test import AsyncClient, Client, override_settings

from devtools.redis_harness import dead_port
from django_ratelimits.checks import TAG
from django_ratelimits.conf import InvalidSettings, get_settings
from django_ratelimits.contrib.drf import PolicyThrottle
from django_ratelimits.engine.aconnection import make_async_redis
from django_ratelimits.models import Policy
from django_ratelimits.policies import get_registry
from django_ratelimits.signals import backend_failed
from tests.operations.test_checks import django_redis_cache

DEAD_URL = f"redis://127.0.0.1:{dead_port()}/0"


def found(check_id: str) -> list[CheckMessage]:
    return [m for m in run_checks(tags=[TAG]) if m.id == f"django_ratelimits.{check_id}"]


# --------------------------------------------------------------------------- E002: every problem


def test_three_invalid_settings_are_three_errors_in_one_run() -> None:
    bad = {"SOCKET_TIMEOUT": 0, "TRUSTED_PROXIES": "10.0.0.0/8", "KEY_PREFIX": "a b", "SHRDS": 2}
    with override_settings(DJANGO_RATELIMITS={"REDIS": DEAD_URL, **bad}):
        errors = found("E002")
        with pytest.raises(InvalidSettings) as raised:
            get_settings()
    assert len(errors) == 4 and all(e.is_serious() for e in errors)
    for key in ["SHRDS", "TRUSTED_PROXIES", "SOCKET_TIMEOUT", "KEY_PREFIX"]:
        assert [e for e in errors if f"'{key}'" in e.msg], key
    assert raised.value.problems == tuple(e.msg for e in errors)


def test_a_bad_redis_value_does_not_hide_the_other_problems() -> None:
    with override_settings(DJANGO_RATELIMITS={"REDIS": "ftp://x", "SHARDS": 0}):
        messages = [m.msg for m in found("E002")]
    assert len(messages) == 2
    assert "REDIS" in messages[0] and "SHARDS" in messages[1]


# --------------------------------------------------------------------------- E003: decoding URL


@pytest.mark.parametrize("value", ["True", "1", "False"])
@pytest.mark.parametrize("cluster", [False, True])
def test_a_url_asking_for_decoded_replies_is_an_error(value: str, cluster: bool) -> None:
    url = f"{DEAD_URL}?decode_responses={value}"  # redis-py decodes for any value, even False
    with override_settings(DJANGO_RATELIMITS={"REDIS": {"URL": url, "CLUSTER": cluster}}):
        errors = found("E003")
    assert len(errors) == 1
    assert "decode_responses" in errors[0].msg
    assert "even 'False'" in (errors[0].hint or "")


def test_a_url_without_decoding_passes() -> None:
    with override_settings(DJANGO_RATELIMITS={"REDIS": f"{DEAD_URL}?health_check_interval=5"}):
        assert found("E003") == []


@pytest.mark.django_db
@pytest.mark.parametrize("redis_client", ["standalone"], indirect=True)
def test_a_decoding_url_fails_requests_open_or_closed_never_500(
    site_redis: Any, redis_standalone: Any
) -> None:
    Policy.objects.create(name="open", rates="1/h", path=r"^/api/hello")
    Policy.objects.create(name="closed", rates="100/h", path=r"^/api/other", fail_closed=True)
    get_registry().refresh()
    failures: list[Any] = []
    backend_failed.connect(lambda **kw: failures.append(kw), weak=False, dispatch_uid="t-decode")
    url = f"{redis_standalone.url}?decode_responses=True"
    try:
        with override_settings(DJANGO_RATELIMITS={"REDIS": url}):
            client = Client()
            assert [client.get("/api/hello").status_code for _ in range(3)] == [200] * 3
            assert client.get("/api/other").status_code == 503
    finally:
        backend_failed.disconnect(dispatch_uid="t-decode")
    assert failures and "decode_responses" in str(failures[0]["error"])


# ------------------------------------------------------------ E003: a client redis-py refuses

# A port left as an unexpanded ${REDIS_PORT}, a db that is no number, an option mistyped (in
# OPTIONS or the query): redis-py raises ValueError or TypeError making the client or its
# first connection, so every check and every limited request would meet it.
UNPARSEABLE = {
    "port": ("redis://:s3cret@127.0.0.1:port/0", "Port could not be cast"),
    "db": (f"{DEAD_URL}?db=abc", "Invalid value for "),  # then 'db' or `db`, by redis-py
}
MISTYPED = {"max_conections": 50}


@pytest.mark.parametrize("cluster", [False, True], ids=["standalone", "cluster"])
@pytest.mark.parametrize("part", UNPARSEABLE)
def test_a_url_redis_py_cannot_read_is_an_error_naming_the_part(part: str, cluster: bool) -> None:
    url, said = UNPARSEABLE[part]
    with override_settings(DJANGO_RATELIMITS={"REDIS": {"URL": url, "CLUSTER": cluster}}):
        errors = found("E003")
    assert len(errors) == 1
    assert said in errors[0].msg and "s3cret" not in errors[0].msg
    assert "unexpanded" in (errors[0].hint or "")


@pytest.mark.parametrize("cluster", [False, True], ids=["standalone", "cluster"])
def test_a_mistyped_client_option_is_an_error_naming_it(cluster: bool) -> None:
    redis = {"URL": DEAD_URL, "CLUSTER": cluster, "OPTIONS": MISTYPED}
    with override_settings(DJANGO_RATELIMITS={"REDIS": redis}):
        errors = found("E003")
    assert len(errors) == 1 and "'max_conections'" in errors[0].msg


def test_a_mistyped_option_in_the_url_query_is_an_error_naming_it() -> None:
    with override_settings(DJANGO_RATELIMITS={"REDIS": f"{DEAD_URL}?max_conections=5"}):
        errors = found("E003")
    assert len(errors) == 1 and "'max_conections'" in errors[0].msg


@pytest.mark.parametrize("cluster", [False, True], ids=["standalone", "cluster"])
def test_options_redis_py_takes_pass(cluster: bool) -> None:
    options = {"max_connections": 50, "health_check_interval": 5, "client_name": "shop"}
    redis = {"URL": DEAD_URL, "CLUSTER": cluster, "OPTIONS": options}
    with override_settings(DJANGO_RATELIMITS={"REDIS": redis}):
        assert found("E003") == []


UNUSABLE = {
    "port": lambda url: url.rsplit(":", 1)[0] + ":port/0",
    "db": lambda url: f"{url}?db=abc",
    "option": lambda url: {"URL": url, "OPTIONS": MISTYPED},
    # Values redis-py refuses with its own error, not ValueError, making a connection.
    "protocol": lambda url: {"URL": url, "OPTIONS": {"protocol": 4}},
    "ssl_cert_reqs": lambda url: url.replace("redis://", "rediss://") + "?ssl_cert_reqs=bogus",
}


@pytest.mark.parametrize("mistake", ["protocol", "ssl_cert_reqs"])
def test_an_option_value_redis_py_refuses_with_its_own_error_is_e003(mistake: str) -> None:
    with override_settings(DJANGO_RATELIMITS={"REDIS": UNUSABLE[mistake](DEAD_URL)}):
        errors = found("E003")
    assert len(errors) == 1 and mistake.split("_")[0] in errors[0].msg.lower()


# ------------------------------------ I001: a TLS option only redis-py's sync client takes

# The OCSP options (no asyncio class of any redis-py version takes them), ssl_ca_path and
# ssl_password (not the asyncio cluster class, in any version): the async path runs the
# sync client in a worker thread, limited as sync requests are. They were E003, and
# async requests failed open.
DEAD_TLS = DEAD_URL.replace("redis://", "rediss://")
SYNC_ONLY: dict[str, tuple[object, bool]] = {
    "ssl_validate_ocsp": ({"URL": DEAD_TLS, "OPTIONS": {"ssl_validate_ocsp": False}}, False),
    "ssl_ocsp_context": ({"URL": DEAD_TLS, "OPTIONS": {"ssl_ocsp_context": None}}, False),
    "ssl_validate_ocsp_stapled": (f"{DEAD_TLS}?ssl_validate_ocsp_stapled=False", False),
    "ssl_ca_path": ({"URL": DEAD_TLS, "OPTIONS": {"ssl_ca_path": "/etc/ssl/certs"}}, True),
    "ssl_password": ({"URL": DEAD_TLS, "OPTIONS": {"ssl_password": "s3cret"}}, True),
}


@pytest.mark.parametrize("option", SYNC_ONLY)
def test_a_tls_option_only_the_sync_client_takes_is_info_not_an_error(option: str) -> None:
    target, cluster = SYNC_ONLY[option]
    if cluster:
        assert isinstance(target, dict)
        target = {**target, "CLUSTER": True}
    with override_settings(DJANGO_RATELIMITS={"REDIS": target}):
        assert found("E003") == []
        [info] = found("I001")
        assert make_async_redis(get_settings()) is None  # the async path: a thread
    assert not info.is_serious()
    assert option in info.msg and "worker thread" in info.msg
    assert "s3cret" not in info.msg + (info.hint or "")


def test_a_cache_s_tls_option_only_the_sync_client_takes_is_info() -> None:
    pool = {"CONNECTION_POOL_KWARGS": {"ssl_validate_ocsp": False, "ssl_cert_reqs": "none"}}
    caches = {"default": django_redis_cache(DEAD_TLS.replace("/0", "/11"), **pool)}
    with override_settings(CACHES=caches, DJANGO_RATELIMITS={"REDIS": "default"}):
        assert found("E003") == []
        [info] = found("I001")
        assert make_async_redis(get_settings()) is None
    assert "ssl_validate_ocsp" in info.msg


@pytest.mark.parametrize("option", ["ssl_validate_ocsp", "ssl_validate_ocsp_stapled"])
def test_an_ocsp_option_on_a_cluster_is_info_not_an_error(option: str) -> None:
    """redis-py's sync cluster client drops the OCSP options (it gives its nodes only the
    keywords it lists); the engine gives them to each node's pool, so the sync client
    applies them, and async requests run it in a worker thread. They were E003, and
    sync requests checked without them."""
    target = {"URL": DEAD_TLS, "CLUSTER": True, "OPTIONS": {option: False}}
    with override_settings(DJANGO_RATELIMITS={"REDIS": target}):
        assert found("E003") == []
        [info] = found("I001")
        assert make_async_redis(get_settings()) is None
    assert option in info.msg


@pytest.mark.parametrize("cluster", [False, True], ids=["standalone", "cluster"])
def test_a_mistyped_option_beside_a_sync_only_one_is_still_an_error(cluster: bool) -> None:
    options = {"ssl_password" if cluster else "ssl_validate_ocsp": False, **MISTYPED}
    target = {"URL": DEAD_TLS, "CLUSTER": cluster, "OPTIONS": options}
    with override_settings(DJANGO_RATELIMITS={"REDIS": target}):
        [error] = found("E003")
        assert found("I001") == []
    assert "'max_conections'" in error.msg


def open_and_closed_policies() -> None:
    Policy.objects.create(name="open", rates="1/h", path=r"^/api/hello")
    Policy.objects.create(name="closed", rates="100/h", path=r"^/api/other", fail_closed=True)
    get_registry().refresh()


def assert_fail_open_or_closed() -> None:
    """Sync and async requests meet the unusable client as a Redis fault: the fail-open
    policy lets them through, the fail-closed one answers 503; never a 500."""
    client = Client()
    assert [client.get("/api/hello").status_code for _ in range(3)] == [200] * 3
    assert client.get("/api/other").status_code == 503

    async def run() -> list[int]:
        return [(await AsyncClient().get("/async")).status_code for _ in range(3)]

    assert asyncio.run(run()) == [200] * 3


@pytest.mark.django_db
@pytest.mark.parametrize("redis_client", ["standalone"], indirect=True)
@pytest.mark.parametrize("mistake", UNUSABLE)
def test_a_client_redis_py_refuses_fails_requests_open_or_closed_never_500(
    site_redis: Any, redis_standalone: Any, mistake: str
) -> None:
    open_and_closed_policies()
    failures: list[Any] = []
    backend_failed.connect(lambda **kw: failures.append(kw), weak=False, dispatch_uid="t-refuse")
    try:
        redis = UNUSABLE[mistake](redis_standalone.url)
        with override_settings(DJANGO_RATELIMITS={"REDIS": redis}):
            assert_fail_open_or_closed()
    finally:
        backend_failed.disconnect(dispatch_uid="t-refuse")
    assert failures and "gives no" in str(failures[0]["error"])  # then the breaker opens


@pytest.mark.django_db
@pytest.mark.parametrize("redis_client", ["cluster"], indirect=True)
def test_a_cluster_option_only_the_asyncio_client_refuses_fails_async_requests_open(
    site_redis: Any, redis_cluster: Any
) -> None:
    # The sync RedisCluster drops keywords it does not know; the asyncio one raises.
    redis = {"URL": redis_cluster.url, "CLUSTER": True, "OPTIONS": MISTYPED}
    with override_settings(DJANGO_RATELIMITS={"REDIS": redis}):

        async def run() -> list[int]:
            return [(await AsyncClient().get("/async")).status_code for _ in range(3)]

        assert asyncio.run(run()) == [200] * 3


# --------------------------------------------------------------------------- E006: unknown names


class DefaultThrottle(PolicyThrottle):
    policy = "typo-default"


TYPOS = {"ROOT_URLCONF": "tests.typo_urls", "DJANGO_RATELIMITS": {"REDIS": DEAD_URL}}
DEFAULT_THROTTLE = {
    "DEFAULT_THROTTLE_CLASSES": ["tests.operations.test_checks_bypass.DefaultThrottle"]
}


@pytest.mark.django_db
def test_every_decorator_and_throttle_naming_a_missing_policy_is_an_error_in_one_run() -> None:
    Policy.objects.create(name="kept-in-admin", rates="1/m", enabled=False)
    with override_settings(**TYPOS, REST_FRAMEWORK=DEFAULT_THROTTLE):
        errors = found("E006")
    assert sorted(e.obj for e in errors) == [
        "django_ratelimits.contrib.drf.PolicyThrottle on tests.typo_urls.TypoApi",
        "tests.operations.test_checks_bypass.DefaultThrottle",
        "tests.typo_urls.ReportThrottle on tests.typo_urls.report",
        "tests.typo_urls.search",
    ]
    assert all(e.is_serious() and "limits nothing" in e.msg for e in errors)
    assert "'serach'" in next(e.msg for e in errors if e.obj == "tests.typo_urls.search")


@pytest.mark.django_db
def test_manage_py_check_fails_naming_the_typo() -> None:
    from django.core.management import call_command
    from django.core.management.base import SystemCheckError

    with override_settings(**TYPOS), pytest.raises(SystemCheckError) as raised:
        call_command("check", tags=[TAG])
    assert "'serach'" in str(raised.value) and "'kept-in-admin'" in str(raised.value)


@pytest.mark.django_db
def test_names_that_exist_in_code_or_in_the_table_pass() -> None:
    for name in ("serach", "kept-in-admin", "typo-api", "typo-report"):
        Policy.objects.create(name=name, rates="1/m")
    with override_settings(**TYPOS):
        assert found("E006") == []


def test_an_unreadable_policy_table_is_a_warning_not_a_crash() -> None:
    # No django_db mark: pytest-django refuses every query, as a missing database would.
    with override_settings(**TYPOS):
        warnings = found("W004")
    assert len(warnings) == 1 and not warnings[0].is_serious()
    assert "serach" in warnings[0].msg and "migrate" in (warnings[0].hint or "")


@pytest.mark.django_db
@pytest.mark.parametrize("redis_client", ["standalone"], indirect=True)
def test_an_unknown_name_is_logged_once_however_many_requests_use_it(
    site_redis: Any, caplog: pytest.LogCaptureFixture
) -> None:
    from django.conf import settings

    from django_ratelimits import decide as limiter_module

    limiter_module._reported.clear()
    config = {**settings.DJANGO_RATELIMITS, "POLICY_REFRESH": 3600}
    with (
        override_settings(ROOT_URLCONF="tests.typo_urls", DJANGO_RATELIMITS=config),
        caplog.at_level("ERROR", logger="django_ratelimits"),
    ):
        client = Client()
        assert [client.get("/nested/search").status_code for _ in range(20)] == [200] * 20
        assert client.get("/api").status_code == 200
    logged = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert len([m for m in logged if "'serach'" in m]) == 1
    assert len([m for m in logged if "'typo-api'" in m]) == 1


@pytest.mark.django_db
@pytest.mark.parametrize("redis_client", ["standalone"], indirect=True)
def test_a_cache_whose_pool_options_redis_py_refuses_fails_requests_open_never_500(
    site_redis: Any, redis_standalone: Any
) -> None:
    """A django-redis cache alias whose ``CONNECTION_POOL_KWARGS`` holds a typo: the pool
    is made, and the first connection raises TypeError. Every limited request met it."""
    from django.core.cache import caches
    from django_redis.pool import ConnectionFactory

    # A LOCATION of its own: django-redis keeps one pool per LOCATION for the process.
    location = redis_standalone.url.rsplit("/", 1)[0] + "/13"
    cache = {
        "BACKEND": "django_redis.cache.RedisCache",
        "LOCATION": location,
        "OPTIONS": {"CONNECTION_POOL_KWARGS": MISTYPED},
    }
    open_and_closed_policies()
    with override_settings(
        CACHES={
            "typo": cache,
            "default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"},
        },
        DJANGO_RATELIMITS={"REDIS": "typo"},
    ):
        try:
            [error] = found("E003")
            assert "'max_conections'" in error.msg
            assert_fail_open_or_closed()
        finally:
            caches["typo"].close()
            ConnectionFactory._pools.pop(location, None)


# --------------------------------------------------------------------------- W007: no timeouts


def _cache(**options: Any) -> dict[str, Any]:
    return {
        "BACKEND": "django_redis.cache.RedisCache",
        "LOCATION": DEAD_URL,
        "OPTIONS": options,
    }


@pytest.mark.parametrize(
    ("cache", "missing"),
    [
        (_cache(), ["SOCKET_CONNECT_TIMEOUT", "SOCKET_TIMEOUT"]),
        (_cache(SOCKET_CONNECT_TIMEOUT=0.25), ["SOCKET_TIMEOUT"]),
        (_cache(CONNECTION_POOL_KWARGS={"socket_timeout": 1}), ["SOCKET_CONNECT_TIMEOUT"]),
        (_cache(SOCKET_CONNECT_TIMEOUT=0.25, SOCKET_TIMEOUT=0.25), []),
        ({**_cache(), "LOCATION": f"{DEAD_URL}?socket_timeout=1&socket_connect_timeout=1"}, []),
    ],
)
def test_a_cache_without_socket_timeouts_is_a_warning(
    cache: dict[str, Any], missing: list[str]
) -> None:
    """A hung Redis (stopped, swapping) holds every limited request as long as the
    operating system lets it when the cache the limits use sets no timeouts, which is
    django-redis' default; the package's SOCKET_TIMEOUT applies to URL clients only."""
    with override_settings(CACHES={"default": cache}, DJANGO_RATELIMITS={}):
        warnings = found("W007")
    assert [
        name
        for name in ("SOCKET_CONNECT_TIMEOUT", "SOCKET_TIMEOUT")
        if any(name in w.msg for w in warnings)
    ] == missing
    assert len(warnings) == (1 if missing else 0)


def test_a_url_of_its_own_takes_the_packages_timeouts() -> None:
    with override_settings(CACHES={"default": _cache()}, DJANGO_RATELIMITS={"REDIS": DEAD_URL}):
        assert found("W007") == []
