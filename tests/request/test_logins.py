"""Failed-login policies (django_ratelimits.logins) through whole requests, on real Redis.

Django's LoginView, the admin login, DRF's token view and an async view on
``aauthenticate``: failed logins are counted, and a login over the limit is
refused with 429 before its password is checked (the right password too).
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.contrib.auth.models import User
from django.core.exceptions import ValidationError
from django.test import AsyncClient, Client, override_settings
from django.urls import reverse
from hypothesis import example, given, settings
from hypothesis import strategies as st
from redis.cluster import RedisCluster

from django_ratelimits.engine import Identity, get_engine
from django_ratelimits.identity import USERNAME_MAX, normalize_username
from django_ratelimits.logins import BACKEND
from django_ratelimits.models import Policy
from django_ratelimits.offenders import Offenders
from django_ratelimits.policies import get_registry
from tests.engine_helpers import all_keys, check_calls

pytestmark = pytest.mark.django_db

LOGIN = "/accounts/login/"
RIGHT = "s3cret-pass"


@pytest.fixture
def site(site_redis: Any) -> Iterator[Any]:
    """The login views, with the failed-login backend first, and a user alice (and a
    staff user, boss)."""
    backends = [BACKEND, "django.contrib.auth.backends.ModelBackend"]
    with override_settings(ROOT_URLCONF="tests.login_urls", AUTHENTICATION_BACKENDS=backends):
        User.objects.create_user("alice", password=RIGHT)
        User.objects.create_user("boss", password=RIGHT, is_staff=True)
        yield site_redis


def policy(**fields: Any) -> Policy:
    fields = {"name": "login-failures", "rates": "3/15m", "counts": "failed_logins", **fields}
    row = Policy(**fields)
    row.full_clean()
    row.save()
    get_registry().refresh()
    return row


def login(
    username: str, password: str = "wrong", ip: str = "198.51.100.7", path: str = LOGIN
) -> Any:
    return Client(REMOTE_ADDR=ip).post(path, {"username": username, "password": password})


def refused(response: Any) -> bool:
    """429 with a Retry-After of whole seconds, as every refusal."""
    return response.status_code == 429 and int(response["Retry-After"]) >= 1


# --------------------------------------------------------------------------- Django's LoginView


@pytest.mark.parametrize("key", ["ip", "username", "ip_and_username", "ip_username"])
def test_three_failures_then_even_the_right_password_is_refused(site: Any, key: str) -> None:
    policy(key=key)
    assert [login("alice").status_code for _ in range(3)] == [200, 200, 200]  # the form again
    assert refused(login("alice", RIGHT))
    assert refused(login("alice"))  # a refusal is not a failure: it stays refused, uncharged


def test_metrics_count_each_login_attempt_once(site: Any) -> None:
    from prometheus_client import CollectorRegistry

    from django_ratelimits.metrics import observing
    from django_ratelimits.metrics.prometheus import PREFIX, PrometheusMetrics

    policy(key="username")
    fresh = CollectorRegistry()
    with observing(PrometheusMetrics(fresh)):
        assert [login("alice").status_code for _ in range(3)] == [200, 200, 200]
        assert login("alice", RIGHT).status_code == 429

    def counted(outcome: str) -> float:
        labels = {"policy": "login-failures", "outcome": outcome}
        return fresh.get_sample_value(f"{PREFIX}_decisions_total", labels) or 0.0

    # Three failed attempts let through (counted at the look before the password, not
    # again when charged), and one refused.
    assert (counted("allowed"), counted("denied")) == (3.0, 1.0)


def test_logins_under_the_limit_pass_and_successes_do_not_count(site: Any) -> None:
    policy(key="ip_and_username")
    assert login("alice").status_code == 200
    for _ in range(5):
        assert login("alice", RIGHT).status_code == 302  # signed in: never counted
    assert [login("alice").status_code for _ in range(2)] == [200, 200]
    assert refused(login("alice", RIGHT))  # the 4th attempt after 3 failures


def test_a_successful_login_resets_when_the_policy_says_so(site: Any) -> None:
    policy(key="ip_and_username", reset_on_success=True)
    assert [login("alice").status_code for _ in range(2)] == [200, 200]
    assert login("alice", RIGHT).status_code == 302
    # alice's count starts over; her address's keeps its 2 failures.
    assert [login("alice", ip="198.51.100.8").status_code for _ in range(3)] == [200] * 3
    assert refused(login("alice", RIGHT, ip="198.51.100.9"))
    assert login("bob").status_code == 200  # the first address: its 3rd failure
    assert refused(login("bob"))


def test_logging_in_to_ones_own_account_keeps_the_address_failures(site: Any) -> None:
    """An attacker with an account of his own sprays guesses at other accounts and signs
    in to his own between them: the address's failures still add up (an attack review:
    with reset on success, 10 guesses went through a 3/15m count by address)."""
    User.objects.create_user("mallory", password="mallory-own")
    policy(key="ip_and_username", reset_on_success=True)
    assert [login("user1").status_code, login("user2").status_code] == [200, 200]
    assert login("mallory", "mallory-own").status_code == 302
    assert login("user3").status_code == 200
    assert refused(login("user4"))  # the address's 4th failure in the window


@pytest.mark.parametrize("key", ["username", "ip_username"])
def test_logging_in_to_ones_own_account_clears_nothing_of_another(site: Any, key: str) -> None:
    User.objects.create_user("mallory", password="mallory-own")
    policy(key=key, reset_on_success=True)
    assert [login("alice").status_code, login("alice").status_code] == [200, 200]
    assert login("mallory", "mallory-own").status_code == 302
    assert login("alice").status_code == 200
    assert refused(login("alice"))


@pytest.mark.parametrize(("victim", "attacker"), [("alice", "Alice"), ("Carol", "carol")])
def test_an_account_whose_name_folds_to_anothers_clears_nothing(
    site: Any, victim: str, attacker: str
) -> None:
    """Normalised, two usernames apart only by case are one counter: the success of one
    account must not clear the failures guessed against the other (a review: an
    attacker's own account named like his victim's cleared its count, 10 guesses
    through 3/15m)."""
    User.objects.get_or_create(username=victim, defaults={"password": "x"})
    User.objects.create_user(attacker, password="own-pass")
    policy(key="username", reset_on_success=True)
    ips = iter(f"203.0.113.{n}" for n in range(1, 50))
    assert [login(victim, ip=next(ips)).status_code for _ in range(2)] == [200, 200]
    assert login(attacker, "own-pass", ip=next(ips)).status_code == 302
    assert login(victim, ip=next(ips)).status_code == 200
    assert refused(login(victim, ip=next(ips)))


def test_a_successful_login_keeps_the_ban_level_of_its_address(
    site: Any, frozen_clock: Any
) -> None:
    """The address's ban ladder outlives a login to the attacker's own account: the
    next ban of the address is the next level, not the first again."""
    User.objects.create_user("mallory", password="mallory-own")
    policy(
        key="ip_and_username",
        reset_on_success=True,
        ban_after=1,
        ban_within="1h",
        ban_for="1m",
        ban_max="1d",
    )

    def level() -> int | None:
        override = Offenders().inspect(Identity("ip", "198.51.100.7")).detail.override
        return None if override is None else override.level

    assert [login(f"user{n}").status_code for n in range(3)] == [200] * 3
    assert refused(login("user9"))  # the denial that bans the address
    assert level() == 1
    frozen_clock.advance(17 * 60)  # the ban is over, the failures aged out
    assert login("mallory", "mallory-own").status_code == 302
    assert [login(f"user{n}").status_code for n in range(3, 6)] == [200] * 3
    assert refused(login("user9"))
    assert level() == 2


def test_a_successful_login_resets_the_counters_of_an_override_too(site: Any) -> None:

    from tests.overrides_helpers import override

    row = policy(key="username", reset_on_success=True)
    override("username:alice", "4/15m", policy=row)
    get_registry().refresh()
    assert [login("alice").status_code for _ in range(3)] == [200, 200, 200]
    assert login("alice", RIGHT).status_code == 302
    assert [login("alice").status_code for _ in range(4)] == [200] * 4  # 4 more allowed
    assert refused(login("alice", RIGHT))


def test_without_reset_a_success_leaves_the_failures_counted(site: Any) -> None:
    policy(key="ip_and_username")
    assert [login("alice").status_code for _ in range(2)] == [200, 200]
    assert login("alice", RIGHT).status_code == 302
    assert login("alice").status_code == 200
    assert refused(login("alice", RIGHT))


def test_a_username_lockout_holds_across_rotating_ips(site: Any) -> None:
    policy(key="username")
    ips = [f"203.0.113.{n}" for n in range(1, 4)]
    assert [login("alice", ip=ip).status_code for ip in ips] == [200, 200, 200]
    assert refused(login("alice", RIGHT, ip="192.0.2.200"))  # a fresh IP, the right password
    # Another username from the same IPs is not locked.
    assert login("boss", RIGHT, ip=ips[0]).status_code == 302


def test_case_and_whitespace_variants_are_one_username(site: Any) -> None:
    policy(key="username")
    assert [login(name).status_code for name in ("Alice", " alice ", "ALICE")] == [200, 200, 200]
    assert refused(login("alice", RIGHT))
    fullwidth = "\uff21\uff4c\uff49\uff43\uff45"  # "Alice" in full-width letters
    assert normalize_username(f"  {fullwidth}\t") == "alice"  # NFKC, then case folding


# Letters whose case folding expands or composes: sharp s, ligatures, dotted capital I,
# final sigma, iota subscript, and combining marks that compose with what folding leaves.
_TRICKY = "a\u00dfs\ufb01\u0130\u03a3\u03c2\u0345\u0301\u0300\u0307\u0323 \uff21\u1e9e\u01c4"


@settings(max_examples=500, deadline=None)
@given(st.lists(st.sampled_from(_TRICKY), max_size=12).map("".join) | st.text(max_size=30))
@example("x\u00df\u0301")  # "ss" and the accent, which then compose into "ś"
def test_a_normalised_username_normalises_to_itself(tried: str) -> None:
    """Staff name the username the dashboard shows: it must be the identity counted."""
    once = normalize_username(tried)
    assert once is None or normalize_username(once) == once


def test_staff_act_on_the_username_the_dashboard_lists(site: Any, admin_client: Client) -> None:
    tried = "x\u00df\u0301"  # ß and a combining acute accent: folds to "ss" and the accent
    policy(key="username", rates="2/15m")
    for _ in range(2):
        login(tried)
    assert refused(login(tried))
    listed = json.loads(admin_client.get(reverse("admin:django_ratelimits_offenders_json")).content)
    [row] = [o for o in listed["offenders"] if o["kind"] == "username"]
    assert row["value"] == "xs\u015b"
    assert admin_client.get(row["detail_url"]).context["offender"] is not None
    fields = {"kind": "username", "value": row["value"], "action": "block", "seconds": "3600"}
    done = admin_client.post(
        reverse("admin:django_ratelimits_offender_action"), {**fields, "confirm": "on"}
    )
    assert done.status_code == 302
    assert Offenders().inspect(Identity("username", row["value"])).detail.override is not None
    assert refused(login(tried, RIGHT))  # the block holds what the attacker sends


def test_the_pair_key_does_not_lock_the_victim_out_from_elsewhere(site: Any) -> None:
    policy(key="ip_username")
    assert [login("alice", ip="203.0.113.66").status_code for _ in range(3)] == [200] * 3
    assert refused(login("alice", RIGHT, ip="203.0.113.66"))
    assert login("alice", RIGHT, ip="192.0.2.10").status_code == 302  # alice, from her own IP


def test_locking_a_victim_out_limits_the_attacker_too(site: Any) -> None:
    """By IP and username: the attacker who locks alice out is locked out himself, of
    every username; the documented trade-off of a username lockout."""
    policy(key="ip_and_username")
    attacker = "203.0.113.66"
    assert [login("alice", ip=attacker).status_code for _ in range(3)] == [200] * 3
    assert refused(login("alice", RIGHT, ip="192.0.2.10"))  # alice is locked (the trade-off)
    assert refused(login("boss", ip=attacker))  # and so is the attacker's IP, for anyone
    # ... whose refusals charge no username: boss was never tried, so is not locked.
    assert [login("boss", ip=attacker).status_code for _ in range(5)] == [429] * 5
    last = login("boss", RIGHT, ip="192.0.2.10")
    assert last.status_code == 302, (last.headers, last.content[:3000])


def test_rotating_usernames_from_one_ip_is_bounded_by_the_identity_budget(site: Any) -> None:
    """By username only: past the policy's identity budget, one IP's new usernames count
    against the IP, so spraying many usernames is limited too."""
    policy(key="username", identity_budget="3/h")
    assert [login(f"user{n}").status_code for n in range(3)] == [200] * 3  # three usernames
    assert [login(f"other{n}").status_code for n in range(3)] == [200] * 3  # on the IP
    assert refused(login("yet-another"))


def test_the_path_pattern_names_the_login_urls_a_policy_guards(site: Any) -> None:
    policy(key="ip", path="^/admin/login/")
    assert [login("alice").status_code for _ in range(4)] == [200] * 4  # another login URL


# --------------------------------------------------------------------------- other login views


def test_the_admin_login(site: Any) -> None:
    policy(key="ip_and_username")
    path = "/admin/login/"
    assert [login("boss", path=path).status_code for _ in range(3)] == [200, 200, 200]
    assert refused(login("boss", RIGHT, path=path))


def test_drf_obtain_auth_token_with_json(site: Any) -> None:
    policy(key="username")
    client = Client(REMOTE_ADDR="198.51.100.7")

    def token(password: str) -> Any:
        body = json.dumps({"username": "alice", "password": password})
        return client.post("/api-token-auth/", body, content_type="application/json")

    assert [token("wrong").status_code for _ in range(3)] == [400, 400, 400]
    assert refused(token(RIGHT))


def async_attempts(passwords: list[str], username: str = "alice") -> list[int]:
    """Each password tried for ``username`` through the async view (AsyncClient), in one
    loop, with the session it signs in to; async_to_sync runs the database work in this
    thread, where the test's users are."""

    async def run() -> list[int]:
        client = AsyncClient(raise_request_exception=False)  # from 127.0.0.1
        codes = []
        for password in passwords:
            data = {"username": username, "password": password}
            codes.append((await client.post("/async-login", data)).status_code)
        return codes

    return async_to_sync(run)()


