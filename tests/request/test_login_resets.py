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
from typing import Any, Final

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
SIGMA = "\u03c3"  # GREEK SMALL LETTER SIGMA, not the Latin o it looks like


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


def guesses_around_his_sign_in(victim: str, attacker: str, key: str) -> list[int]:
    """The answers to two guesses at ``victim``'s password, the attacker's sign-in to his
    own account ``attacker`` (password ``his``), and two guesses more: from ever new
    addresses, but for the pair (an address and a name) that ``ip_username`` counts."""
    ips = iter([IP] * 5 if key == "ip_username" else [f"203.0.113.{n}" for n in range(5)])
    guesses = [login(victim, ip=next(ips)), login(victim, ip=next(ips))]
    signed_in = login(attacker, "his", ip=next(ips))
    return [*guesses, signed_in, login(victim, ip=next(ips)), login(victim, ip=next(ips))]


#: What :func:`guesses_around_his_sign_in` answers when his sign-in cleared nothing: the
#: 4th guess in the window (3/15m) is refused.
REFUSED_4TH: Final = [200, 200, 302, 200, 429]


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
    assert guesses_around_his_sign_in(victim, attacker, key) == REFUSED_4TH


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


# ------------------------------------------------------------------- apart by more than case


@pytest.mark.parametrize(
    ("victim", "attacker"),
    [
        ("strauß", "strauss"),  # ß folds to ss
        ("STRAUẞ", "strauss"),  # so does the capital ẞ
        ("Élise.strauß", "élise.strauss"),  # a name that is not ASCII: SQLite's second look
        ("İstanbul", "i\u0307stanbul"),  # İ lower-cases to two characters
        ("ἑρμῆ\u03c2", "ἑρμῆ\u03c3"),  # a final sigma folds to the medial one
        # ß and a combining acute fold to ss and the acute, which NFKC composes: sś.
        ("straß\u0301", "stras\u015b"),
        # And the other way: the attacker's name is the one that folds by more than
        # case, which a success may clear for since the user it counts is that account.
        ("strauss", "strauß"),
        ("ἑρμῆ\u03c3", "ἑρμῆ\u03c2"),
        ("i\u0307stanbul", "İstanbul"),
        ("stras\u015b", "straß\u0301"),
    ],
)
@pytest.mark.parametrize("key", ["username", "ip_username", "ip_and_username"])
def test_an_attacker_signing_in_to_an_account_apart_by_more_than_case_clears_nothing(
    site: Any, victim: str, attacker: str, key: str
) -> None:
    """``strauß`` and ``strauss`` are two accounts that Django stores side by side (its
    database compares neither ``ß`` to ``ss`` nor, on SQLite, any letter that is not
    ASCII by case), both counted as ``username:strauss``. The attacker owns the one whose
    name is the counted text but for case, and signs in to it between guesses at the
    other: were that to clear the count, he would guess without end."""
    User.objects.create_user(victim, password="unknown to him")
    User.objects.create_user(attacker, password="his")
    policy(key)
    assert guesses_around_his_sign_in(victim, attacker, key) == REFUSED_4TH


@pytest.mark.parametrize("name", ["strauss", "ἑρμῆ\u03c3", "i\u0307stanbul"])
def test_a_user_whose_name_others_could_fold_to_gets_the_reset_while_none_does(
    site: Any, name: str
) -> None:
    """``strauss`` with no account ``strauß`` (nor ``STRAUẞ``...) beside it: the count
    is his alone, and his success clears it."""
    User.objects.create_user(name, password="his")
    User.objects.create_user("strausss", password="another's")  # folds to another name
    policy("username")
    assert [login(name), login(name)] == [200, 200]
    assert login(name, "his") == 302
    assert [login(name) for _ in range(3)] == [200, 200, 200]
    assert login(name, "his") == 429


@pytest.mark.parametrize(
    "name",
    [
        "Strauß",  # counted as strauss
        "STRAUẞ",
        "Νίκος",  # a final sigma: counted with the medial one
        "ΟΔΟΣ",  # lower-cased, a final capital sigma ends as a final sigma; folded, not
        "ᏣᎳᎩ",  # Cherokee: folded to capitals, lower-cased to small letters
    ],
)
def test_a_user_whose_name_folds_by_more_than_case_gets_the_reset(site: Any, name: str) -> None:
    """The account's name had to be the counted text but for case: ``Strauß``, counted as
    ``strauss``, and every Greek name ending in a sigma never had their own failures
    cleared by their success, though no other account shares their count."""
    User.objects.create_user(name, password="hers")
    policy("username")
    assert [login(name), login(name)] == [200, 200]
    assert login(name, "hers") == 302
    assert [login(name) for _ in range(3)] == [200, 200, 200]
    assert login(name, "hers") == 429


