"""The package under a project's own user model (run by ``test_user_models.py``, once per
model of ``tests.custom_users``, in a pytest process of its own; skipped otherwise).

Counting by user, naming users in the dashboard and the command, deleted users, staff
and superuser exemptions, tiers and failed logins, with a UUID key, an e-mail login
without permissions and a text key.
"""

from __future__ import annotations

import io
import json
from typing import Any

import pytest
from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command
from django.test import RequestFactory

from django_ratelimits.engine import Identity
from django_ratelimits.engine.keys import key_part, label
from django_ratelimits.identity import identities
from django_ratelimits.models import Policy
from django_ratelimits.offenders.identities import NoSuchIdentity, find_user, parse
from django_ratelimits.offenders.users import users
from django_ratelimits.policies import current, get_registry

MODEL = settings.AUTH_USER_MODEL.rpartition(".")[2]
pytestmark = [
    pytest.mark.skipif(
        not settings.AUTH_USER_MODEL.startswith("custom_users."),
        reason="run by tests/custom_users/test_user_models.py under each user model",
    ),
    pytest.mark.django_db,
]
only = {
    name: pytest.mark.skipif(name != MODEL, reason=f"{name} only")
    for name in ("UUIDUser", "EmailUser", "CharPkUser")
}


def make(name: str, **fields: Any) -> Any:
    """A user signing in as ``name`` (its e-mail address for EmailUser)."""
    model: Any = get_user_model()
    if MODEL == "EmailUser":
        return model.objects.create_user(name, **fields)
    if MODEL == "CharPkUser":
        fields.setdefault("id", f"sub|{name}")
    return model.objects.create_user(name, **fields)


def run(*args: str) -> str:
    out = io.StringIO()
    call_command("ratelimits", *args, stdout=out)
    return out.getvalue()


def signed_in(user: Any) -> Any:
    request = RequestFactory().get("/api/", REMOTE_ADDR="198.51.100.7")
    request.user = user
    return request


def spec(key: str) -> Any:
    Policy.objects.create(name=f"by-{key}", rates="5/m", key=key)
    get_registry().refresh()
    found = current().get(f"by-{key}")
    assert found is not None
    return found


def test_a_user_is_counted_and_named_as_one_identity() -> None:
    alice = make("alice@example.com" if MODEL == "EmailUser" else "alice")
    counted = identities(signed_in(alice), spec("user"))
    assert counted == [Identity("user", str(alice.pk))]
    # Staff naming the user by id or by username name what the limiter counts.
    assert find_user(str(alice.pk)) == (str(alice.pk), False)
    assert find_user(alice.get_username()) == (str(alice.pk), False)
    assert find_user(alice.get_username(), former=True) == (str(alice.pk), False)
    found = users([f"user:{alice.pk}"])
    assert found.names == {f"user:{alice.pk}": alice.get_username()} and not found.gone


@only["UUIDUser"]
def test_every_text_form_of_a_uuid_names_the_one_identity_counted() -> None:
    alice = make("alice")
    for text in (alice.pk.hex, str(alice.pk).upper(), f"{{{alice.pk}}}", alice.pk.urn):
        assert parse(f"user:{text}") == Identity("user", str(alice.pk))
    pk = alice.pk
    alice.delete()
    assert parse(f"user:{pk.hex.upper()}", former_users=True) == Identity("user", str(pk))
    with pytest.raises(NoSuchIdentity):
        parse("user:42", former_users=True)  # no UUID: no user, deleted or not


STANDALONE = pytest.mark.parametrize("redis_client", ["standalone"], indirect=True)


@only["CharPkUser"]
@STANDALONE
def test_a_live_user_named_by_username_is_not_taken_for_a_deleted_id(site_redis: Any) -> None:
    """With a text key any value is an id a user may have had: a username a live user
    has must still name that user (``show user:alice``), never a deleted ``alice``
    that no one was counted as, said to be gone while alice's own data stays."""
    alice = make("alice")
    assert find_user("alice", former=True) == (str(alice.pk), False)
    shown = json.loads(run("show", "user:alice", "--json"))
    assert shown["identity"] == f"user:{alice.pk}" and shown["deleted_users"] == []


@only["CharPkUser"]
def test_a_deleted_text_id_is_still_named_by_its_id() -> None:
    bob = make("bob")
    pk = str(bob.pk)
    bob.delete()
    assert find_user(pk, former=True) == (pk, True)
    with pytest.raises(NoSuchIdentity):
        find_user(pk)
    with pytest.raises(CommandError):
        run("block", f"user:{pk}", "--for", "5m")


