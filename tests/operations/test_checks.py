"""System checks: each one fires on its mistake, stays quiet otherwise, and hints at the fix."""

from __future__ import annotations

import ipaddress
import logging
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.core.checks import CheckMessage, run_checks
from django.core.checks.registry import registry
from django.core.management import call_command
from django.core.management.base import SystemCheckError
from django.test import override_settings

from devtools.redis_harness import RedisClusterHarness, RedisServer, dead_port
from django_ratelimits import checks, identity
from django_ratelimits.checks import REDIS_TAG, TAG, redis_server
from django_ratelimits.conf import get_settings
from django_ratelimits.middleware import RateLimitMiddleware
from django_ratelimits.models import Policy
from django_ratelimits.policies import get_registry
from tests.operations.eviction import blind_url, redis_with

OURS = "django_ratelimits.middleware.RateLimitMiddleware"
AUTH = "django.contrib.auth.middleware.AuthenticationMiddleware"
SESSION = "django.contrib.sessions.middleware.SessionMiddleware"
PING_THREAD = "django_ratelimits-check-redis"  # the thread that asks Redis, left waiting
DEAD_URL = f"redis://127.0.0.1:{dead_port()}/0"
APP = "django_ratelimits"


@pytest.fixture(autouse=True)
def patient_checks(monkeypatch: pytest.MonkeyPatch) -> None:
    """A live Redis is given all the time it needs to answer the checks' questions.

    The shipped half second is a bound for a hung server; on a machine shared with
    Redis servers, gunicorn and Chromium, a first cluster connection can take longer,
    and the check then (rightly) says W002. Tests of the bound itself use ``prompt_checks``.
    """
    monkeypatch.setattr(redis_server, "PING_TIMEOUT", 60.0)


@pytest.fixture
def prompt_checks(monkeypatch: pytest.MonkeyPatch) -> None:
    """The shipped bound, for the tests that a hung or dead Redis is given no more."""
    monkeypatch.setattr(redis_server, "PING_TIMEOUT", checks.PING_TIMEOUT)


class SiteLimiter(RateLimitMiddleware):
    """A project's own subclass: the checks must recognise it."""


def messages(tags: list[str] | None = None) -> list[CheckMessage]:
    return run_checks(tags=tags or [TAG])


def ids(tags: list[str] | None = None) -> list[str]:
    return [m.id or "" for m in messages(tags)]


def with_middleware(*entries: str) -> Any:
    return override_settings(MIDDLEWARE=[SESSION, *entries])


def live(redis: object) -> dict[str, object]:
    """``DJANGO_RATELIMITS`` for a Redis that answers, at ``redis`` (a URL, its dict or
    a cache alias), with the suite's socket timeouts (tests/settings.py). Under the
    default 0.25 s a busy machine's late answer reads as W002 (Redis does not answer)
    where the test expects what the server says: a connect on CI once missed 0.25 s."""
    timeouts = ("SOCKET_TIMEOUT", "SOCKET_CONNECT_TIMEOUT")
    return {"REDIS": redis, **{name: settings.DJANGO_RATELIMITS[name] for name in timeouts}}


def django_redis_cache(url: str, **options: object) -> dict[str, object]:
    # django-redis keeps one pool per LOCATION for the process, whatever the OPTIONS:
    # a test that sets OPTIONS uses a LOCATION of its own.
    return {"BACKEND": "django_redis.cache.RedisCache", "LOCATION": url, "OPTIONS": options}


# --------------------------------------------------------------------------- registration


def test_the_checks_are_registered_under_their_tags() -> None:
    assert registry.tag_exists(TAG)
    assert registry.tag_exists(REDIS_TAG)
    assert "django_ratelimits.W002" not in ids([TAG])


def test_every_message_has_a_hint_and_an_id_of_the_app() -> None:
    with (
        with_middleware(OURS, AUTH),
        override_settings(DJANGO_RATELIMITS={"REDIS": "nope"}),
    ):
        found = messages()
    assert found
    for message in found:
        assert message.id and message.id.startswith("django_ratelimits.")
        assert message.hint


