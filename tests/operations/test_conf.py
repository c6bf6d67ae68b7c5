"""``settings.DJANGO_RATELIMITS``: defaults, overrides, validation, the cache."""

from __future__ import annotations

import re
from pathlib import Path
from types import MappingProxyType
from typing import Any

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.test import override_settings
from pytest_django import Settings

from django_ratelimits.conf import DEFAULTS, RateLimitSettings, RedisServer, get_settings
from django_ratelimits.rates import Rate

DOCS = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"


def settings_from(value: object) -> RateLimitSettings:
    with override_settings(DJANGO_RATELIMITS=value):
        return get_settings()


def test_missing_setting_gives_the_defaults(settings: Settings) -> None:
    if hasattr(settings, "DJANGO_RATELIMITS"):
        del settings.DJANGO_RATELIMITS
    get_settings.cache_clear()  # deleting a setting sends no setting_changed
    try:
        assert get_settings() == RateLimitSettings()
    finally:
        get_settings.cache_clear()


def test_defaults() -> None:
    config = settings_from({})
    assert config == RateLimitSettings()
    assert config.redis is None
    assert config.key_prefix == "rl"
    assert config.socket_timeout == 0.25
    assert config.socket_connect_timeout == 0.25
    assert config.shards == 64
    assert config.metadata_max_entries == 50
    assert config.metadata_ttl == 3600
    assert config.offender_retention == 86_400
    assert config.offender_index_max == 1_000_000


def test_defaults_by_setting_name() -> None:
    assert dict(DEFAULTS) == {
        "REDIS": None,
        "KEY_PREFIX": "rl",
        "SOCKET_TIMEOUT": 0.25,
        "SOCKET_CONNECT_TIMEOUT": 0.25,
        "SHARDS": 64,
        "METADATA_MAX_ENTRIES": 50,
        "METADATA_TTL": 3600,
        "OFFENDER_RETENTION": 86_400,
        "OFFENDER_INDEX_MAX": 1_000_000,
        "ENABLED": True,
        "TRUSTED_PROXIES": (),
        "CLIENT_IP_HEADER": "X-Forwarded-For",
        "IPV4_PREFIX": 32,
        "IPV6_PREFIX": 64,
        "POLICY_REFRESH": 2.0,
        "HEADERS_ON_ALLOWED": True,
        "RESPONSE_VIEW": None,
        "BLOCKED_RESPONSE_VIEW": None,
        "FAIL_CLOSED_STATUS": 503,
        "BREAKER_FAILURES": 3,
        "BREAKER_COOLDOWN": 5.0,
        "DENIAL_CACHE": 10_000,
        "IDENTITY_BUDGET": "50/h",
        "SHARD_SECRET": None,
        "KEY_FUNCTIONS": (),
        "HASH_IPS": False,
        "METRICS": False,
        "METRICS_TOKEN": None,
    }


def test_override_merges_over_the_defaults() -> None:
    config = settings_from({"KEY_PREFIX": "shop.rl", "SHARDS": 8, "SOCKET_TIMEOUT": 1})
    assert config == RateLimitSettings(key_prefix="shop.rl", shards=8, socket_timeout=1)
    assert config.metadata_ttl == 3600


def test_result_is_cached_and_cleared_when_the_setting_changes() -> None:
    before = get_settings()
    assert get_settings() is before
    with override_settings(DJANGO_RATELIMITS={"SHARDS": 2}):
        inside = get_settings()
        assert inside.shards == 2
        assert get_settings() is inside
    after = get_settings()
    assert after == before
    assert after is not inside


def test_other_settings_do_not_clear_the_cache() -> None:
    before = get_settings()
    with override_settings(USE_TZ=False):
        assert get_settings() is before


