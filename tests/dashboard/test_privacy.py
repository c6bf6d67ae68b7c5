"""Privacy (docs/privacy.md): hashed addresses, retention, and forgetting an identity.

Whole requests through the middleware on real Redis (standalone and cluster); Redis
is then read key by key (tests may scan; the engine never does). The engine runs on
a FakeClock, under which every key gets 60 s more TTL than the settings say: a key
"gone after N seconds" is one whose TTL is at most N s plus that allowance.
"""

from __future__ import annotations

import io
import json
import re
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlencode

import pytest
from django.conf import settings
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import AbstractBaseUser
from django.core.management import CommandError, call_command
from django.test import Client, override_settings
from django.urls import reverse

from django_ratelimits.conf import get_settings
from django_ratelimits.engine import Identity, get_engine
from django_ratelimits.engine.offenders import OffenderReader
from django_ratelimits.identity import counted_ip
from django_ratelimits.models import Policy
from django_ratelimits.policies import get_registry
from django_ratelimits.testing import FakeClock
from tests.engine_helpers import EPOCH_US, all_keys

ADDRESS = "203.0.113.5"
OTHER = "198.51.100.77"
METADATA_TTL = 60
RETENTION = 600
FAKE_CLOCK_EXTRA_MS = 60_000  # what every key's TTL gets on a FakeClock (testing.py)
PAGE = "admin:django_ratelimits_offenders"
DETAIL = "admin:django_ratelimits_offender"
ACTION = "admin:django_ratelimits_offender_action"