@only["EmailUser"]
def test_a_user_model_without_permissions_or_staff_is_never_exempt() -> None:
    from django_ratelimits.decide import _exempt
    from django_ratelimits.effective import _groups

    alice = make("alice@example.com")
    Policy.objects.create(
        name="staffless", rates="5/m", key="user", exempt_staff=True, exempt_superusers=True
    )
    get_registry().refresh()
    staffless = current().get("staffless")
    assert staffless is not None
    request = signed_in(alice)
    assert not _exempt(request, staffless)
    assert _groups(request, alice) == frozenset()


def behind_ip(client: Any, address: str) -> dict[str, tuple[str, str | None]]:
    """The dashboard's page of ``ip:<address>``: each identity seen behind it, by its
    ``who``, as the page names and links it."""
    from django.urls import reverse

    page = client.get(reverse("admin:django_ratelimits_offender"), {"kind": "ip", "value": address})
    assert page.status_code == 200
    return {who.who: (who.text, who.url) for who in page.context["behind"]}


@only["EmailUser"]
@STANDALONE
def test_an_email_login_with_capitals_is_reset_by_its_own_success_only(site_redis: Any) -> None:
    """Under an e-mail user model, the address as stored (``Alice@example.com``) is
    counted folded: her success clears it (it never did); an attacker's own account
    ``bob@example.com`` beside his victim's ``Bob@example.com`` clears nothing."""
    from django.test import Client, override_settings

    from django_ratelimits.logins import BACKEND

    def login(email: str, password: str = "wrong") -> int:
        body = {"username": email, "password": password}
        return int(Client(REMOTE_ADDR="198.51.100.30").post("/accounts/login/", body).status_code)

    make("Alice@example.com", password="hers")
    Policy.objects.create(
        name="logins", rates="3/15m", counts="failed_logins", key="username", reset_on_success=True
    )
    get_registry().refresh()
    backends = [BACKEND, "django.contrib.auth.backends.ModelBackend"]
    with override_settings(ROOT_URLCONF="tests.login_urls", AUTHENTICATION_BACKENDS=backends):
        assert [login("alice@example.com"), login("Alice@example.com")] == [200, 200]
        assert login("Alice@example.com", "hers") == 302
        assert [login("Alice@example.com") for _ in range(3)] == [200, 200, 200]
        assert login("Alice@example.com", "hers") == 429
        make("Bob@example.com", password="unknown to him")
        make("bob@example.com", password="his")  # two accounts apart by case
        assert [login("Bob@example.com"), login("Bob@example.com")] == [200, 200]
        assert login("bob@example.com", "his") == 302
        assert login("Bob@example.com") == 200
        assert login("Bob@example.com") == 429  # the 4th guess at Bob's


def requests_from(address: str, *people: Any) -> None:
    from django.test import Client

    Policy.objects.get_or_create(
        name="office",
        defaults={"rates": "100/m", "key": "ip", "path": "^/api/hello", "record_metadata": "every"},
    )
    get_registry().refresh()
    for user in people:
        client = Client(REMOTE_ADDR=address)
        client.force_login(user)
        assert client.get("/api/hello").status_code == 200


def staff_client() -> Any:
    from django.test import Client

    client = Client()
    client.force_login(make("boss", is_staff=True, is_superuser=True))
    return client


def user_page(user: Any) -> str:
    from urllib.parse import urlencode

    from django.urls import reverse

    query = urlencode({"kind": "user", "value": str(user.pk)})
    return f"{reverse('admin:django_ratelimits_offender')}?{query}"


@only["CharPkUser"]
@STANDALONE
def test_a_live_user_whose_id_holds_a_bar_is_named_behind_an_ip(site_redis: Any) -> None:
    """Hit entries are ``|``-separated: alice's id ``sub|alice`` was written
    ``user:sub/alice``, which the page of her IP called a user that no longer exists."""
    alice = make("alice")
    requests_from("198.51.100.21", alice)
    shown = behind_ip(staff_client(), "198.51.100.21")
    assert shown == {"user:sub|alice": ("alice (user sub|alice)", user_page(alice))}


BARS = "|" * 64  # an id no entry can hold whole: written cut, with its key's digest


