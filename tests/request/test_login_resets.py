"""*Reset on successful login* (django_ratelimits.logins.logged_in), on real Redis: which
counter a success clears, for which name typed and which account signed in.

A success clears the counted name's failures only when they can be the signed-in
account's alone: its stored username (an e-mail address, capitals and all) is the
counted name but for case, and no other account's is. An attacker signing in to his
own account, whatever he types and however his account's name is spelt, never clears
the count of another's.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.contrib.auth.backends import ModelBackend
from django.contrib.auth.models import User
from django.db.models import Q
from django.test import Client, override_settings

from django_ratelimits.logins import BACKEND
from django_ratelimits.models import Policy
from django_ratelimits.policies import get_registry

pytestmark = pytest.mark.django_db

LOGIN = "/accounts/login/"
IP = "198.51.100.7"


class EmailOrUsernameBackend(ModelBackend):
    """Signs in by username, else by e-mail address, case-insensitively (a common
    backend of sites whose users type either)."""

    def authenticate(
        self, request: Any, username: str | None = None, password: str | None = None, **_: Any
    ) -> Any:
        for user in User.objects.filter(Q(username__iexact=username) | Q(email__iexact=username)):
            if password is not None and user.check_password(password):
                return user
        return None


@pytest.fixture
def site(site_redis: Any) -> Iterator[Any]:
    """The login views with the failed-login backend first and Django's ModelBackend."""
    backends = [BACKEND, "django.contrib.auth.backends.ModelBackend"]
    with override_settings(ROOT_URLCONF="tests.login_urls", AUTHENTICATION_BACKENDS=backends):
        yield site_redis


@pytest.fixture
def email_login(site: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    """Users sign in with their e-mail address (``USERNAME_FIELD = "email"``)."""
    monkeypatch.setattr(User, "USERNAME_FIELD", "email")
    return site


def policy(key: str) -> None:
    fields = {"name": "login-failures", "rates": "3/15m", "counts": "failed_logins"}
    row = Policy(**fields, key=key, reset_on_success=True)
    row.full_clean()
    row.save()
    get_registry().refresh()


def login(username: str, password: str = "wrong", ip: str = IP) -> int:
    response = Client(REMOTE_ADDR=ip).post(LOGIN, {"username": username, "password": password})
    return int(response.status_code)


# --------------------------------------------------------------------------- the user's own


@pytest.mark.parametrize("key", ["username", "ip_username", "ip_and_username"])
def test_a_user_whose_stored_email_has_capitals_gets_the_reset(email_login: Any, key: str) -> None:
    """The failures counted under the folded name ``alice@example.com`` are the account
    ``Alice@example.com``'s alone: her success clears them. (Compared exactly, her name
    never equalled the counted one, and she never got the reset.)"""
    User.objects.create_user("alice", email="Alice@example.com", password="hers")
    policy(key)
    assert [login("Alice@example.com"), login("alice@example.com")] == [200, 200]
    assert login("Alice@example.com", "hers") == 302
    # The address keeps its failures under ip_and_username: go on from another.
    after = "198.51.100.8" if key == "ip_and_username" else IP
    assert [login("ALICE@example.com", ip=after) for _ in range(3)] == [200, 200, 200]
    assert login("Alice@example.com", "hers", ip=after) == 429


def test_a_username_with_capitals_typed_any_case_gets_the_reset(site: Any) -> None:
    """A case-insensitive backend signs ``Alice`` in whatever case she types."""
    User.objects.create_user("Alice", password="hers")
    policy("username")
    backends = [BACKEND, "tests.request.test_login_resets.EmailOrUsernameBackend"]
    with override_settings(AUTHENTICATION_BACKENDS=backends):
        assert [login("alice"), login("ALICE")] == [200, 200]
        assert login("aLiCe", "hers") == 302
        assert [login("Alice") for _ in range(3)] == [200, 200, 200]
        assert login("alice", "hers") == 429


# --------------------------------------------------------------------------- an attacker's own


@pytest.mark.parametrize(
    ("victim", "attacker"),
    [
        ("alice@example.com", "Alice@example.com"),
        ("Alice@example.com", "alice@example.com"),
        ("Élise@example.com", "élise@example.com"),  # SQLite compares ASCII case only
        ("élise@example.com", "ÉLISE@example.com"),
    ],
)
@pytest.mark.parametrize("key", ["username", "ip_username", "ip_and_username"])
def test_an_attacker_signing_in_to_an_account_apart_by_case_clears_nothing(
    email_login: Any, victim: str, attacker: str, key: str
) -> None:
    """On a site that lets two e-mail addresses apart only by case be two accounts, both
    are counted under one folded name: the attacker guesses at his victim's and signs in
    to his own between the guesses. Were that to clear the count, he would guess
    without end (3 guesses per sign-in through 3/15m)."""
    User.objects.create_user("victim", email=victim, password="unknown to him")
    User.objects.create_user("mallory", email=attacker, password="his")
    policy(key)
    # Guesses from ever new addresses, but for the pair (an address and a name) counted.
    ips = iter([IP] * 9 if key == "ip_username" else [f"203.0.113.{n}" for n in range(9)])
    assert [login(victim, ip=next(ips)), login(victim, ip=next(ips))] == [200, 200]
    assert login(attacker, "his", ip=next(ips)) == 302
    assert login(victim, ip=next(ips)) == 200
    assert login(victim, ip=next(ips)) == 429  # the 4th guess in the window


def test_an_attacker_typing_his_victims_name_into_his_own_account_clears_nothing(
    site: Any,
) -> None:
    """A backend that signs in by username or e-mail address: the attacker gives his own
    account the victim's username as its e-mail address, then signs in to it typing that
    name. His success is counted under the victim's name, but the account signed in is
    not the victim's: nothing is cleared."""
    User.objects.create_user("victim", password="unknown to him")
    User.objects.create_user("mallory", email="victim", password="his")
    policy("username")
    backends = [BACKEND, "tests.request.test_login_resets.EmailOrUsernameBackend"]
    with override_settings(AUTHENTICATION_BACKENDS=backends):
        assert [login("victim"), login("victim")] == [200, 200]
        assert login("victim", "his") == 302  # signed in as mallory
        assert login("victim") == 200
        assert login("victim") == 429


def test_a_non_ascii_name_matching_too_many_accounts_clears_nothing(email_login: Any) -> None:
    """SQLite's second look (``iregex``, a letter that is not ASCII matching any one)
    reads at most ``_CANDIDATES_MAX`` accounts a login: a name mostly of such letters
    would else read every account of its length on each sign-in. Past the bound the
    count is taken as shared, so the success clears nothing (the safe side)."""
    from django_ratelimits.logins import _CANDIDATES_MAX

    User.objects.bulk_create(
        User(username=f"u{n}", email=f"{n:03d}@x.example") for n in range(_CANDIDATES_MAX + 1)
    )
    User.objects.create_user("élise", email="ééé@x.example", password="hers")
    policy("username")
    assert [login("ééé@x.example"), login("ééé@x.example")] == [200, 200]
    assert login("ééé@x.example", "hers") == 302
    assert login("ééé@x.example") == 200
    assert login("ééé@x.example") == 429  # the 4th failure in the window: none cleared
