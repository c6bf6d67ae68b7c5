"""Hostile input and spoofing through whole requests, against real Redis.

* Identities a client chooses (a key function reading a header here; header
  keys work the same way) with braces, newlines, NULs, 64 kB, latin-1 bytes:
  the request never fails, the client is still limited like anyone else, its
  keys stay in its own hash slot and another identity's quota is untouched;
  the offender dashboard renders it.
* The admin policy form, fed anything: an error page or a save, never a 500;
  a failed save shows the error and keeps what the user typed.
* IPv6 clients rotating addresses inside one /64, and IPv4-mapped addresses,
  share one limit.
* A 429 tells a client nothing about other clients or the key space.

Rate strings and forwarding headers are fuzzed at the unit level in
``tests/policies/test_rates.py`` and ``tests/request/test_identity.py``; the dashboard's
permissions and CSRF in ``tests/dashboard/test_dashboard_permissions.py``.
"""

from __future__ import annotations

import html
import json
import logging
from typing import Any

import pytest
import redis
from django.contrib.auth.models import User
from django.http import HttpRequest
from django.test import Client, override_settings
from django.urls import reverse
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from redis.cluster import RedisCluster

from django_ratelimits.deny_cache import cache_for
from django_ratelimits.engine import Identity, get_engine
from django_ratelimits.engine.controls import Controls
from django_ratelimits.engine.denials import Denials
from django_ratelimits.models import Policy
from django_ratelimits.policies import get_registry
from tests.dashboard.test_admin import add_url, field_row, form
from tests.dashboard.test_dashboard import PAGE, detail_url
from tests.engine_helpers import all_keys

pytestmark = pytest.mark.django_db

LIMIT = 3
VICTIM = "victim"

FIXTURES = [HealthCheck.function_scoped_fixture, HealthCheck.too_slow]


def who(request: HttpRequest) -> str | None:
    """The key function of the tests: the ``X-Who`` header exactly as it came."""
    return request.META.get("HTTP_X_WHO")


def _policy(**fields: Any) -> None:
    Policy.objects.create(**fields)
    get_registry().refresh()


def _flush(client: redis.Redis | RedisCluster) -> None:
    if isinstance(client, RedisCluster):
        client.flushall(target_nodes=RedisCluster.PRIMARIES)
    else:
        client.flushall()
    cache = cache_for(get_engine())
    if cache is not None:  # what this process remembers of the Redis just flushed
        cache.clear()


def _remaining(response: Any) -> int:
    return int(response["RateLimit"].split(";r=")[1].split(";")[0])


# --------------------------------------------------------------------------- hostile identities

_hostile = st.one_of(
    st.text(min_size=1, max_size=100),
    st.text(st.characters(max_codepoint=255), min_size=1, max_size=100),  # latin-1 bytes
    st.sampled_from(
        ["{victim}", "victim}", "{", "}{", "a\nb", "\x00", "victim\x00", "key:victim", "~x"]
    ),
    st.builds(
        lambda text, n: text * n,
        st.sampled_from(["{", "}", "x", "\x00", "\n", "é"]),
        st.integers(60_000, 66_000),  # 64 kB
    ),
)