def test_async_login_with_aauthenticate(site: Any) -> None:
    policy(key="ip_and_username")
    assert async_attempts(["wrong"] * 3 + [RIGHT]) == [401, 401, 401, 429]


def test_async_login_exempting_staff_reads_the_user_off_the_event_loop(site: Any) -> None:
    # The client holds a session after its first login: planning reads the lazy user to
    # exempt staff, which on the event loop was a 500 (SynchronousOnlyOperation).
    policy(key="username", exempt_staff=True)
    assert async_attempts([RIGHT, "wrong", RIGHT], username="boss") == [200, 401, 200]


def test_async_reset_on_success(site: Any) -> None:
    policy(key="username", reset_on_success=True)
    tries = ["wrong"] * 2 + [RIGHT] + ["wrong"] * 3 + [RIGHT]
    assert async_attempts(tries) == [401, 401, 200, 401, 401, 401, 429]


# --------------------------------------------------------------------------- what it costs


def test_engine_calls_per_request(site: Any) -> None:
    """An unrelated request: none. A successful login: one peek, and the release of the
    place it held among the logins in flight when its response ends. A failed login: the
    peek and the charge, which takes that place (nothing to release). Without
    failed-login policies, a login costs none. (One identity: on a cluster, identities
    in two slots cost a call per node, sent together.)"""
    redis = site
    before = check_calls(*_primaries(redis))
    assert login("alice", RIGHT).status_code == 302
    assert check_calls(*_primaries(redis)) == before
    policy(key="ip")
    Client().get("/api/hello")
    assert check_calls(*_primaries(redis)) == before
    # A first call after the harness flushed Redis reloads the check function (and the
    # release script) and calls it again: counted from calls that have done that.
    assert login("bob", RIGHT).status_code == 200
    assert login("alice", RIGHT).status_code == 302
    before = check_calls(*_primaries(redis))
    assert login("alice", RIGHT).status_code == 302
    assert check_calls(*_primaries(redis)) - before == 2
    assert login("alice").status_code == 200
    # On a cluster the response's end gives the failure's place back too (a gated
    # username in another slot is not sent once its gate refuses): one call more.
    extra = 1 if isinstance(redis, RedisCluster) else 0
    assert check_calls(*_primaries(redis)) - before == 4 + extra


