"""The offender dashboard and identity overrides: the identity page tells the rates it
is limited under, links to give it its own, and a reset clears them too."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from django_ratelimits.models import Policy
from django_ratelimits.policies import get_registry
from tests.dashboard.test_dashboard import act, detail_url
from tests.overrides_helpers import override

pytestmark = pytest.mark.django_db


def test_the_identity_page_shows_its_own_rates_and_a_reset_clears_them(
    site_redis: Any, admin_client: Client
) -> None:
    policy = Policy.objects.create(name="api", rates="2/h", path="^/api/")
    override("ip:10.0.0.7", "4/h", policy=policy)
    get_registry().refresh()
    client = Client(REMOTE_ADDR="10.0.0.7")
    assert [client.get("/api/hello").status_code for _ in range(5)] == [200] * 4 + [429]
    page = admin_client.get(detail_url("ip", "10.0.0.7")).content.decode()
    assert 'id="own-rates"' in page
    assert 'data-policy="api" data-rate="4/h"' in page
    assert "rateoverride/add/?identity=ip%3A10.0.0.7" in page
    other = admin_client.get(detail_url("ip", "10.0.0.8")).content.decode()
    assert 'id="own-rates"' not in other and 'data-rate="2/h"' in other
    act(admin_client, kind="ip", value="10.0.0.7", action="reset", policy="api")
    assert client.get("/api/hello").status_code == 200  # the override's count was reset


def test_a_deleted_users_page_says_its_own_rates_apply_to_no_request(
    site_redis: Any, admin_client: Client, django_user_model: Any
) -> None:
    policy = Policy.objects.create(name="api", rates="2/h", path="^/api/", key="user")
    gone = django_user_model.objects.create_user("gone")
    override(f"user:{gone.pk}", "4/h", policy=policy)
    get_registry().refresh()
    live = admin_client.get(detail_url("user", str(gone.pk))).content.decode()
    assert 'id="own-rates"' in live and "apply to no request" not in live
    pk = gone.pk
    gone.delete()
    page = admin_client.get(detail_url("user", str(pk))).content.decode()
    assert 'id="own-rates"' in page and "so they apply to no request" in page


def test_the_link_to_give_own_rates_follows_the_add_permission(
    site_redis: Any, django_user_model: Any
) -> None:
    from django.contrib.auth.models import Permission

    viewer = django_user_model.objects.create_user("viewer", is_staff=True)
    viewer.user_permissions.add(Permission.objects.get(codename="view_offenders"))
    client = Client()
    client.force_login(viewer)
    page = client.get(detail_url("ip", "10.0.0.7")).content.decode()
    assert "own-rates" not in page and "give-own-rates" not in page


def test_a_users_page_shows_the_quota_of_its_tier(site_redis: Any, admin_client: Client) -> None:
    from django.contrib.auth.models import Group, User

    from django_ratelimits.models import PolicyTier

    policy = Policy.objects.create(name="api", rates="2/h", path="^/api/", key="user")
    PolicyTier.objects.create(
        policy=policy, match="group", name=Group.objects.create(name="pro").name, rates="5/h"
    )
    get_registry().refresh()
    pro, free = User.objects.create_user("pro"), User.objects.create_user("free")
    pro.groups.add(Group.objects.get(name="pro"))
    client = Client()
    client.force_login(pro)
    assert [client.get("/api/hello").status_code for _ in range(6)] == [200] * 5 + [429]
    page = admin_client.get(detail_url("user", str(pro.pk))).content.decode()
    assert 'id="tier-rates"' in page and 'data-policy="api" data-rate="5/h"' in page
    other = admin_client.get(detail_url("user", str(free.pk))).content.decode()
    assert 'id="tier-rates"' not in other and 'data-policy="api" data-rate="2/h"' in other


def test_forget_erases_the_sliding_log_kept_under_an_override(site_redis: Any) -> None:
    from django_ratelimits.engine import Identity
    from django_ratelimits.offenders import Offenders
    from tests.engine_helpers import all_keys

    policy = Policy.objects.create(name="api", rates="2/h", path="^/api/", algorithm="sliding_log")
    override("ip:10.0.0.9", "4/h", policy=policy)
    get_registry().refresh()
    assert Client(REMOTE_ADDR="10.0.0.9").get("/api/hello").status_code == 200
    assert any(b"10.0.0.9" in key for key in all_keys(site_redis))
    Offenders().forget(Identity("ip", "10.0.0.9"))
    assert [key for key in all_keys(site_redis) if b"10.0.0.9" in key] == []