@pytest.fixture
def hashed(site_redis: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """The site with HASH_IPS on, short retention, one shard, one policy, a FakeClock."""
    config = {
        **settings.DJANGO_RATELIMITS,
        "HASH_IPS": True,
        "METADATA_TTL": METADATA_TTL,
        "OFFENDER_RETENTION": RETENTION,
        "SHARDS": 1,
        # Counters and identity budgets live their window: within the retention here.
        "IDENTITY_BUDGET": "50/5m",
    }
    with override_settings(DJANGO_RATELIMITS=config):
        Policy.objects.create(
            name="hello",
            rates="2/m",
            algorithm="sliding_log",
            key="ip_and_user",
            path="^/api/hello",
            record_metadata="every",
        )
        get_registry().refresh()
        monkeypatch.setattr(get_engine(), "clock", FakeClock(EPOCH_US))
        yield site_redis


def hit(ip: str, user: Any = None, times: int = 1) -> list[int]:
    client = Client(REMOTE_ADDR=ip)
    if user is not None:
        client.force_login(user)
    return [client.get("/api/hello").status_code for _ in range(times)]


def traffic(django_user_model: Any) -> AbstractBaseUser:
    """alice from ADDRESS until denied, then ADDRESS anonymously: ADDRESS is an offender."""
    alice = django_user_model.objects.create_user("alice", password="x")
    assert hit(ADDRESS, alice, 3) == [200, 200, 429]
    assert hit(ADDRESS) == [429]
    return alice  # type: ignore[no-any-return]


def hashed_value(address: str = ADDRESS) -> str:
    return counted_ip(address, get_settings())


def contents(client: Client_, key: bytes) -> list[bytes]:
    """Every member, field and value of ``key``, whatever its type."""
    kind = client.type(key)
    if kind == b"string":
        return [client.get(key) or b""]
    if kind == b"hash":
        return [part for pair in client.hgetall(key).items() for part in pair]
    if kind == b"list":
        return list(client.lrange(key, 0, -1))
    if kind == b"zset":
        return [member for member, _ in client.zrange(key, 0, -1, withscores=True)]
    assert kind == b"none", (key, kind)  # expired since the scan
    return []


def naming(client: Client_, *needles: str | bytes) -> dict[bytes, int]:
    """The keys whose name or content holds one of ``needles``, with their TTL (ms)."""
    wanted = [n.encode() if isinstance(n, str) else n for n in needles]
    found = {}
    for key in all_keys(client):
        if any(n in part for n in wanted for part in (key, *contents(client, key))):
            found[key] = client.pttl(key)
    return found


Client_ = Any  # Redis or RedisCluster (their stubs type replies as str | bytes)


def outliving(client: Client_, seconds: int, *needles: str | bytes) -> dict[bytes, int]:
    """The keys naming ``needles`` that Redis will not have expired in ``seconds``."""
    limit = seconds * 1000 + FAKE_CLOCK_EXTRA_MS
    return {k: ttl for k, ttl in naming(client, *needles).items() if not 0 < ttl <= limit}


def expire(client: Client_, seconds: int) -> None:
    """Delete what Redis would have expired ``seconds`` from now (its clock is real)."""
    for key in all_keys(client):
        ttl = client.pttl(key)
        if 0 < ttl <= seconds * 1000 + FAKE_CLOCK_EXTRA_MS:
            client.delete(key)


def page_of(client: Client, kind: str, value: str) -> str:
    response = client.get(f"{reverse(DETAIL)}?{urlencode({'kind': kind, 'value': value})}")
    assert response.status_code == 200
    return response.content.decode()


def idents(client: Client) -> list[str]:
    page = client.get(reverse(PAGE)).content.decode()
    return re.findall(r'<tr class="offender[^"]*" data-ident="([^"]+)"', page)


def act(client: Client, **fields: Any) -> Any:
    asked = client.post(reverse(ACTION), fields)
    assert asked.status_code == 200 and b'id="confirm-action"' in asked.content
    return client.post(reverse(ACTION), {**fields, "confirm": "on"})


# --------------------------------------------------------------------------- hashing


def test_the_address_is_only_in_recent_hit_entries(
    hashed: Any, django_user_model: Any, admin_client: Client
) -> None:
    alice = traffic(django_user_model)
    digest = hashed_value()
    assert re.fullmatch(r"h:[0-9a-f]{32}", digest)
    # The hash is what keys and the offender index name...
    assert any(f"ip:{digest}".encode() in key for key in naming(hashed, digest))
    assert f"ip:{digest}" in idents(admin_client)
    # ... and the address is in the metadata lists only (the IP's, alice's), which go
    # within METADATA_TTL (a quarter more at most: their TTL is renewed in steps).
    holding = naming(hashed, ADDRESS)
    assert holding and all(b":m:" in key for key in holding)
    assert not outliving(hashed, METADATA_TTL * 5 // 4, ADDRESS)
    # While a hit holds it, the dashboard shows the address: the row, the IP's page,
    # and the IP behind alice.
    assert ADDRESS in admin_client.get(reverse(PAGE)).content.decode()
    assert f'<dd class="rl-value">{ADDRESS}</dd>' in page_of(admin_client, "ip", ADDRESS)
    assert ADDRESS in page_of(admin_client, "user", str(alice.pk))
    out = io.StringIO()
    call_command("ratelimits", "show", "user:alice", "--json", stdout=out)
    hits = json.loads(out.getvalue())["hits"]
    assert {(h["who"], h["address"]) for h in hits} == {(f"ip:{digest}", ADDRESS)}

    expire(hashed, METADATA_TTL * 5 // 4)
    assert naming(hashed, ADDRESS) == {}
    page = page_of(admin_client, "ip", ADDRESS)  # staff may still name it by address
    assert ADDRESS not in page
    assert f'<dd class="rl-value">hashed address {digest[:10]}…</dd>' in page
    assert f"ip:{digest}" in idents(admin_client)  # the record outlives the hits


def test_ipv6_is_grouped_by_prefix_before_it_is_hashed(hashed: Any, admin_client: Client) -> None:
    assert hit("2001:db8::1", times=2) + hit("2001:db8::ffff") == [200, 200, 429]
    assert naming(hashed, hashed_value("2001:db8::/64"))
    assert not outliving(hashed, METADATA_TTL * 5 // 4, "2001:db8")
    page = page_of(admin_client, "ip", "2001:db8::42")  # staff name any address of it
    assert '<dd class="rl-value">2001:db8::/64</dd>' in page


def test_a_network_filter_says_it_cannot_match_hashed_addresses(
    hashed: Any, django_user_model: Any, admin_client: Client
) -> None:
    traffic(django_user_model)
    page = admin_client.get(reverse(PAGE), {"ip": "203.0.113.0/24"}).content.decode()
    assert "Addresses are stored hashed (HASH_IPS)" in page


def test_nothing_about_the_identity_outlives_the_retention(
    hashed: Any, django_user_model: Any
) -> None:
    alice = traffic(django_user_model)
    me = (hashed_value(), ADDRESS, f"user:{alice.pk}")
    assert naming(hashed, *me)
    get_engine().clock.advance(RETENTION + 1)  # type: ignore[union-attr]
    # Another offender in the same (only) shard keeps the shared index alive: the
    # identity must leave it all the same.
    assert hit(OTHER, times=3)[-1] == 429
    assert outliving(hashed, RETENTION, *me) == {}


def test_an_ended_block_leaves_the_override_index_with_it(
    hashed: Any, django_user_model: Any
) -> None:
    """A block (staff's, or a policy's ban: the same script) puts the identity in its
    shard's override index. Once the block has ended, no other override is set in the
    shard to trim it: the index must not keep naming the identity for a year (its TTL
    was a year and a day, however short the overrides it held)."""
    alice = traffic(django_user_model)
    me = (hashed_value(), ADDRESS, f"user:{alice.pk}")
    run_command("block", f"ip:{ADDRESS}", "--for", "5m")
    run_command("allow", f"user:{alice.pk}", "--for", "1m")
    get_engine().clock.advance(RETENTION + 1)
    assert hit(OTHER, times=3)[-1] == 429
    assert outliving(hashed, RETENTION, *me) == {}


# --------------------------------------------------------------------------- actions by IP


def test_block_lift_and_reset_by_address_work_on_the_hash(
    hashed: Any, django_user_model: Any, admin_client: Client, admin_user: Any
) -> None:
    traffic(django_user_model)
    act(admin_client, kind="ip", value=ADDRESS, action="reset", policy="", forget="on")
    assert hit(ADDRESS) == [200]
    act(admin_client, kind="ip", value=ADDRESS, action="block", seconds="300")
    assert hit(ADDRESS) == [429]
    assert hit(OTHER) == [200]
    call_command("ratelimits", "lift", f"ip:{ADDRESS}", stdout=io.StringIO())
    assert hit(ADDRESS) == [200]
    call_command("ratelimits", "block", f"ip:{ADDRESS}", "--for", "5m", stdout=io.StringIO())
    assert hit(ADDRESS) == [429]
    messages = [e.change_message for e in LogEntry.objects.filter(user=admin_user)]
    assert all(ADDRESS not in m for m in messages) and len(messages) == 2


# --------------------------------------------------------------------------- forget


def test_forget_on_the_dashboard_erases_the_address(
    hashed: Any, django_user_model: Any, admin_client: Client, admin_user: Any
) -> None:
    alice = traffic(django_user_model)
    digest = hashed_value()
    assert f"ip:{digest}" in idents(admin_client)
    response = act(admin_client, kind="ip", value=ADDRESS, action="forget")
    assert response.status_code == 302
    assert naming(hashed, digest, ADDRESS) == {}  # alice's entries naming it too
    assert f"ip:{digest}" not in idents(admin_client)
    assert f"user:{alice.pk}" in idents(admin_client)  # someone else: kept
    assert [e.change_message for e in LogEntry.objects.filter(user=admin_user)] == [
        f"Forgot ip:{digest}"
    ]


def test_forget_keeps_the_other_entries_of_the_lists_it_cleans(
    hashed: Any, django_user_model: Any
) -> None:
    bob = django_user_model.objects.create_user("bob", password="x")
    assert hit(OTHER, bob) + hit(ADDRESS, bob) + hit(OTHER, bob) == [200, 200, 429]
    reader, me = OffenderReader(get_engine()), Identity("user", str(bob.pk))
    before = reader.detail(me).hits
    assert [h.address for h in before] == [OTHER, ADDRESS, OTHER]  # newest first
    call_command("ratelimits", "forget", f"ip:{ADDRESS}", stdout=io.StringIO())
    assert reader.detail(me).hits == (before[0], before[2])
    assert hashed.pttl(get_engine().keys.of(me).metadata) > 0  # its TTL is kept
    assert naming(hashed, hashed_value(), ADDRESS) == {}


def test_forget_in_the_terminal_erases_a_user_everywhere(
    hashed: Any, django_user_model: Any, admin_client: Client
) -> None:
    alice = traffic(django_user_model)
    me = Identity("user", str(alice.pk))
    member = get_engine().keys.of(me).member  # its entry in the IP's identity budget
    assert naming(hashed, f"user:{alice.pk}", member)
    out = io.StringIO()
    call_command("ratelimits", "forget", "user:alice", stdout=out)
    assert f"user:{alice.pk}: forgotten;" in out.getvalue()
    assert naming(hashed, f"user:{alice.pk}", member) == {}
    assert f"user:{alice.pk}" not in idents(admin_client)
    assert f"ip:{hashed_value()}" in idents(admin_client)  # the IP is another identity


def test_a_deleted_users_data_is_lifted_and_forgotten_in_the_terminal(
    hashed: Any, django_user_model: Any
) -> None:
    """The right to erasure: the account is deleted first, then Redis is asked to forget
    it. Its id is what the limiter counted; resolving it to a user refused it (a review)."""
    alice = traffic(django_user_model)
    pk = str(alice.pk)
    run_command("block", f"user:{pk}", "--for", "30d")
    assert naming(hashed, f"user:{pk}")
    alice.delete()
    shown = json.loads(run_command("show", f"user:{pk}", "--json"))
    assert shown["override"]["mode"] == "blocked" and shown["offender"]["denials"] == 1
    assert json.loads(run_command("lift", f"user:{pk}", "--json"))["lifted"]["mode"] == "blocked"
    run_command("reset", f"user:{pk}", "--keep-record")
    assert naming(hashed, f"user:{pk}")  # its record, and hit entries naming it
    erased = json.loads(run_command("forget", f"user:{pk}", "--json"))
    assert erased["identity"] == f"user:{pk}" and erased["keys_deleted"] > 0
    assert naming(hashed, f"user:{pk}") == {}
    # A user that is gone is not blocked or allow-listed: nothing would be counted.
    for action in ("block", "allow"):
        with pytest.raises(CommandError, match=r"no user has the id or username .*by its id"):
            run_command(action, f"user:{pk}", "--for", "5m")
    # A username no user has was never counted (users are counted by id): still refused.
    with pytest.raises(CommandError, match="no user has the id or username 'alice'"):
        run_command("forget", "user:alice")


def test_forgetting_a_deleted_id_never_erases_the_user_whose_username_it_is(
    hashed: Any, django_user_model: Any
) -> None:
    """A deleted user's id is the id, even where a live user's username reads the same:
    forgetting it erased (and lifted) the live user named "<id>" instead, and left the
    deleted user's keys (a privacy review)."""
    gone = traffic(django_user_model)
    pk = str(gone.pk)
    gone.delete()
    other = django_user_model.objects.create_user(pk, password="x")
    run_command("block", f"user:{other.pk}", "--for", "1h")
    assert json.loads(run_command("show", f"user:{pk}", "--json"))["identity"] == f"user:{pk}"
    erased = json.loads(run_command("forget", f"user:{pk}", "--json"))
    assert erased["identity"] == f"user:{pk}" and erased["keys_deleted"] > 0
    assert naming(hashed, f"user:{pk}") == {}
    assert naming(hashed, f"user:{other.pk}"), "the live user's block stays"
    # Where no user had the id, the username still names its user for an action.
    assert (
        json.loads(run_command("block", f"user:{pk}", "--for", "5m", "--json"))["identity"]
        == f"user:{other.pk}"
    )


def test_a_deleted_users_page_lifts_and_forgets(
    hashed: Any, django_user_model: Any, admin_client: Client
) -> None:
    alice = traffic(django_user_model)
    pk = str(alice.pk)
    run_command("block", f"user:{pk}", "--for", "30d")
    alice.delete()
    assert f"user:{pk}" in idents(admin_client)
    page = page_of(admin_client, "user", pk)  # was a 404: the row's link led nowhere
    assert 'id="user-gone"' in page and f"user {pk} (no longer exists)" in page
    assert 'id="action-lift"' in page and 'id="action-forget"' in page
    assert 'id="action-block"' not in page and 'id="action-allow"' not in page
    refused = admin_client.post(
        reverse(ACTION), {"kind": "user", "value": pk, "action": "block", "seconds": "300"}
    )
    assert (
        refused.status_code == 400 and "no user has the id or username" in refused.content.decode()
    )
    assert act(admin_client, kind="user", value=pk, action="lift").status_code == 302
    assert act(admin_client, kind="user", value=pk, action="forget").status_code == 302
    assert naming(hashed, f"user:{pk}") == {}
    assert f"user:{pk}" not in idents(admin_client)


def run_command(*args: str) -> str:
    out = io.StringIO()
    call_command("ratelimits", *args, stdout=out)
    return out.getvalue()


def test_forget_needs_the_reset_permission(
    hashed: Any, django_user_model: Any, client: Client
) -> None:
    traffic(django_user_model)
    viewer = django_user_model.objects.create_user("viewer", password="x", is_staff=True)
    from django.contrib.auth.models import Permission

    viewer.user_permissions.add(Permission.objects.get(codename="view_offenders"))
    client.force_login(viewer)
    page = page_of(client, "ip", ADDRESS)
    assert 'id="action-forget"' not in page
    fields = {"kind": "ip", "value": ADDRESS, "action": "forget", "confirm": "on"}
    assert client.post(reverse(ACTION), fields).status_code == 403
    assert naming(hashed, hashed_value())


def test_a_row_recorded_before_hash_ips_is_marked_and_opens_no_other_identity(
    site_redis: Any, admin_client: Client
) -> None:
    # Denied as 203.0.113.5, then HASH_IPS on: the record stays until the retention,
    # but the address's page is now the hashed identity's. The row must not link there
    # (a page saying "none recorded" beside a row of 3 denials), and says why.
    Policy.objects.create(name="tight", rates="1/h", algorithm="gcra", key="ip", path="^/api/")
    get_registry().refresh()
    client = Client(REMOTE_ADDR="203.0.113.5")
    assert [client.get("/api/hello").status_code for _ in range(4)] == [200, 429, 429, 429]
    hashed = {**settings.DJANGO_RATELIMITS, "HASH_IPS": True}
    with override_settings(DJANGO_RATELIMITS=hashed):
        page = admin_client.get(reverse("admin:django_ratelimits_offenders"))
        (row,) = json.loads(
            admin_client.get(reverse("admin:django_ratelimits_offenders_json")).content
        )["offenders"]
    assert row["denials"] == 3 and row["detail_url"] is None and row["stale"] is True
    assert "counted before HASH_IPS or the address prefix changed" in page.content.decode()