# --------------------------------------------------------------------------- middleware


def test_middleware_after_authentication_passes() -> None:
    with with_middleware(AUTH, OURS), override_settings(DJANGO_RATELIMITS={"REDIS": DEAD_URL}):
        assert ids() == []


def test_middleware_before_authentication_is_an_error() -> None:
    with with_middleware(OURS, AUTH), override_settings(DJANGO_RATELIMITS={"REDIS": DEAD_URL}):
        found = messages()
    assert [m.id for m in found] == ["django_ratelimits.E001"]
    assert found[0].is_serious()
    assert "see no user" in found[0].msg


def test_a_subclass_of_either_middleware_counts() -> None:
    with with_middleware("tests.operations.test_checks.SiteLimiter", AUTH):
        assert "django_ratelimits.E001" in ids()
    with with_middleware(AUTH, "tests.operations.test_checks.SiteLimiter"):
        assert "django_ratelimits.E001" not in ids()


def test_a_broken_middleware_entry_is_left_to_django() -> None:
    with with_middleware("no.such.Middleware", AUTH, OURS):
        assert "django_ratelimits.E001" not in ids()


def test_without_authentication_middleware_the_order_is_not_judged() -> None:
    with with_middleware(OURS):
        found = ids()
    assert "django_ratelimits.E001" not in found
    assert "django_ratelimits.W001" not in found


LOCALE = "django.middleware.locale.LocaleMiddleware"


@pytest.mark.parametrize(
    ("urlconf", "order", "warned"),
    [
        # Translated routes: resolved in the language the thread's last request left
        # active when LocaleMiddleware has not yet run.
        ("tests.request.translated_plain_urls", (AUTH, OURS, LOCALE), True),
        ("tests.request.translated_plain_urls", (LOCALE, AUTH, OURS), False),
        # i18n_patterns alone: the path's prefix names the language, in either order.
        ("tests.i18n_urls", (AUTH, OURS, LOCALE), False),
        ("tests.request.prefixed_translated_urls", (AUTH, OURS, LOCALE), False),
        ("tests.urls", (AUTH, OURS, LOCALE), False),
    ],
)
def test_locale_middleware_below_ours_with_translated_routes_is_a_warning(
    urlconf: str, order: tuple[str, ...], warned: bool
) -> None:
    with (
        with_middleware(*order),
        override_settings(ROOT_URLCONF=urlconf, DJANGO_RATELIMITS={"REDIS": DEAD_URL}),
    ):
        found = [m for m in messages() if m.id == "django_ratelimits.W016"]
    assert bool(found) is warned
    if warned:
        assert not found[0].is_serious()
        assert "LocaleMiddleware" in (found[0].hint or "")


def test_a_missing_middleware_is_a_warning() -> None:
    with with_middleware(AUTH):
        found = [m for m in messages() if m.id == "django_ratelimits.W001"]
    assert len(found) == 1
    assert not found[0].is_serious()
    assert "SILENCED_SYSTEM_CHECKS" in (found[0].hint or "")


def test_manage_py_check_fails_on_an_error() -> None:
    with with_middleware(OURS, AUTH), pytest.raises(SystemCheckError, match="E001"):
        call_command("check", tags=[TAG])


# --------------------------------------------------------------------------- settings


def test_invalid_settings_are_an_error_with_conf_s_message() -> None:
    with with_middleware(AUTH, OURS), override_settings(DJANGO_RATELIMITS={"REDSI": DEAD_URL}):
        found = messages([TAG, REDIS_TAG])
    assert [m.id for m in found] == ["django_ratelimits.E002"]
    assert "unknown key 'REDSI'" in found[0].msg
    assert "did you mean 'REDIS'" in found[0].msg


def test_the_invalid_settings_hint_says_the_fix_without_pointing_to_docs_a_wheel_lacks() -> None:
    with with_middleware(AUTH, OURS), override_settings(DJANGO_RATELIMITS={"SOCKET_TIMEOUT": 0}):
        (found,) = messages([TAG, REDIS_TAG])
    assert found.hint is not None and "docs/" not in found.hint
    assert "remove the key to use its default" in found.hint