def _primaries(redis: Any) -> list[Any]:
    if isinstance(redis, RedisCluster):
        return [redis.get_redis_connection(node) for node in redis.get_primaries()]
    return [redis]


def test_the_middleware_never_counts_a_failed_login_policy(site: Any) -> None:
    """Its path pattern matches the login URL, yet GETs and successful POSTs count nothing."""
    policy(key="ip", path="^/accounts/login/")
    client = Client(REMOTE_ADDR="198.51.100.7")
    assert [client.get(LOGIN).status_code for _ in range(5)] == [200] * 5
    assert [login("alice", RIGHT).status_code for _ in range(5)] == [302] * 5
    assert [login("alice").status_code for _ in range(3)] == [200] * 3


# --------------------------------------------------------------------------- hostile usernames


# Django's form refuses a NUL before authenticating: nothing to count, nothing checked.
HOSTILE = ["x" * 10_000, "ad\nmin\r\n", "{s1}}{", "a|b|c", "<script>alert(1)</script>", "\x1b[2J\t"]


@pytest.mark.parametrize(
    "name", HOSTILE, ids=["10kB", "newlines", "braces", "pipes", "html", "controls"]
)
def test_a_hostile_username_is_counted_in_bounded_keys(site: Any, name: str) -> None:
    policy(key="ip_and_username", record_metadata="every")
    assert [login(name).status_code for _ in range(3)] == [200, 200, 200]
    assert refused(login(name))
    keys = all_keys(site)
    assert keys
    for key in keys:
        assert len(key) < 120 and b"\n" not in key and b" " not in key and b"|" not in key
        assert key.count(b"{") <= 1 and key.count(b"}") <= 1  # at most the shard's hash tag
    for key in keys:  # every identity's key expires (deny-epoch is one fixed key)
        assert b"{" not in key or site.pttl(key) > 0
    entries = [e for k in keys if b":m:" in k for e in site.lrange(k, 0, -1)]
    assert entries and all(len(e) < 600 for e in entries)