def test_settings_are_hashable_and_compare_by_value() -> None:
    one = settings_from({"REDIS": {"URL": "redis://h:1", "OPTIONS": {"db": 2}}})
    two = settings_from({"REDIS": {"URL": "redis://h:1", "OPTIONS": {"db": 2}}})
    assert one == two
    assert hash(one) == hash(two)
    assert one != settings_from({"REDIS": {"URL": "redis://h:1", "OPTIONS": {"db": 3}}})


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, None),
        ("sessions", "sessions"),
        ("redis://127.0.0.1:6379/1", RedisServer("redis://127.0.0.1:6379/1")),
        ("rediss://secure:6380", RedisServer("rediss://secure:6380")),
        ("unix:///run/redis.sock?db=2", RedisServer("unix:///run/redis.sock?db=2")),
        ({"URL": "redis://h:1"}, RedisServer("redis://h:1")),
        (
            {"URL": "redis://h:1", "CLUSTER": True, "OPTIONS": {"password": "x"}},
            RedisServer("redis://h:1", cluster=True, options={"password": "x"}),
        ),
        (
            {"URL": "redis://h:1", "OPTIONS": {"decode_responses": False}},
            RedisServer("redis://h:1", options={"decode_responses": False}),
        ),
    ],
)
def test_redis_forms(value: object, expected: object) -> None:
    assert settings_from({"REDIS": value}).redis == expected


def test_redis_options_are_frozen_copies() -> None:
    options: dict[str, Any] = {"db": 1}
    config = settings_from({"REDIS": {"URL": "redis://h:1", "OPTIONS": options}})
    options["db"] = 2
    assert isinstance(config.redis, RedisServer)
    assert isinstance(config.redis.options, MappingProxyType)
    assert config.redis.options == {"db": 1}