@pytest.mark.parametrize(
    "value",
    [
        {"SOCKET_TIMEOUT": 0},
        {"TRUSTED_PROXIES": "10.0.0.0/8"},
        {"REDIS": "ftp://x"},
        {"DENIAL_CACHE": -1},
        "redis://",
    ],
)
def test_every_invalid_value_is_reported_not_raised(value: object) -> None:
    with override_settings(DJANGO_RATELIMITS=value):
        assert "django_ratelimits.E002" in ids([TAG, REDIS_TAG])


def test_an_unknown_cache_alias_is_an_error() -> None:
    with override_settings(DJANGO_RATELIMITS={"REDIS": "ratelimits"}):
        found = [m for m in messages() if m.id == "django_ratelimits.E003"]
    assert len(found) == 1
    assert "names no cache in CACHES" in found[0].msg


def test_a_cache_that_is_not_django_redis_is_an_error() -> None:
    # The test settings' default cache is local memory.
    with override_settings(DJANGO_RATELIMITS={"REDIS": "default"}):
        assert "django_ratelimits.E003" in ids()
    with override_settings(DJANGO_RATELIMITS={}):
        assert "django_ratelimits.E003" in ids()


def test_a_django_redis_cache_passes_without_touching_the_network() -> None:
    caches = {"default": django_redis_cache(DEAD_URL)}
    with override_settings(CACHES=caches, DJANGO_RATELIMITS={"REDIS": "default"}):
        assert "django_ratelimits.E003" not in ids()
    with override_settings(CACHES=caches, DJANGO_RATELIMITS={}):
        assert "django_ratelimits.E003" not in ids()


def test_a_decoding_cache_client_is_an_error() -> None:
    pool = {"CONNECTION_POOL_KWARGS": {"decode_responses": True}}
    caches = {"default": django_redis_cache(DEAD_URL.replace("/0", "/9"), **pool)}
    with override_settings(CACHES=caches, DJANGO_RATELIMITS={"REDIS": "default"}):
        found = [m for m in messages() if m.id == "django_ratelimits.E003"]
    assert len(found) == 1
    assert "decode_responses" in found[0].msg


NOT_A_VIEW = 42  # RESPONSE_VIEW naming a module attribute that is no view (E012)


@pytest.mark.parametrize("key", ["RESPONSE_VIEW", "BLOCKED_RESPONSE_VIEW"])
@pytest.mark.parametrize(
    ("path", "said"),
    [
        ("tests.urls.custom_492", 'ImportError: Module "tests.urls" does not define'),
        ("tests.no_such_module.view", "ModuleNotFoundError: No module named"),
        (f"{__name__}.NOT_A_VIEW", "names a non-callable int"),
    ],
)
def test_a_response_view_that_cannot_be_imported_is_an_error(
    key: str, path: str, said: str
) -> None:
    """A well-formed dotted path naming nothing passed every check, and each refusal
    was a 500 (a review); E012 names the setting and the import error."""
    with override_settings(DJANGO_RATELIMITS={key: path}):
        found = [m for m in messages() if m.id == "django_ratelimits.E012"]
    assert len(found) == 1 and found[0].is_serious()
    assert f"['{key}'] = {path!r}" in found[0].msg and said in found[0].msg
    assert key in (found[0].hint or "")


def test_importable_response_views_pass() -> None:
    config = {"RESPONSE_VIEW": "tests.urls.custom_429", "BLOCKED_RESPONSE_VIEW": "tests.urls.hello"}
    with override_settings(DJANGO_RATELIMITS=config):
        assert "django_ratelimits.E012" not in ids()