@only["CharPkUser"]
@STANDALONE
@pytest.mark.parametrize(
    ("offender_id", "other_id"),
    [
        ("sub|bob", "sub/bob"),  # the bar an entry cannot hold, as it was replaced
        ("sub%7Cbob", "sub|bob"),  # an escape written out by hand
        ("sub%257Cbob", "sub%7Cbob"),  # and an escaped escape
        ("-", "%2D"),  # the user "-" is written user:%2D, as "-" is anonymous's
        ("%2D", "-"),
        (BARS, "/" * 64 + "\u2026 " + key_part(BARS)),  # the form the entry cuts it to
    ],
)
def test_an_id_chosen_to_read_as_another_users_never_names_that_user(
    site_redis: Any, offender_id: str, other_id: str
) -> None:
    """A user's requests behind an address are theirs on its page, whatever their id:
    never those of a user whose id theirs is written as, nor of a user said gone."""
    offender = make("offender", id=offender_id)
    make("other", id=other_id)
    requests_from("198.51.100.22", offender)
    ((text, url),) = behind_ip(staff_client(), "198.51.100.22").values()
    assert "other" not in text and "no longer exists" not in text
    # Named by a digest (BARS), the user is found by the id their entries read as.
    assert (text, url) == (f"offender (user {offender_id})", user_page(offender))


@only["CharPkUser"]
@STANDALONE
@pytest.mark.parametrize("alice_id", ["sub|alice", "-"])
def test_forgetting_an_address_reaches_the_list_of_a_user_whose_id_holds_a_bar(
    site_redis: Any, alice_id: str
) -> None:
    """Forget finds the lists of those an address's entries name: alice's (``sub|alice``)
    was looked for under ``sub/alice``, and kept the forgotten address; with the id
    ``-`` she was written as anonymous (``user:-``), and her list was not looked for."""
    from django_ratelimits.engine import get_engine
    from django_ratelimits.engine.offenders import OffenderReader

    alice = make("alice", id=alice_id)
    Policy.objects.create(
        name="both", rates="100/m", key="ip_and_user", path="^/api/hello", record_metadata="every"
    )
    requests_from("198.51.100.23", alice)
    reader, her = OffenderReader(get_engine()), Identity("user", str(alice.pk))
    assert [hit.who for hit in reader.detail(her).hits] == ["ip:198.51.100.23"]
    run("forget", "ip:198.51.100.23")
    assert reader.detail(her).hits == ()
    requests_from("198.51.100.24", alice)
    run("forget", f"user:{alice.pk}")
    assert reader.detail(Identity("ip", "198.51.100.24")).hits == ()


def listing(client: Any) -> dict[str, Any]:
    """The dashboard's offenders page, as its JSON endpoint gives it."""
    from django.urls import reverse

    response = client.get(reverse("admin:django_ratelimits_offenders_json"))
    assert response.status_code == 200
    return json.loads(response.content)  # type: ignore[no-any-return]


@only["CharPkUser"]
@STANDALONE
@pytest.mark.parametrize("user_id", ["|" * 64, "\u2026" * 40, "a" * 151, "-"])
def test_a_request_by_a_user_whose_id_an_entry_holds_cut_counts_once(
    site_redis: Any, user_id: str
) -> None:
    """The IP's list names such a user cut, with a digest (``user:////…… ~Ab3…``), the
    offenders page names the user's row by its id: the activity chart took them for
    two pairs of identities and counted each request of the user twice (6 for 3)."""
    from django.test import Client

    offender = make("offender", id=user_id)
    Policy.objects.create(
        name="both", rates="2/m", key="ip_and_user", path="^/api/hello", record_metadata="every"
    )
    get_registry().refresh()
    client = Client(REMOTE_ADDR="198.51.100.25")
    client.force_login(offender)
    assert [client.get("/api/hello").status_code for _ in range(3)] == [200, 200, 429]
    board = listing(staff_client())
    rows = {row["kind"]: row for row in board["offenders"]}
    assert set(rows) == {"ip", "user"}  # both rows on the page: each request in both
    assert rows["user"]["name"] == f"offender (user {user_id})"
    assert (sum(board["activity"]["hits"]), sum(board["activity"]["denied"])) == (3, 1)
    # The IP's row names the user as the user's own row does, linked to their page.
    ((behind,),) = [rows["ip"]["behind"]]
    assert (behind["name"], behind["count"]) == (f"offender (user {user_id})", 3)
    shown = behind_ip(staff_client(), "198.51.100.25")
    assert list(shown.values()) == [(f"offender (user {user_id})", user_page(offender))]