def test_a_name_of_many_foldable_letters_clears_nothing(email_login: Any) -> None:
    """``s`` 200 times has more ways to be spelt with ``ß`` and ``ẞ`` than there are atoms
    in the universe: the victim ``ß`` 100 times is one, and no query looks for them all.
    Past ``_SPELLINGS_MAX`` spellings the count is taken as shared (as past
    ``_CANDIDATES_MAX`` accounts), so the attacker's success clears nothing."""
    victim, attacker = "ß" * 100 + "@x.example", "s" * 200 + "@x.example"
    User.objects.create_user("victim", email=victim, password="unknown to him")
    User.objects.create_user("mallory", email=attacker, password="his")
    policy("username")
    assert guesses_around_his_sign_in(victim, attacker, "username") == REFUSED_4TH


def test_an_attacker_whose_name_is_the_victims_cut_short_clears_nothing(
    email_login: Any,
) -> None:
    """A counted name is cut at 254 characters: the victim's address of 254, with an
    ``ß`` in it, folds to 255 and is counted as its first 254, the attacker's address.
    None of its spellings is the victim's, so a name of 254 characters is taken as
    shared: its success clears nothing."""
    victim = "a" * 243 + "ß@x.example"
    attacker = "a" * 243 + "ss@x.exampl"
    assert len(victim) == len(attacker) == 254
    User.objects.create_user("victim", email=victim, password="unknown to him")
    User.objects.create_user("mallory", email=attacker, password="his")
    policy("username")
    assert guesses_around_his_sign_in(victim, attacker, "username") == REFUSED_4TH


def test_the_spellings_looked_for_are_bounded() -> None:
    """The spellings of a counted name whose substrings another character folds to are
    enumerated up to ``_SPELLINGS_MAX``; past it, none (the caller takes the name as
    shared). A name without such a substring is its one spelling."""
    from django_ratelimits.identity import normalize_username
    from django_ratelimits.logins import _SPELLINGS_MAX, _spellings

    assert _spellings("alice@example.com") == ["alice@example.com"]
    assert sorted(_spellings("strauss") or ()) == ["strauss", "strauß", "strauẞ"]
    assert sorted(_spellings("sss") or ()) == sorted(["sss", "ßs", "ẞs", "sß", "sẞ"])
    # Looked for decomposed, stored composed: strasś is ß or ẞ and a combining acute.
    assert sorted(_spellings("stras\u015b") or ()) == [
        "stras\u015b",
        "straß\u0301",
        "straẞ\u0301",
    ]
    assert "\u1fb3" in (_spellings("\u03b1\u03b9") or ())  # alpha with iota subscript
    assert _spellings("s" * 200) is None
    assert _spellings("s" * 254) is None
    for length in range(1, 12):
        found = _spellings(f"{SIGMA}s" * length)
        assert found is None or 1 <= len(found) <= _SPELLINGS_MAX
        assert found is None or all(normalize_username(v) == f"{SIGMA}s" * length for v in found)
    # 6 sigmas are spelt 2**6 = 64 ways (either may be final); 7, 128.
    assert len(_spellings(SIGMA * 6) or ()) == 64 == _SPELLINGS_MAX
    assert _spellings(SIGMA * 7) is None


@pytest.mark.parametrize(
    ("counted", "queries"),
    [("alice", 1), ("strauss", 1), ("élise", 1), ("s" * 200, 0)],
)
def test_a_success_looks_for_look_alikes_in_one_query_at_most(
    django_assert_num_queries: Any, counted: str, queries: int
) -> None:
    """However many spellings a name has (and on SQLite, a name that is not ASCII), one
    query looks for every other account that could share its count; none past the
    bound."""
    from django_ratelimits.logins import _shared

    me = User.objects.create_user("me")
    with django_assert_num_queries(queries):
        _shared(User, me.pk, counted)


def test_the_characters_that_fold_by_more_than_case_are_every_one() -> None:
    """The map of folds is built from blocks of code points whose case and NFKC forms
    say nothing folds in them (about 0.1 s once a process): it holds what looking at
    every code point finds."""
    import sys
    import unicodedata

    from django_ratelimits.identity import normalize_username
    from django_ratelimits.logins import _folds

    every: dict[str, list[str]] = {}
    for point in range(sys.maxunicode + 1):
        char = chr(point)
        if 0xD800 <= point < 0xE000 or unicodedata.normalize("NFKC", char) != char:
            continue
        folded = normalize_username(char)
        if folded is not None and (folded != char.lower() or len(char.lower()) != 1):
            every.setdefault(folded, []).append(char)
    assert _folds() == {folded: tuple(chars) for folded, chars in every.items()}
    assert _folds()["ss"] == ("ß", "ẞ")
    assert _folds()[SIGMA] == ("\u03c2",)  # the final sigma