@pytest.mark.parametrize(
    "typo", ["DJANGO_RATELIMIT", "DJANGO_RATE_LIMITS", "DJANGORATELIMITS", "DJANGO_RATELIMITSS"]
)
@pytest.mark.parametrize("alone", [True, False], ids=["alone", "beside-the-real-one"])
def test_a_setting_named_almost_django_ratelimits_is_a_warning(typo: str, alone: bool) -> None:
    # DJANGO_RATELIMIT, as the django-ratelimit package is named: nothing reads it, so
    # TRUSTED_PROXIES, HASH_IPS... would keep their defaults without a word.
    with override_settings(**{typo: {"TRUSTED_PROXIES": ["10.0.0.0/8"], "HASH_IPS": True}}):
        if alone:
            del settings.DJANGO_RATELIMITS  # no setting_changed: the cache is cleared here
            get_settings.cache_clear()
        try:
            found = [m for m in messages() if m.id == "django_ratelimits.W006"]
        finally:
            get_settings.cache_clear()
    assert [(m.obj, m.level) for m in found] == [(typo, logging.WARNING)]
    assert "did you mean DJANGO_RATELIMITS?" in found[0].msg


def test_the_real_name_and_django_ratelimit_settings_give_no_w006() -> None:
    with override_settings(RATELIMIT_ENABLE=True, RATELIMIT_USE_CACHE="default"):
        assert "django_ratelimits.W006" not in ids()


@pytest.mark.parametrize("name", ["DJANGO_RATELIMITS_ON", "DJANGO_RATELIMITS_EXTRA"])
def test_a_projects_own_setting_named_after_the_real_one_gives_no_w006(name: str) -> None:
    # The whole name, spelt right, and more: a setting of the project's own beside it.
    with override_settings(**{name: True}):
        assert "django_ratelimits.W006" not in ids()


def test_the_ipv4_mapped_network_of_every_ipv4_address_is_an_error() -> None:
    # ::ffff:0:0/96 is every IPv4 address as a server bound to [::] shows it.
    config = {"REDIS": DEAD_URL, "TRUSTED_PROXIES": ["::ffff:0:0/96"]}
    with override_settings(DJANGO_RATELIMITS=config):
        found = [m for m in messages() if m.id == "django_ratelimits.E004"]
    assert len(found) == 1
    assert "0.0.0.0/0" in found[0].msg and "::ffff:0:0/96" in (found[0].hint or "")


@pytest.mark.parametrize("everything", ["0.0.0.0/0", "::/0"])
def test_trusting_every_address_is_an_error(everything: str) -> None:
    config = {"REDIS": DEAD_URL, "TRUSTED_PROXIES": ["10.0.0.0/8", everything]}
    with override_settings(DJANGO_RATELIMITS=config):
        found = [m for m in messages() if m.id == "django_ratelimits.E004"]
    assert len(found) == 1
    assert everything in found[0].msg
    assert "X-Forwarded-For" in found[0].msg


def test_ordinary_proxy_networks_pass() -> None:
    config = {"REDIS": DEAD_URL, "TRUSTED_PROXIES": ["10.0.0.0/8", "127.0.0.1", "fc00::/7"]}
    with override_settings(DJANGO_RATELIMITS=config):
        assert "django_ratelimits.E004" not in ids()


# --------------------------------------------------------------------------- Redis


def test_a_reachable_redis_passes(redis_standalone: RedisServer) -> None:
    if not redis_standalone.is_running():
        redis_standalone.start()
    with override_settings(
        DJANGO_RATELIMITS={**settings.DJANGO_RATELIMITS, "REDIS": redis_standalone.url}
    ):
        assert ids([REDIS_TAG]) == []
    caches = {"default": django_redis_cache(redis_standalone.url)}
    with override_settings(CACHES=caches, DJANGO_RATELIMITS={"REDIS": "default"}):
        assert ids([REDIS_TAG]) == []


def test_an_unreachable_redis_is_a_warning_not_an_error() -> None:
    with override_settings(DJANGO_RATELIMITS={"REDIS": DEAD_URL}):
        found = messages([REDIS_TAG])
    assert [m.id for m in found] == ["django_ratelimits.W002"]
    assert not found[0].is_serious()
    # The refusal itself, not the PING timeout: the check did not wait for the timeout.
    assert "ConnectionError" in found[0].msg and "fail open" in found[0].msg