def test_a_10kb_username_is_cut_before_work_or_memory(site: Any) -> None:
    assert len(normalize_username("é" * 10_000) or "") == USERNAME_MAX
    assert normalize_username("   ") is None
    assert normalize_username(None) is None
    assert normalize_username(12345) == "12345"  # what ModelBackend's lookup tries
    assert len(normalize_username(["x" * 100] * 1_000) or "") == USERNAME_MAX


def test_guesses_with_a_number_for_username_count_against_that_username(site: Any) -> None:
    """A JSON login passing ``{"username": 12345}`` to ``authenticate()`` tries the
    password of the user "12345" (ModelBackend's lookup turns it into text): from
    rotating addresses, the guesses count against that username (an attack review: 8
    of 8 went through a 3/15m count by username)."""
    User.objects.create_user("12345", password=RIGHT)
    policy(key="username")

    def attempt(username: object, password: str, ip: str) -> int:
        body = json.dumps({"username": username, "password": password})
        client = Client(REMOTE_ADDR=ip)
        return client.post("/json-login", body, content_type="application/json").status_code

    assert attempt(12345, RIGHT, "192.0.2.1") == 200  # the number signs in as "12345"
    codes = [attempt(12345, f"guess{n}", f"203.0.113.{n}") for n in range(1, 7)]
    assert codes == [401, 401, 401, 429, 429, 429]
    assert attempt("12345", RIGHT, "203.0.113.9") == 429  # one count, whichever type