VALID_KEYS = (
    "REDIS, KEY_PREFIX, SOCKET_TIMEOUT, SOCKET_CONNECT_TIMEOUT, SHARDS, "
    "METADATA_MAX_ENTRIES, METADATA_TTL, OFFENDER_RETENTION, OFFENDER_INDEX_MAX"
)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (["REDIS"], "DJANGO_RATELIMITS must be a dict, not list"),
        (
            {"SHARD": 4},
            f"DJANGO_RATELIMITS has an unknown key 'SHARD' (did you mean 'SHARDS'?); "
            f"the valid keys are {VALID_KEYS}",
        ),
        (
            {"key_prefix": "x"},
            "DJANGO_RATELIMITS has an unknown key 'key_prefix' (did you mean 'KEY_PREFIX'?); "
            f"the valid keys are {VALID_KEYS}",
        ),
        ({"BACKEND": "x"}, "DJANGO_RATELIMITS has an unknown key 'BACKEND'; the valid keys are"),
        (
            {"KEY_PREFIX": ""},
            "DJANGO_RATELIMITS['KEY_PREFIX'] must be 1 to 16 characters from A-Z, a-z, 0-9, "
            "'_', '.' and '-', not str ''",
        ),
        ({"KEY_PREFIX": "a{b}"}, "DJANGO_RATELIMITS['KEY_PREFIX'] must be 1 to 16 characters"),
        ({"KEY_PREFIX": "rl\n"}, "not str 'rl\\n'"),
        ({"KEY_PREFIX": "x" * 17}, "DJANGO_RATELIMITS['KEY_PREFIX'] must be 1 to 16 characters"),
        ({"KEY_PREFIX": 5}, "DJANGO_RATELIMITS['KEY_PREFIX'] must be 1 to 16 characters"),
        (
            {"SHARDS": 0},
            "DJANGO_RATELIMITS['SHARDS'] must be an integer from 1 to 1024, not int 0",
        ),
        ({"SHARDS": 1025}, "DJANGO_RATELIMITS['SHARDS'] must be an integer from 1 to 1024"),
        (
            {"SHARDS": "64"},
            "DJANGO_RATELIMITS['SHARDS'] must be an integer from 1 to 1024, not str",
        ),
        ({"SHARDS": 64.0}, "DJANGO_RATELIMITS['SHARDS'] must be an integer from 1 to 1024"),
        ({"SHARDS": True}, "DJANGO_RATELIMITS['SHARDS'] must be an integer from 1 to 1024"),
        (
            {"SOCKET_TIMEOUT": 0},
            "DJANGO_RATELIMITS['SOCKET_TIMEOUT'] must be a number from 0.001 to 60, not int 0",
        ),
        ({"SOCKET_TIMEOUT": None}, "DJANGO_RATELIMITS['SOCKET_TIMEOUT'] must be a number"),
        ({"SOCKET_CONNECT_TIMEOUT": 61}, "['SOCKET_CONNECT_TIMEOUT'] must be a number from"),
        ({"METADATA_MAX_ENTRIES": 10_001}, "['METADATA_MAX_ENTRIES'] must be an integer from 1"),
        ({"METADATA_TTL": 0}, "['METADATA_TTL'] must be an integer from 1 to 2592000"),
        ({"OFFENDER_RETENTION": -1}, "['OFFENDER_RETENTION'] must be an integer from 1"),
        ({"OFFENDER_INDEX_MAX": 0}, "['OFFENDER_INDEX_MAX'] must be an integer from 1"),
        (
            {"REDIS": 6379},
            "DJANGO_RATELIMITS['REDIS'] must be None, a CACHES alias, a URL or a dict, not int",
        ),
        ({"REDIS": "  "}, "DJANGO_RATELIMITS['REDIS'] must not be an empty string"),
        (
            {"REDIS": "http://user:secret@h:1"},
            "DJANGO_RATELIMITS['REDIS'] URL must start with redis://, rediss://, unix://, "
            "not http://",
        ),
        ({"REDIS": {}}, "DJANGO_RATELIMITS['REDIS'] needs a URL, for example"),
        (
            {"REDIS": {"URL": "redis://h:1", "PASSWORD": "x"}},
            "DJANGO_RATELIMITS['REDIS'] has an unknown key 'PASSWORD'; "
            "the valid keys are URL, CLUSTER, OPTIONS",
        ),
        ({"REDIS": {"URL": 5}}, "DJANGO_RATELIMITS['REDIS'] URL must be a str, not int"),
        (
            {"REDIS": {"URL": "h:1"}},
            "URL must start with redis://, rediss://, unix://, not no scheme",
        ),
        (
            {"REDIS": {"URL": "unix:///tmp/r.sock", "CLUSTER": True}},
            "DJANGO_RATELIMITS['REDIS'] URL must start with redis://, rediss:// for a cluster, "
            "not unix://",
        ),
        (
            {"REDIS": {"URL": "redis://h:1", "CLUSTER": "yes"}},
            "DJANGO_RATELIMITS['REDIS'] CLUSTER must be True or False, not 'yes'",
        ),
        (
            {"REDIS": {"URL": "redis://h:1", "OPTIONS": [("db", 1)]}},
            "DJANGO_RATELIMITS['REDIS'] OPTIONS must be a dict, not list",
        ),
        (
            {"REDIS": {"URL": "redis://h:1", "OPTIONS": {"socket_timeout": 5}}},
            "DJANGO_RATELIMITS['REDIS'] OPTIONS must not set 'socket_timeout': "
            "set DJANGO_RATELIMITS['SOCKET_TIMEOUT'] instead",
        ),
        (
            {"REDIS": {"URL": "redis://h:1", "OPTIONS": {"socket_connect_timeout": 5}}},
            "set DJANGO_RATELIMITS['SOCKET_CONNECT_TIMEOUT'] instead",
        ),
        (
            {"REDIS": {"URL": "redis://h:1", "OPTIONS": {"decode_responses": True}}},
            "OPTIONS must not set 'decode_responses': the engine works in bytes",
        ),
    ],
)
def test_invalid_settings(value: object, message: str) -> None:
    with pytest.raises(ImproperlyConfigured) as caught:
        settings_from(value)
    assert message in str(caught.value)


def test_a_password_in_a_bad_url_is_not_shown() -> None:
    with pytest.raises(ImproperlyConfigured) as caught:
        settings_from({"REDIS": "http://user:secret@h:1"})
    assert "secret" not in str(caught.value)


def test_an_invalid_setting_is_not_cached() -> None:
    with override_settings(DJANGO_RATELIMITS={"SHARDS": 0}):
        for _ in range(2):
            with pytest.raises(ImproperlyConfigured):
                get_settings()
    assert get_settings().shards != 0


def test_the_documentation_lists_every_key_with_its_default() -> None:
    rows = {}
    for line in DOCS.read_text().splitlines():
        match = re.match(r"\| `([A-Z0-9_]+)` \| `([^`]*)` \|", line)
        if match:
            rows[match[1]] = match[2].replace("_", "")
    expected = {key: repr(value).replace("'", '"') for key, value in DEFAULTS.items()}
    assert rows == expected


def test_the_identity_budget_is_a_rate_or_off() -> None:
    assert get_settings().identity_budget_rate == Rate(50, 3600)
    assert settings_from({"IDENTITY_BUDGET": "10/5m"}).identity_budget_rate == Rate(10, 300)
    assert settings_from({"IDENTITY_BUDGET": "off"}).identity_budget_rate is None
    assert settings_from({"IDENTITY_BUDGET": None}).identity_budget_rate is None