@settings(max_examples=30, deadline=None, suppress_health_check=FIXTURES)
@given(value=_hostile)
def test_a_hostile_identity_is_limited_in_its_own_slot(
    site_redis: redis.Redis | RedisCluster, admin_client: Client, value: str
) -> None:
    assume(value != VICTIM)
    if not Policy.objects.filter(name="who").exists():
        _policy(
            name="who", rates=f"{LIMIT}/m", path=r"^/api/", key="callable",
            key_arg="tests.request.test_hostile.who",
        )  # fmt: skip
    _flush(site_redis)
    client = Client()
    assert client.get("/api/hello", headers={"X-Who": VICTIM}).status_code == 200
    statuses = [
        client.get("/api/hello", headers={"X-Who": value}).status_code for _ in range(LIMIT + 1)
    ]
    assert statuses == [200] * LIMIT + [429]  # limited like anyone else
    # Every key written belongs to the victim's slot, the hostile identity's, or
    # the client address's (its identity budget), but the one denial epoch.
    keys = get_engine().keys
    owners = [Identity("key", VICTIM), Identity("key", value), Identity("ip", "127.0.0.1")]
    slots = {redis.cluster.key_slot(keys.of(who).tag.encode()) for who in owners}
    slots.add(redis.cluster.key_slot(Denials(get_engine()).epoch_key.encode()))
    assert {redis.cluster.key_slot(k) for k in all_keys(site_redis)} <= slots
    # The victim's quota is untouched: one used before, one now.
    assert _remaining(client.get("/api/hello", headers={"X-Who": VICTIM})) == LIMIT - 2
    # The dashboard lists the hostile offender and opens its page.
    page = admin_client.get(reverse(PAGE))
    assert page.status_code == 200
    assert "\x00" not in page.content.decode()
    assert admin_client.get(detail_url("key", value)).status_code in (200, 404)


def test_a_blocked_clients_path_and_identity_cannot_forge_log_lines(
    site_redis: redis.Redis | RedisCluster, caplog: pytest.LogCaptureFixture
) -> None:
    """The line logged for a request a block refused escapes what the client chose: a
    path's ``%0A`` is a line break in ``request.path``, and a header identity may hold
    escape sequences (a terminal reading the log) or a line separator."""
    _policy(
        name="who-logged", rates=f"{LIMIT}/m", path=r"^/api/", key="callable",
        key_arg="tests.request.test_hostile.who",
    )  # fmt: skip
    _flush(site_redis)
    value = "evil\x1b[2J\u2028forged"
    Controls(get_engine()).block(Identity("key", value), 300)
    forged = "/api/hello%0A2026-11-27 refused GET /: ip 10.0.0.1 is blocked%1B[31m"
    with caplog.at_level(logging.INFO, logger="django_ratelimits"):
        assert Client().get(forged, headers={"X-Who": value}).status_code == 429
    [line] = [r.getMessage() for r in caplog.records if "is blocked (by" in r.getMessage()]
    assert line.startswith("refused GET /api/hello\\n2026-11-27 refused GET /: ip 10.0.0.1")
    assert line.isprintable() and "\x1b" not in line and "\u2028" not in line
    assert ": key:evil\ufffd[2J\ufffdforged\u2026 ~" in line  # as the dashboard names it


# --------------------------------------------------------------------------- the admin form

_field = st.one_of(
    st.text(max_size=60),
    st.sampled_from(["", "10/s", "10/s, 120/m", "1000001/s", "0/m", "^/api/", "(", "[a-", "*"]),
    st.sampled_from(["ip", "user", "header", "callable", "sliding_log", "gcra", "shadow"]),
    st.builds(
        lambda text, n: text * n, st.sampled_from(["{", "\x00", "é", "9"]), st.integers(1, 3000)
    ),
)
FIELDS = ["name", "rates", "path", "methods", "key", "key_arg", "algorithm", "burst", "priority",
          "allow_cidrs", "mode"]  # fmt: skip


@settings(max_examples=100, deadline=None, suppress_health_check=FIXTURES)
@given(data=st.data())
def test_the_admin_form_never_fails_on_any_input(admin_client: Client, data: Any) -> None:
    fields = {name: data.draw(_field, label=name) for name in FIELDS}
    response = admin_client.post(add_url(), form(**fields))
    assert response.status_code in (200, 302)
    if response.status_code == 200:
        assert response.context["adminform"].form.errors