def test_a_username_field_django_masks_counts_as_the_backend_saw_it(
    site: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A user model whose ``USERNAME_FIELD`` looks secret to Django (``api_key``):
    ``user_login_failed`` hands the tried name over as asterisks. The failures must count
    against the name tried, not against the mask: else the username lockout never
    comes (a review found it)."""
    monkeypatch.setattr(User, "USERNAME_FIELD", "api_key")
    backends = [BACKEND, "tests.login_urls.KeyBackend"]
    policy(key="username")

    def attempt(ip: str) -> int:
        body = {"api_key": "alice-key", "password": "wrong"}
        return Client(REMOTE_ADDR=ip).post("/key-login", body).status_code

    with override_settings(AUTHENTICATION_BACKENDS=backends):
        codes = [attempt(f"203.0.113.{n}") for n in range(1, 7)]
    assert codes == [401, 401, 401, 429, 429, 429]
    assert Offenders().inspect(Identity("username", "alice-key")).detail.offender is not None


# --------------------------------------------------------------------------- dashboard and CLI


def test_the_dashboard_shows_the_usernames_tried_escaped(site: Any, admin_client: Client) -> None:
    """Recording every hit, each failure is in the IP's list with the username tried,
    and in the username's with the IP; a username is text, escaped like any."""
    policy(key="ip_and_username", record_metadata="every")
    ip = "203.0.113.66"
    for name in ("alice", "<b>root</b>", "Alice"):
        assert login(name, ip=ip).status_code == 200
    assert refused(login("alice", ip=ip))
    url = reverse("admin:django_ratelimits_offender")
    response = admin_client.get(url, {"kind": "ip", "value": ip})
    assert response.status_code == 200
    page = response.content.decode()
    assert "username:alice" in page
    assert "&lt;b&gt;root&lt;/b&gt;" in page and "<b>root</b>" not in page
    page = admin_client.get(url, {"kind": "username", "value": "ALICE"}).content.decode()
    assert f"ip:{ip}" in page
    listing = admin_client.get(reverse("admin:django_ratelimits_offenders")).content.decode()
    assert f"ip:{ip}" in listing and "<b>root</b>" not in listing


def test_the_command_shows_and_resets_a_locked_username(site: Any) -> None:
    from io import StringIO

    from django.core.management import call_command

    policy(key="username")
    for _ in range(3):
        login("alice")
    assert refused(login("alice", RIGHT))
    out = StringIO()
    call_command("ratelimits", "show", "username:Alice", "--json", stdout=out)
    shown = json.loads(out.getvalue())
    assert shown["identity"] == "username:alice"
    call_command("ratelimits", "reset", "username:alice", "--policy", "login-failures", stdout=out)
    assert login("alice", RIGHT).status_code == 302


# --------------------------------------------------------------------------- the policy form


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"counts": "failed_logins", "key": "user"}, "key"),
        ({"counts": "failed_logins", "key": "header", "key_arg": "X-Api-Key"}, "key"),
        ({"counts": "requests", "key": "username"}, "key"),
        ({"counts": "requests", "reset_on_success": True}, "reset_on_success"),
        ({"counts": "failed_logins", "key": "ip", "reset_on_success": True}, "reset_on_success"),
    ],
)
def test_a_policy_that_cannot_count_logins_is_a_form_error(
    fields: dict[str, Any], field: str
) -> None:
    row = Policy(name="bad", rates="3/m", **fields)
    with pytest.raises(ValidationError) as caught:
        row.full_clean()
    assert field in caught.value.message_dict


