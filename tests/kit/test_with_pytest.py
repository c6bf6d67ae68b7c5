"""The example project's limits, tested with the kit's pytest fixtures and context
managers only (and Django's test client), as the project's own tests would be."""

from __future__ import annotations

from typing import Any

import pytest
from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.test import Client, override_settings

from django_ratelimits.decorators import ratelimit
from django_ratelimits.engine import get_engine
from django_ratelimits.models import BlockedNetwork, Policy
from django_ratelimits.policies import registry
from django_ratelimits.policies.registry import PolicyRegistry
from django_ratelimits.testing import (
    FakeClock,
    disable_ratelimits,
    fake_clock,
    override_policies,
    reset_ratelimits,
)
from tests.engine_helpers import all_keys

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("project")]


def login(client: Client) -> int:
    return client.post("/login", {"username": "ann"}).status_code


def test_login_allows_three_posts_a_minute(ratelimits_clock: FakeClock) -> None:
    client = Client()
    assert [login(client) for _ in range(4)] == [200, 200, 200, 429]
    ratelimits_clock.advance(60)  # the next minute, without sleeping
    assert login(client) == 200


def test_each_test_starts_from_zero(ratelimits_clock: FakeClock) -> None:
    # The test above spent this address's budget in the same minute of fake time.
    response = Client().post("/login")
    assert response["RateLimit"] == '"kit-login";r=2;t=60'


def test_policies_of_one_test_apply_at_once(
    ratelimits_policies: Any, ratelimits_clock: FakeClock
) -> None:
    ratelimits_policies({"name": "kit-api", "rate": "2/m", "path": "^/api/"})
    client = Client()
    assert [client.get("/api/items").status_code for _ in range(3)] == [200, 200, 429]
    # Only the given policies apply: the login view's policy is not one of them.
    assert [login(client) for _ in range(5)] == [200] * 5


def test_policies_can_change_within_a_test(ratelimits_policies: Any) -> None:
    ratelimits_policies({"name": "kit-api", "rate": "1/m", "path": "^/api/"})
    client = Client()
    assert [client.get("/api/items").status_code for _ in range(2)] == [200, 429]
    ratelimits_policies({"name": "kit-api-2", "rate": "5/m", "path": "^/api/"})
    assert client.get("/api/items").status_code == 200


def test_a_policy_row_saved_in_a_test_applies_to_the_next_request(
    ratelimits_clock: FakeClock,
) -> None:
    client = Client()
    assert [client.get("/api/items").status_code for _ in range(3)] == [200] * 3
    Policy.objects.create(name="kit-rows", rates="1/m", path="^/api/", algorithm="fixed_window")
    assert [client.get("/api/items").status_code for _ in range(2)] == [200, 429]


def test_a_blocked_network_saved_in_a_test_applies_to_the_next_request(
    ratelimits_clock: FakeClock,
) -> None:
    client = Client()
    assert client.get("/api/items").status_code == 200
    BlockedNetwork.objects.create(network="127.0.0.0/8", reason="kit")
    assert client.get("/api/items").status_code == 403


def test_disabled_limits_nothing(ratelimits_disabled: None, project: Any) -> None:
    client = Client()
    assert [login(client) for _ in range(10)] == [200] * 10
    assert all_keys(project) == []  # not even a call to Redis


def test_the_context_managers_work_without_pytest_fixtures(project: Any) -> None:
    client = Client()
    with reset_ratelimits(), fake_clock() as clock:
        assert [login(client) for _ in range(4)] == [200, 200, 200, 429]
        with disable_ratelimits():
            assert login(client) == 200
        assert login(client) == 429
        clock.advance(60)
        assert login(client) == 200
    with reset_ratelimits(), override_policies({"name": "kit-api", "rate": "1/h", "path": "^/"}):
        assert [client.get("/api/items").status_code for _ in range(2)] == [200, 429]


def test_a_default_declared_in_a_block_outlives_the_block(
    project: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A view module first imported inside ``override_policies`` or ``disable_ratelimits``
    (a test's first request imports the URLconf) declares its ``@ratelimit`` defaults to
    the process, not to the block's registry: once the block ends they apply, whatever
    test ran first. They were lost with the block: the policy limited nothing for the
    rest of the run, and a decorator naming it was logged as unknown."""
    process = PolicyRegistry()  # the process's, for this test: its declarations stay here
    monkeypatch.setattr(registry, "_registry", process)

    def view(request: HttpRequest) -> HttpResponse:
        return HttpResponse("ok")

    with override_policies({"name": "kit-api", "rate": "1/h", "path": "^/"}):
        ratelimit("kit-late-1", rate="1/m")(view)
    with disable_ratelimits():
        ratelimit("kit-late-2", rate="2/m")(view)
    assert registry.get_registry() is process
    for name, limit in (("kit-late-1", 1), ("kit-late-2", 2)):
        spec = process.get(name)
        assert spec is not None and spec.limits[0].rate.limit == limit, name
        assert process.knows(name)


@disable_ratelimits()
def test_they_decorate_functions_too() -> None:
    client = Client()
    assert [login(client) for _ in range(5)] == [200] * 5


@pytest.mark.django_db(databases=[])  # no database access at all
def test_disabled_needs_no_database() -> None:
    # reset_ratelimits marks the policies stale: a request would read them from the database.
    with reset_ratelimits(), disable_ratelimits():
        assert Client().get("/api/items").status_code == 200


def test_reset_deletes_only_its_own_keys(project: Any) -> None:
    project.set("the-projects-own-key", "kept")
    project.set("rl:{s0}:s:someone-else", "kept")  # the package's, not this test's
    with reset_ratelimits() as prefix:
        for _ in range(4):
            login(Client())
        during = [k for k in all_keys(project) if k.startswith(prefix.encode())]
        assert during
    assert sorted(all_keys(project)) == [b"rl:{s0}:s:someone-else", b"the-projects-own-key"]


def test_two_resets_never_share_counters(project: Any) -> None:
    client = Client()
    with reset_ratelimits() as first, fake_clock():
        assert [login(client) for _ in range(4)] == [200, 200, 200, 429]
        with reset_ratelimits() as second:
            assert second != first
            assert login(client) == 200
        assert login(client) == 429


def test_the_fake_clock_survives_a_settings_change(project: Any) -> None:
    with fake_clock() as clock:
        changed = {**settings.DJANGO_RATELIMITS, "HEADERS_ON_ALLOWED": False}
        with override_settings(DJANGO_RATELIMITS=changed):
            assert get_engine().clock is clock
        assert get_engine().clock is clock
    assert get_engine().clock is None


def test_a_mistake_in_a_policy_is_an_error_when_the_test_starts() -> None:
    with pytest.raises(ValueError), override_policies({"name": "x", "rate": "lots"}):
        pass
    with pytest.raises(TypeError), override_policies({"name": "x", "rate": "1/m", "speed": 3}):
        pass