def test_a_failed_save_shows_the_error_and_keeps_the_input(admin_client: Client) -> None:
    typed = form(
        name="checkout",
        description="keep me",
        rates="10/s, 5/x",
        path="^/checkout/",
        methods="POST",
        key="header",
        key_arg="X-Api-Key",
        allow_cidrs="10.0.0.0/8",
    )
    response = admin_client.post(add_url(), typed)
    assert response.status_code == 200
    page = response.content.decode()
    assert "unknown unit" in field_row(page, "rates")
    for name in ("name", "description", "rates", "path", "methods", "key_arg", "allow_cidrs"):
        assert html.escape(typed[name]) in field_row(page, name), name  # value="" or a textarea
    assert not Policy.objects.exists()


# --------------------------------------------------------------------------- spoofing


def test_ipv6_addresses_rotating_inside_one_64_share_a_limit(site_redis: Any) -> None:
    _policy(name="api", rates=f"{LIMIT}/m", path=r"^/api/", algorithm="sliding_log")
    rotating = [
        "2001:db8:1:2::1",
        "2001:db8:1:2:ffff::9",
        "2001:db8:1:2:abcd::6789",
        "2001:db8:1:2::7",
    ]
    statuses = [Client(REMOTE_ADDR=a).get("/api/hello").status_code for a in rotating]
    assert statuses == [200] * LIMIT + [429]
    assert Client(REMOTE_ADDR="2001:db8:1:3::1").get("/api/hello").status_code == 200


def test_an_ipv4_mapped_address_is_the_ipv4_client(site_redis: Any) -> None:
    _policy(name="api", rates=f"{LIMIT}/m", path=r"^/api/", algorithm="sliding_log")
    for address in ["203.0.113.9", "::ffff:203.0.113.9", "203.0.113.9"]:
        assert Client(REMOTE_ADDR=address).get("/api/hello").status_code == 200
    assert Client(REMOTE_ADDR="::ffff:203.0.113.9").get("/api/hello").status_code == 429


def test_accounts_rotated_from_one_address_past_its_budget_count_once_each(
    site_redis: Any,
) -> None:
    """Counting the address and the user, an address that signs in as a new account
    per request gets its budget of accounts, then each request counts against the
    address once (not once as the address and once more as the account over budget):
    the address's quota, no more and no less."""
    _policy(name="api", rates="6/h", path=r"^/api/", key="ip_and_user", identity_budget="2/h")
    statuses = []
    for n in range(8):
        client = Client(REMOTE_ADDR="198.51.100.78")
        client.force_login(User.objects.create_user(f"rotated-{n}", password="x"))
        statuses.append(client.get("/api/hello").status_code)
    assert statuses == [200] * 6 + [429] * 2


def test_a_429_discloses_nothing_about_others_or_the_key_space(site_redis: Any) -> None:
    redis_setting = _redis_setting()
    from django.conf import settings as django_settings

    limits = {**django_settings.DJANGO_RATELIMITS, "REDIS": redis_setting, "KEY_PREFIX": "k3ysp4ce"}
    with override_settings(DJANGO_RATELIMITS=limits):
        _policy(name="api", rates="1/m", path=r"^/api/", key="ip_and_user")
        alice = User.objects.create_user("alice-secret", password="x")
        bob = User.objects.create_user("bob", password="x")
        first = Client(REMOTE_ADDR="198.51.100.77")
        first.force_login(alice)
        assert first.get("/api/hello").status_code == 200
        second = Client(REMOTE_ADDR="198.51.100.77")  # the same address: denied by it
        second.force_login(bob)
        for accept in ("application/json", "text/html"):
            denied = second.get("/api/hello", headers={"Accept": accept})
            assert denied.status_code == 429
            text = denied.content.decode() + json.dumps(dict(denied.headers))
            for secret in ("alice", str(alice.pk) + "|", "k3ysp4ce", "{s", "198.51.100.77"):
                assert secret not in text, (secret, text)


def _redis_setting() -> object:
    from django.conf import settings as django_settings

    return django_settings.DJANGO_RATELIMITS["REDIS"]