def test_redis_down_lets_logins_through_unless_fail_closed(site: Any) -> None:
    policy(key="ip")
    dead = {"REDIS": "redis://127.0.0.1:1/0", "SOCKET_CONNECT_TIMEOUT": 0.2}
    with override_settings(DJANGO_RATELIMITS=dead):
        assert login("alice").status_code == 200  # fail open: the failure is not counted
        assert login("alice", RIGHT).status_code == 302
    Policy.objects.filter(name="login-failures").update(fail_closed=True)
    get_registry().refresh()
    from django_ratelimits.breaker import breaker

    breaker.success()
    with override_settings(DJANGO_RATELIMITS=dead):
        assert refused(login("alice", RIGHT))  # fail closed: 429, the breaker's Retry-After


@pytest.mark.parametrize("redis_client", ["standalone"], indirect=True)  # Redis is not asked
def test_redis_down_signals_a_failed_login_once(site: Any) -> None:
    # The look before the password fails, then the failure's charge: one request, one
    # backend_failed (the look's), as the metrics count it once.
    from django_ratelimits.signals import backend_failed

    policy(key="ip")
    heard: list[Any] = []
    backend_failed.connect(lambda **kw: heard.append(kw), weak=False, dispatch_uid="t-once")
    dead = {"REDIS": "redis://127.0.0.1:1/0", "SOCKET_CONNECT_TIMEOUT": 0.2}
    try:
        with override_settings(DJANGO_RATELIMITS=dead):
            assert login("alice").status_code == 200
            assert login("bob", ip="198.51.100.8").status_code == 200
    finally:
        backend_failed.disconnect(dispatch_uid="t-once")
    assert [[p.name for p in kw["policies"]] for kw in heard] == [["login-failures"]] * 2
    assert [kw["request"].META["REMOTE_ADDR"] for kw in heard] == [
        "198.51.100.7",
        "198.51.100.8",
    ]


def test_no_identity_value_is_raw_in_a_key(site: Any) -> None:
    policy(key="username")
    login("Alice Smith")
    assert all(b"alice smith" not in key for key in all_keys(site))
    assert get_engine().keys.of(Identity("username", "alice smith")).ident.startswith("username:~")


def test_a_backend_below_another_is_warning_w005() -> None:
    from django_ratelimits.checks.logins import check_login_backend

    model = "django.contrib.auth.backends.ModelBackend"
    with override_settings(AUTHENTICATION_BACKENDS=[model, BACKEND]):
        [warning] = check_login_backend()
    assert warning.id == "django_ratelimits.W005"
    with override_settings(AUTHENTICATION_BACKENDS=[BACKEND, model]):
        assert check_login_backend() == []
    with override_settings(AUTHENTICATION_BACKENDS=[model]):
        assert check_login_backend() == []


def test_admin_saves_a_failed_login_policy_and_previews_it(admin_client: Client) -> None:
    from tests.dashboard.test_admin import add_url, change_url, form

    fields = form(name="logins", counts="failed_logins", key="username", rates="5/15m")
    response = admin_client.post(add_url(), {**fields, "path": "", "reset_on_success": "on"})
    assert response.status_code == 302, response.context["adminform"].form.errors
    row = Policy.objects.get(name="logins")
    assert row.to_spec().failed_logins and row.reset_on_success
    page = admin_client.get(change_url(row)).content.decode()
    assert (
        "per username tried" in page
        and "A successful login clears the counters of its username." in page
    )
    refused_form = admin_client.post(add_url(), form(name="bad", key="username"))
    assert "key" in refused_form.context["adminform"].form.errors


# --------------------------------------------------------------------------- forgetting


def test_forgetting_an_address_erases_the_usernames_it_tried(site: Any) -> None:
    """A username policy under the default identity budget gates the usernames an
    address tries (the address's budget of usernames holds a digest of each):
    forgetting the address leaves no key naming it."""
    from django.core.management import call_command

    policy(key="username")
    ip = "198.51.100.7"
    assert [login(name, ip=ip).status_code for name in ("alice", "bob")] == [200, 200]
    engine = get_engine()
    address = engine.keys.of(Identity("ip", ip)).ident.encode()
    budgets = [k for k in all_keys(engine.client) if b":g:username:" in k and address in k]
    assert len(budgets) == 1, "the address's budget of usernames was written"
    bob = engine.keys.of(Identity("username", normalize_username("bob"))).member
    assert engine.client.zscore(budgets[0], bob) is not None
    call_command("ratelimits", "forget", f"ip:{ip}", stdout=io.StringIO())
    assert [k for k in all_keys(engine.client) if address in k] == []


