"""Shard placement is keyed with a secret, so nobody can choose identities that
share a victim's shard and push its record out of the capped offender index;
every reader (dashboard, command) places identities as the writer does."""

from __future__ import annotations

import hashlib
import hmac
import io
import itertools
from collections.abc import Iterator
from typing import Any

import pytest
from django.conf import settings
from django.core.management import call_command
from django.test import Client, override_settings
from django.urls import reverse

from django_ratelimits.conf import SHARD_KEY_PURPOSE, get_settings
from django_ratelimits.engine import Check, Engine, Identity, KeySpace, Limit, get_engine
from django_ratelimits.engine.offenders import OffenderReader
from django_ratelimits.models import Policy
from django_ratelimits.policies import current
from django_ratelimits.rates import parse_rates
from django_ratelimits.testing import FakeClock

VICTIM = Identity("ip", "203.0.113.7")
ONE_A_MINUTE = [Limit("login", parse_rates("1/m")[0])]
SECRET = "a-custom-shard-secret-for-tests"


def placements(space: KeySpace, count: int = 200) -> list[str]:
    return [space.of(Identity("ip", f"10.0.0.{n}")).tag for n in range(count)]


def test_placement_depends_on_the_secret() -> None:
    unkeyed, one, other = KeySpace(), KeySpace(secret=b"one"), KeySpace(secret=b"other")
    assert placements(one) != placements(unkeyed)
    assert placements(one) != placements(other)
    assert placements(one) == placements(KeySpace(secret=b"one"))  # and only on it


# get_engine() makes no connection: an unreachable URL is enough here.
UNUSED = "redis://127.0.0.1:1/0"


@override_settings(DJANGO_RATELIMITS={"REDIS": UNUSED})
def test_the_default_shard_key_is_an_hmac_of_secret_key_never_secret_key_itself() -> None:
    key = get_settings().shard_key
    assert key == hmac.new(settings.SECRET_KEY.encode(), SHARD_KEY_PURPOSE, hashlib.sha256).digest()
    assert get_engine().keys.secret == key
    assert settings.SECRET_KEY.encode() not in key
    assert "secret" not in repr(get_engine().keys)


def test_the_shard_secret_setting_and_a_rotated_secret_key_move_identities() -> None:
    with override_settings(DJANGO_RATELIMITS={"REDIS": UNUSED}):
        default = get_engine().keys
    with override_settings(DJANGO_RATELIMITS={"REDIS": UNUSED, "SHARD_SECRET": SECRET}):
        assert "shard_secret" not in repr(get_settings()) and SECRET not in repr(get_settings())
        assert get_engine().keys.secret == get_settings().shard_key != default.secret
        assert placements(get_engine().keys) != placements(default)
    with override_settings(DJANGO_RATELIMITS={"REDIS": UNUSED}, SECRET_KEY="rotated-secret-key"):
        assert placements(get_engine().keys) != placements(default)


def chosen_offline(victim: Identity, space: KeySpace, count: int) -> list[Identity]:
    """``count`` client addresses whose keys share ``victim``'s shard in ``space``."""
    shard = space.of(victim).index
    candidates = (
        Identity("ip", f"10.{n // 65536}.{n // 256 % 256}.{n % 256}") for n in itertools.count()
    )
    return list(itertools.islice((c for c in candidates if space.of(c).index == shard), count))


def denied_in_turn(engine: Engine, identities: list[Identity]) -> None:
    """Each identity denied once, one second after the previous one."""
    assert isinstance(engine.clock, FakeClock)
    for identity in identities:
        engine.check([Check(identity, ONE_A_MINUTE)])
        assert not engine.check([Check(identity, ONE_A_MINUTE)]).allowed
        engine.clock.advance(1)


def victim_record_after_attack(engine: Engine, attackers: list[Identity]) -> object:
    denied_in_turn(engine, [VICTIM, *attackers])
    return OffenderReader(engine).detail(VICTIM).offender


@pytest.fixture
def small_index(site_redis: Any) -> Iterator[Any]:
    """The limiter's Redis with an offender index of 640 entries: 10 per shard."""
    with override_settings(
        DJANGO_RATELIMITS={**settings.DJANGO_RATELIMITS, "OFFENDER_INDEX_MAX": 640}
    ):
        yield site_redis


def test_identities_chosen_to_share_the_victims_shard_no_longer_evict_its_record(
    small_index: Any,
) -> None:
    configured = get_engine()
    unkeyed = KeySpace(configured.keys.prefix, configured.keys.shards)
    attackers = chosen_offline(VICTIM, unkeyed, 11)  # what anyone could compute before
    # The attack works where placement is predictable...
    exposed = Engine(
        configured.client,
        keys=KeySpace("exposed", unkeyed.shards),
        clock=FakeClock(),
        offender_index_max=640,
    )
    assert victim_record_after_attack(exposed, attackers) is None
    # ...and no longer against the engine the settings configure.
    engine = Engine(
        configured.client, keys=configured.keys, clock=FakeClock(), offender_index_max=640
    )
    record = victim_record_after_attack(engine, attackers)
    assert record is not None and record.denials == 1  # type: ignore[attr-defined]


@pytest.mark.django_db
def test_the_dashboard_and_the_command_find_what_requests_wrote_under_a_custom_secret(
    site_redis: Any, admin_client: Client
) -> None:
    with override_settings(
        DJANGO_RATELIMITS={**settings.DJANGO_RATELIMITS, "SHARD_SECRET": SECRET}
    ):
        Policy.objects.create(name="other", rates="1/m", algorithm="gcra", path="^/api/other")
        current().refresh()
        client = Client(REMOTE_ADDR=VICTIM.value)
        assert [client.get("/api/other").status_code for _ in range(2)] == [200, 429]
        keys = get_engine().keys
        assert keys.secret == get_settings().shard_key
        # Written where the secret places it, which is not where no secret would.
        assert site_redis.exists(keys.of(VICTIM).record)
        assert keys.of(VICTIM).tag != KeySpace(keys.prefix, keys.shards).of(VICTIM).tag

        page = admin_client.get(reverse("admin:django_ratelimits_offenders_json")).json()
        assert [o["ident"] for o in page["offenders"]] == [f"ip:{VICTIM.value}"]
        detail = admin_client.get(
            reverse("admin:django_ratelimits_offender"), {"kind": "ip", "value": VICTIM.value}
        )
        assert 'id="offender-denials">1<' in detail.content.decode()
        out = io.StringIO()
        call_command("ratelimits", "show", f"ip:{VICTIM.value}", stdout=out)
        assert "denials:  1 (other 1)" in out.getvalue()