def test_trusted_proxies_become_networks() -> None:
    config = settings_from({"TRUSTED_PROXIES": ["10.0.0.0/8", "192.0.2.1", "2001:db8::/32"]})
    assert [str(n) for n in config.trusted_proxies] == [
        "10.0.0.0/8",
        "192.0.2.1/32",
        "2001:db8::/32",
    ]


def test_ipv4_mapped_trusted_proxies_become_ipv4_networks() -> None:
    # As a server bound to [::] logs an IPv4 peer: the peer is matched as IPv4.
    mapped = ["::ffff:10.0.0.1", "::ffff:192.0.2.0/120", "::ffff:0:0/96", "::fffe:0:0/95"]
    config = settings_from({"TRUSTED_PROXIES": mapped})
    assert [str(n) for n in config.trusted_proxies] == [
        "10.0.0.1/32",
        "192.0.2.0/24",
        "0.0.0.0/0",
        "::fffe:0:0/95",  # wider than the mapped block: IPv6, as written
    ]


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ({"TRUSTED_PROXIES": "10.0.0.0/8"}, "TRUSTED_PROXIES'] must be a list"),
        ({"TRUSTED_PROXIES": ["10.0.0.0/33"]}, "not an IP address or CIDR"),
        ({"TRUSTED_PROXIES": ["proxy.local"]}, "not an IP address or CIDR"),
        ({"CLIENT_IP_HEADER": "X Forwarded"}, "must be a header name"),
        ({"IPV6_PREFIX": 129}, "IPV6_PREFIX'] must be an integer from 16 to 128"),
        ({"IPV4_PREFIX": 7}, "IPV4_PREFIX'] must be an integer from 8 to 32"),
        ({"ENABLED": "yes"}, "ENABLED'] must be True or False"),
        ({"RESPONSE_VIEW": "not a path"}, "dotted path of a view"),
        ({"BLOCKED_RESPONSE_VIEW": "not a path"}, "BLOCKED_RESPONSE_VIEW'] must be None or"),
        ({"FAIL_CLOSED_STATUS": 500}, "must be 429 or 503"),
        ({"POLICY_REFRESH": 0}, "POLICY_REFRESH'] must be a number"),
        ({"BREAKER_FAILURES": 0}, "BREAKER_FAILURES'] must be an integer"),
        ({"DENIAL_CACHE": -1}, "DENIAL_CACHE'] must be an integer from 0 to 1000000"),
        ({"DENIAL_CACHE": 1_000_001}, "DENIAL_CACHE'] must be an integer from 0 to 1000000"),
        ({"DENIAL_CACHE": True}, "DENIAL_CACHE'] must be an integer"),
        ({"DENIAL_CACHE": None}, "DENIAL_CACHE'] must be an integer"),
        ({"IDENTITY_BUDGET": "50 per hour"}, "IDENTITY_BUDGET'] must be a rate such as '50/h'"),
        ({"IDENTITY_BUDGET": 50}, "or None or 'off', not int 50"),
        ({"IDENTITY_BUDGET": ""}, "IDENTITY_BUDGET'] must be a rate"),
        ({"KEY_FUNCTIONS": "myproject.keys.tenant"}, "KEY_FUNCTIONS'] must be a list"),
        ({"KEY_FUNCTIONS": ["myproject.keys.tenant()"]}, "not the dotted path of a function"),
        ({"KEY_FUNCTIONS": [None]}, "NoneType None, which is not the dotted path"),
    ],
)
def test_request_path_settings_are_validated(value: dict[str, object], message: str) -> None:
    with pytest.raises(ImproperlyConfigured, match=re.escape(message)):
        settings_from(value)


@pytest.mark.parametrize("secret", ["too-short-secret"[:15], b"bytes-are-not-a-str", 12345])
def test_a_weak_shard_secret_is_refused_without_being_shown(secret: object) -> None:
    with pytest.raises(
        ImproperlyConfigured, match="SHARD_SECRET'] must be None or a str"
    ) as caught:
        settings_from({"SHARD_SECRET": secret})
    assert str(secret) not in str(caught.value)