@pytest.mark.parametrize(
    ("name", "needle"),
    [
        ("a" * 140 + "@example.org", "a" * 60),
        ("b" * 60 + "@" + "c" * 90 + ".example.org", "b" * 60 + "@"),
        ("mallory\u200b@example.org", "mallory"),  # a zero-width space cannot be printed
    ],
    ids=["152-chars", "163-chars", "unprintable"],
)
def test_forgetting_a_username_erases_it_from_its_addresses_hits_however_written(
    site: Any, name: str, needle: str
) -> None:
    """An address's hit entry names a username cut to 150 printable characters
    (engine/hits.py): erasure looks for it as the entry writes it, not the full name."""
    from django.core.management import call_command

    from tests.dashboard.test_privacy import naming

    policy(key="ip_and_username", record_metadata="every")
    assert login(name).status_code == 200
    assert naming(site, needle), "the address's list names the username"
    call_command("ratelimits", "forget", f"username:{name}", stdout=io.StringIO())
    assert naming(site, needle) == {}


@pytest.mark.parametrize(
    "name",
    ["x" * 170 + "@example.org", "a|b@example.org", "mallory\u200b@example.org"],
    ids=["182-chars", "pipe", "unprintable"],
)
def test_forgetting_an_address_reaches_the_list_of_every_username_it_tried(
    site: Any, name: str
) -> None:
    """The address's entry cannot hold such a username as it is (it is cut to 150
    printable characters, a ``|`` would end the field): erasure must still find the
    username's own list, which names the address. It kept four entries naming it."""
    from django.core.management import call_command

    from tests.dashboard.test_privacy import naming

    policy(key="ip_and_username", record_metadata="every")
    ip = "198.51.100.7"
    assert login(name, ip=ip).status_code == 200
    assert naming(site, ip), "the username's list names the address"
    call_command("ratelimits", "forget", f"ip:{ip}", stdout=io.StringIO())
    assert naming(site, ip) == {}


def test_the_dashboard_links_no_username_an_entry_holds_cut(site: Any, admin_client: Any) -> None:
    """Behind an address, a username its entries hold whole links to its page; one they
    hold cut names no identity (its page would be a username nobody tried): no link."""
    import re

    from tests.dashboard.test_dashboard import detail_url

    policy(key="ip_and_username", record_metadata="every")
    long = "z" * 170 + "@example.org"
    assert login("short@example.org").status_code == 200
    assert login(long).status_code == 200
    page = admin_client.get(detail_url("ip", "198.51.100.7")).content.decode()
    rows = dict(re.findall(r'<tr class="behind" data-who="([^"]*)">\s*<td[^>]*>(.*?)</td>', page))
    assert rows["username:short@example.org"].startswith("<a href=")
    [cut] = [text for who, text in rows.items() if who.startswith("username:zzz")]
    assert "\u2026" in cut and "<a " not in cut


def test_forgetting_a_long_username_keeps_another_that_reads_the_same(site: Any) -> None:
    """Two usernames alike in their first 150 characters are two identities: forgetting
    one leaves the other's entries in the address's list (erasure used to drop both)."""
    from django.core.management import call_command

    policy(key="ip_and_username", record_metadata="every")
    ip, stem = "198.51.100.7", "y" * 150
    assert [login(stem + end, ip=ip).status_code for end in ("-one", "-two")] == [200, 200]
    call_command("ratelimits", "forget", f"username:{stem}-one", stdout=io.StringIO())
    hits = Offenders(get_engine).inspect(Identity("ip", ip)).detail.hits
    (kept,) = [hit.who for hit in hits]
    assert kept.startswith(f"username:{stem}") and "-one" not in kept
    digest = get_engine().keys.of(Identity("username", f"{stem}-two")).ident.partition(":")[2]
    assert kept.endswith(f"\u2026 {digest}")


def test_a_locked_out_username_is_refused_without_redis_and_every_refusal_counted(
    site: Any, frozen_clock: Any
) -> None:
    """Credential stuffing against one account from many addresses: once a worker has
    seen the username over its limit, it refuses the next attempts from its cache of
    denials, with no call to Redis, until the retry time; the dashboard still counts
    every refusal (in batches)."""
    from django_ratelimits.deny_cache import cache_for
    from django_ratelimits.offenders import Offenders

    policy(key="username")
    redis = site
    addresses = [f"198.51.100.{i}" for i in range(1, 60)]
    assert [login("alice", ip=ip).status_code for ip in addresses[:3]] == [200] * 3
    # The first refusal makes the worker read the epoch of staff's writes; the second
    # is learnt under it.
    first, second = login("alice", RIGHT, ip=addresses[3]), login("alice", ip=addresses[4])
    assert refused(first) and refused(second)
    before = check_calls(*_primaries(redis))
    later = [login("alice", ip=ip) for ip in addresses[5:]]
    assert all(refused(r) for r in later)
    assert check_calls(*_primaries(redis)) == before, "a refused login reached Redis"
    assert later[-1]["Retry-After"] == second["Retry-After"]  # the clock stands still
    cache = cache_for(get_engine())
    assert cache is not None
    cache.flush()
    offender = Offenders().inspect(Identity("username", "alice")).detail.offender
    assert offender is not None and offender.denials == 2 + len(later)
    # Until the retry time: then Redis decides again (the three failures have aged out).
    frozen_clock.advance(int(second["Retry-After"]))
    assert login("alice", RIGHT, ip=addresses[0]).status_code == 302