@only["CharPkUser"]
@STANDALONE
@pytest.mark.parametrize("victim_id", ["|" * 64, "sub|victim\x00"])
def test_an_id_ending_as_a_cut_one_does_is_its_own_user_behind_an_ip(
    site_redis: Any, victim_id: str
) -> None:
    """A user picking an id that ends as an entry ends an id it holds cut (``…``, a space
    and a digest: here the digest of another user's id, copied from the dashboard) was
    read as that other user, cut: both users' requests behind the address were one
    identity on its page, and forgetting the address dropped it from the victim's list
    and left it in the attacker's own."""
    from django_ratelimits.engine import get_engine
    from django_ratelimits.engine.offenders import OffenderReader

    victim = make("victim", id=victim_id)
    shown = ("/" * 64) if victim_id == "|" * 64 else "sub|victim\ufffd"
    attacker = make("attacker", id=f"{shown}\u2026 {key_part(victim_id)}")
    Policy.objects.create(
        name="both", rates="100/m", key="ip_and_user", path="^/api/hello", record_metadata="every"
    )
    requests_from("198.51.100.26", attacker, victim)
    behind = behind_ip(staff_client(), "198.51.100.26")
    assert (
        sorted(behind.values())
        == [  # each user as themselves, never one as the other
            (f"attacker (user {attacker.pk})", user_page(attacker)),
            (f"victim (user {label(Identity('user', victim_id))[5:]})", user_page(victim)),
        ]
    )
    reader = OffenderReader(get_engine())
    theirs = reader.detail(Identity("user", str(attacker.pk))).hits
    assert [hit.who for hit in theirs] == ["ip:198.51.100.26"]
    run("forget", "ip:198.51.100.26")
    for user in (attacker, victim):
        assert reader.detail(Identity("user", str(user.pk))).hits == ()


@only["CharPkUser"]
@STANDALONE
def test_a_user_whose_id_is_a_dash_is_named_not_anonymous(site_redis: Any) -> None:
    """Hit entries write an anonymous client ``user:-``, which was also how they wrote
    the user whose id is ``-``: the dashboard and the command showed that user as
    anonymous, behind an address and in their own row. Beside an anonymous client of
    the same address, each is itself now."""
    from django.test import Client

    dash = make("dash", id="-")
    requests_from("198.51.100.27", dash)
    assert Client(REMOTE_ADDR="198.51.100.27").get("/api/hello").status_code == 200
    assert behind_ip(staff_client(), "198.51.100.27") == {
        "user:%2D": ("dash (user -)", user_page(dash)),
        "user:-": ("anonymous", None),
    }
    Policy.objects.create(name="per-user", rates="1/m", key="user", path="^/api/hello")
    get_registry().refresh()
    client = Client(REMOTE_ADDR="198.51.100.28")
    client.force_login(dash)
    assert [client.get("/api/hello").status_code for _ in range(2)] == [200, 429]
    rows = {row["kind"]: row for row in listing(staff_client())["offenders"]}
    assert rows["user"]["name"] == "dash (user -)"
    assert "user:- (dash)" in run("offenders")
    assert run("show", "user:-").splitlines()[0] == "user:- (dash)"


@only["CharPkUser"]
def test_an_override_of_the_user_whose_id_is_a_dash_names_that_user() -> None:
    """``ratelimits overrides`` showed the override of the user ``-`` as ``anonymous``,
    and once that user was deleted, admin's list and the command called the override in
    force: the user was looked for as anonymous, so never found gone."""
    from django.urls import reverse

    from tests.overrides_helpers import override

    Policy.objects.create(name="api", rates="10/s", key="user", path="^/api/")
    dash = make("dash", id="-")
    override("user:-", "100/h", policy=None)
    (line,) = [line for line in run("overrides").splitlines() if line.startswith("user:-")]
    assert line.startswith("user:- (dash) ") and " yes " in line
    dash.delete()
    (line,) = [line for line in run("overrides").splitlines() if line.startswith("user:-")]
    assert line.startswith("user:- (no longer exists) ") and " no " in line
    page = staff_client().get(reverse("admin:django_ratelimits_rateoverride_changelist"))
    assert "user - (no longer exists)" in page.content.decode()