@pytest.fixture
def silent_server() -> Iterator[str]:
    """A port that accepts connections and never answers: a hung Redis."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        yield f"redis://127.0.0.1:{listener.getsockname()[1]}/0"


def test_a_hung_redis_costs_the_check_at_most_half_a_second(
    silent_server: str, prompt_checks: None
) -> None:
    # A cache without timeouts would wait forever; the check does not.
    caches = {"default": django_redis_cache(silent_server)}
    before = set(threading.enumerate())
    with override_settings(CACHES=caches, DJANGO_RATELIMITS={"REDIS": "default"}):
        started = time.monotonic()
        found = messages([REDIS_TAG])
        elapsed = time.monotonic() - started
    pinging = [t for t in set(threading.enumerate()) - before if t.name == PING_THREAD]
    assert [m.id for m in found] == ["django_ratelimits.W002"]
    assert f"within {checks.PING_TIMEOUT} s" in found[0].msg
    # It waited PING_TIMEOUT, then left the PING waiting: no upper bound on the time is
    # asserted (a busy machine may be late to wake the check), the PING still waiting is.
    assert elapsed >= checks.PING_TIMEOUT
    assert len(pinging) == 1 and pinging[0].is_alive()


def test_an_unreachable_cluster_is_a_warning() -> None:
    with override_settings(DJANGO_RATELIMITS={"REDIS": {"URL": DEAD_URL, "CLUSTER": True}}):
        found = messages([TAG, REDIS_TAG])
    assert "django_ratelimits.W002" in [m.id for m in found]
    assert not any(m.is_serious() for m in found if m.id != "django_ratelimits.W001")


def test_a_reachable_cluster_passes(redis_cluster: RedisClusterHarness) -> None:
    redis_cluster.ensure_running()
    with override_settings(DJANGO_RATELIMITS=live({"URL": redis_cluster.url, "CLUSTER": True})):
        assert ids([REDIS_TAG]) == []


def test_a_cluster_node_asked_as_a_standalone_server_is_an_error(
    redis_cluster: RedisClusterHarness,
) -> None:
    """The node answers PING and the keys of its own slots, and MOVED to the rest: most
    identities' checks fail open, and W002 has nothing to say (a review: 32 of 39
    addresses were never limited by a 1/h policy, with every check passing)."""
    redis_cluster.ensure_running()
    node = f"{redis_cluster.nodes[0][0]}:{redis_cluster.nodes[0][1]}"
    caches = {"default": django_redis_cache(redis_cluster.url)}
    for target, fix in ((redis_cluster.url, "<the same URL>"), ("default", "cache alias")):
        with override_settings(CACHES=caches, DJANGO_RATELIMITS=live(target)):
            found = messages([TAG, REDIS_TAG])
        # W001: no middleware here; W007: the cache sets no socket timeouts.
        ours = [m for m in found if m.id not in (f"{APP}.W001", f"{APP}.W007")]
        assert [m.id for m in ours] == ["django_ratelimits.E011"], target
        assert ours[0].is_serious()
        assert node in ours[0].msg and "MOVED" in ours[0].msg and "fail open" in ours[0].msg
        assert "'CLUSTER': True" in (ours[0].hint or "") and fix in (ours[0].hint or "")


def test_cluster_true_against_a_server_not_in_cluster_mode_is_an_error(
    redis_standalone: RedisServer,
) -> None:
    if not redis_standalone.is_running():
        redis_standalone.start()
    with override_settings(DJANGO_RATELIMITS=live({"URL": redis_standalone.url, "CLUSTER": True})):
        found = messages([REDIS_TAG])
    assert [m.id for m in found] == ["django_ratelimits.E011"]
    assert "not in cluster mode" in found[0].msg
    assert "Remove CLUSTER" in (found[0].hint or "")


def test_the_cluster_mode_is_read_where_info_is_refused(tmp_path: Path) -> None:
    """A user that may not run INFO: CLUSTER INFO tells a standalone server apart."""
    with (
        redis_with(tmp_path, "allkeys-lru") as server,
        override_settings(DJANGO_RATELIMITS=live({"URL": blind_url(server), "CLUSTER": True})),
    ):
        assert ids([REDIS_TAG]) == ["django_ratelimits.E011"]


def test_a_disabled_limiter_does_not_ping() -> None:
    with override_settings(DJANGO_RATELIMITS={"REDIS": DEAD_URL, "ENABLED": False}):
        assert ids([REDIS_TAG]) == []


# --------------------------------------------------------------------------- runtime hint


@pytest.fixture
def fresh_hint(monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> Any:
    monkeypatch.setattr(identity, "_peer_settled", False)
    caplog.set_level(logging.WARNING, logger="django_ratelimits")
    return caplog


def address(text: str) -> Any:
    return ipaddress.ip_address(text)


def hints(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "TRUSTED_PROXIES" in r.getMessage()]


@pytest.mark.parametrize(
    "peer", ["10.0.0.5", "127.0.0.1", "192.168.1.2", "100.64.0.1", "::1", "fd00::1"]
)
def test_a_private_peer_without_trusted_proxies_is_logged_once(fresh_hint: Any, peer: str) -> None:
    identity.warn_if_behind_proxy(address(peer), ())
    identity.warn_if_behind_proxy(address(peer), ())
    identity.warn_if_behind_proxy(address("10.9.9.9"), ())
    logged = hints(fresh_hint)
    assert len(logged) == 1
    assert str(address(peer)) in logged[0]


def test_a_public_peer_settles_it_for_good(fresh_hint: Any) -> None:
    identity.warn_if_behind_proxy(address("8.8.8.8"), ())
    identity.warn_if_behind_proxy(address("10.0.0.5"), ())
    assert hints(fresh_hint) == []


def test_nothing_is_logged_when_proxies_are_trusted(fresh_hint: Any) -> None:
    trusted = (ipaddress.ip_network("10.0.0.0/8"),)
    identity.warn_if_behind_proxy(address("10.0.0.5"), trusted)
    assert hints(fresh_hint) == []
    assert identity._peer_settled is False  # the settings may change; still watching


def test_nothing_is_logged_in_debug(fresh_hint: Any) -> None:
    assert not settings.DEBUG
    with override_settings(DEBUG=True):
        identity.warn_if_behind_proxy(address("127.0.0.1"), ())
    assert hints(fresh_hint) == []


# --------------------------------------------------------------------------- eviction (W003)


def deploy_ids(url: str) -> list[str]:
    with override_settings(DJANGO_RATELIMITS=live(url)):
        found = run_checks(tags=[REDIS_TAG], include_deployment_checks=True)
    return [m.id or "" for m in found]


def test_a_redis_that_refuses_writes_when_full_is_a_deploy_warning(tmp_path: Path) -> None:
    with (
        redis_with(tmp_path, "noeviction") as server,
        override_settings(DJANGO_RATELIMITS=live(server.url)),
    ):
        found = run_checks(tags=[REDIS_TAG], include_deployment_checks=True)
        assert ids([REDIS_TAG]) == []  # only with --deploy
    assert [m.id for m in found] == ["django_ratelimits.W003"]
    assert "noeviction" in found[0].msg and "fail open" in found[0].msg
    assert server.url.split("//")[1].rstrip("/0") in found[0].msg
    assert "allkeys-lru" in (found[0].hint or "")


@pytest.mark.parametrize("policy", ["allkeys-lru", "volatile-lru", "volatile-ttl"])
def test_an_eviction_policy_that_makes_room_passes_the_deploy_check(
    tmp_path: Path, policy: str
) -> None:
    with redis_with(tmp_path, policy) as server:
        assert deploy_ids(server.url) == []


def test_noeviction_without_a_maxmemory_is_not_a_write_failure(tmp_path: Path) -> None:
    with redis_with(tmp_path, "noeviction", maxmemory="0") as server:
        assert deploy_ids(server.url) == []


def test_an_eviction_policy_that_cannot_be_read_is_said_without_failing(tmp_path: Path) -> None:
    with (
        redis_with(tmp_path, "noeviction") as server,
        override_settings(DJANGO_RATELIMITS=live(blind_url(server))),
    ):
        found = run_checks(tags=[REDIS_TAG], include_deployment_checks=True)
    assert [m.id for m in found] == ["django_ratelimits.W003"]
    assert found[0].msg.startswith("Could not read Redis' maxmemory-policy")
    assert "NoPermissionError" in found[0].msg


def test_the_eviction_check_leaves_an_unreachable_redis_to_w002() -> None:
    assert deploy_ids(DEAD_URL) == ["django_ratelimits.W002"]


def test_the_eviction_check_reads_every_master_of_a_cluster(
    redis_cluster: RedisClusterHarness,
) -> None:
    redis_cluster.ensure_running()
    first = redis_cluster.node_clients()[0]
    first.config_set("maxmemory", "100mb")
    try:
        with override_settings(DJANGO_RATELIMITS=live({"URL": redis_cluster.url, "CLUSTER": True})):
            found = run_checks(tags=[REDIS_TAG], include_deployment_checks=True)
    finally:
        first.config_set("maxmemory", "0")
    assert [m.id for m in found] == ["django_ratelimits.W003"]
    assert f"{redis_cluster.nodes[0][0]}:{redis_cluster.nodes[0][1]}" in found[0].msg


# --------------------------------------------------------------------------- path patterns


@pytest.mark.django_db
def test_each_row_whose_pattern_re2_refuses_is_an_error_naming_it() -> None:
    # Rows saved before patterns were matched by RE2: update() skips validation as they did.
    for name in ("backref", "lookahead", "fine", "no-path"):
        Policy.objects.create(name=name, rates="10/s")
    Policy.objects.filter(name="backref").update(path=r"^/(\w+)/\1")
    Policy.objects.filter(name="lookahead").update(path="^/(?!admin)", enabled=False)
    Policy.objects.filter(name="fine").update(path=r"^/(\w+-?)*$")
    found = run_checks(tags=[TAG], databases=["default"])
    errors = {m.obj: m.msg for m in found if m.id == "django_ratelimits.E005"}
    assert sorted(errors) == ["policy 'backref'", "policy 'lookahead'"]
    assert "invalid escape sequence: \\1" in errors["policy 'backref'"]
    assert "invalid perl operator: (?!" in errors["policy 'lookahead'"]
    assert all(m.hint for m in found)
    # A plain "manage.py check" reads the policies' own database too.
    assert ids().count("django_ratelimits.E005") == 2


@pytest.mark.django_db
def test_a_row_whose_pattern_lacks_the_leading_slash_is_a_warning_naming_it() -> None:
    # Saved before admin refused it: loaded, and it matches no request path.
    Policy.objects.create(name="routes-style", rates="10/s")
    Policy.objects.filter(name="routes-style").update(path="^api/")
    found = [m for m in messages() if m.id == "django_ratelimits.W013"]
    assert [(m.obj, m.level) for m in found] == [("policy 'routes-style'", logging.WARNING)]
    assert "Write ^/api/." in found[0].msg and found[0].hint
    assert "django_ratelimits.E005" not in ids()
    # It still loads: a view decorated with its name is limited by it, at its rates.
    get_registry().refresh()
    spec = get_registry().get("routes-style")
    assert spec is not None and str(spec.rates[0]) == "10/s"


@pytest.mark.django_db
def test_a_sliding_log_row_saved_over_the_log_limit_is_a_warning_naming_it() -> None:
    # Saved before admin refused a sliding log over 10,000 a window: enforced as saved,
    # and each identity's log grows with its limit.
    Policy.objects.create(name="big-log", rates="10/h", algorithm="sliding_log")
    Policy.objects.create(name="big-window", rates="1000000/h")
    Policy.objects.filter(name="big-log").update(rates="10/s, 50000/h")
    found = [m for m in messages() if m.id == "django_ratelimits.W014"]
    assert [(str(m.obj), m.level) for m in found] == [("big-log", logging.WARNING)]
    assert "10/s, 50000/h" in found[0].msg and "10,000" in found[0].msg and found[0].hint
    get_registry().refresh()
    spec = get_registry().get("big-log")
    assert spec is not None and [r.limit for r in spec.rates] == [10, 50000]