def test_an_address_s_ban_lands_though_the_username_it_tries_is_refused_from_the_cache(
    site: Any, frozen_clock: Any
) -> None:
    """One address against one account: the address's policy bans after 3 refusals,
    the username's does not, and both are over together. The cache must not answer the
    look from the username's denial, else none of the address's refusals reaches the
    script that counts them towards its ban."""
    policy(name="login-ip", key="ip", ban_after=3, ban_within="1h", ban_for="1h")
    policy(name="login-user", key="username")
    assert [login("alice").status_code for _ in range(3)] == [200] * 3
    assert all(refused(login("alice")) for _ in range(6))
    override = Offenders().inspect(Identity("ip", "198.51.100.7")).detail.override
    assert override is not None and override.level == 1, "6 refusals and no ban"


def test_an_address_over_its_limit_is_refused_without_redis_whatever_username_it_tries(
    site: Any, frozen_clock: Any
) -> None:
    """Password spraying from one address: once the address is over its limit, each
    new username it tries is refused from the cache (the look charges no one, so one
    identity over its limit is enough), and none of those usernames is charged."""
    policy(key="ip_and_username")
    redis, ip = site, "203.0.113.50"
    assert [login(f"user{i}", ip=ip).status_code for i in range(3)] == [200] * 3
    assert refused(login("user3", ip=ip)) and refused(login("user4", ip=ip))
    before = check_calls(*_primaries(redis))
    assert all(refused(login(f"user{i}", ip=ip)) for i in range(5, 40))
    assert check_calls(*_primaries(redis)) == before, "a refused login reached Redis"
    # The usernames it sprayed are not locked out: from elsewhere, each still has its 3.
    other = "203.0.113.51"
    assert [login("user20", ip=other).status_code for _ in range(3)] == [200] * 3
    assert refused(login("user20", ip=other))


# --------------------------------------------------------------------------- rate_limited


def heard(path: str, n: int = 6) -> list[tuple[int, list[bool]]]:
    """Each of ``n`` failed logins' status, and the ``shadow`` of each ``rate_limited``
    it sent."""
    from django_ratelimits.signals import rate_limited

    sent: list[bool] = []
    rate_limited.connect(
        lambda **kw: sent.append(kw["shadow"]), weak=False, dispatch_uid="t-login-signal"
    )
    out = []
    try:
        for _ in range(n):
            status = login("alice", path=path).status_code
            out.append((status, sent[:]))
            sent.clear()
    finally:
        rate_limited.disconnect(dispatch_uid="t-login-signal")
    return out


@pytest.mark.parametrize("path", [LOGIN, "/async-login"])  # authenticate(), aauthenticate()
@pytest.mark.parametrize("key", ["ip", "ip_and_username"])
def test_rate_limited_is_sent_once_for_each_refused_login_never_for_a_failure(
    site: Any, path: str, key: str
) -> None:
    policy(key=key)
    wrong = 200 if path == LOGIN else 401
    # The third failure reaches the limit: its charge refuses nothing, and says nothing.
    assert heard(path) == [(wrong, [])] * 3 + [(429, [False])] * 3


@pytest.mark.parametrize("path", [LOGIN, "/async-login"])
def test_a_shadow_policy_sends_rate_limited_once_for_each_login_it_would_refuse(
    site: Any, path: str
) -> None:
    # Its look before the password would have refused the 4th: once, not again when
    # the failure that follows is charged.
    policy(mode="shadow")
    wrong = 200 if path == LOGIN else 401
    assert heard(path) == [(wrong, [])] * 3 + [(wrong, [True])] * 3


@pytest.mark.parametrize("mode", ["enforce", "shadow"])
def test_without_the_backend_no_login_is_refused_and_no_rate_limited_says_so(
    site: Any, mode: str
) -> None:
    policy(mode=mode)
    with override_settings(AUTHENTICATION_BACKENDS=["django.contrib.auth.backends.ModelBackend"]):
        assert heard(LOGIN) == [(200, [])] * 6  # counted, but nothing refuses (logged)
