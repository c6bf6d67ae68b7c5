"""The async request path decides what the sync one decides, for the same requests.

A key function and a cost function are the project's code, called by the planning of
a check with the request. On the sync path they may read ``request.user`` (a lazy
object: its first read queries the database). On the async path planning runs on the
event loop, where that first read raises ``SynchronousOnlyOperation``: the user must
be loaded (``request.auser()``) before, as it is for the policies that count by user.
"""

from __future__ import annotations

from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.conf import settings
from django.contrib.auth.models import User
from django.http import HttpRequest
from django.test import AsyncClient, Client, override_settings

from django_ratelimits import costs
from django_ratelimits.models import Policy
from django_ratelimits.policies import get_registry

pytestmark = pytest.mark.django_db

USER_KEY = "tests.key_functions.signed_in_user"


def policy(**fields: Any) -> Policy:
    row = Policy.objects.create(**fields)
    get_registry().refresh()
    return row


def sync_statuses(user: User, path: str, n: int, **headers: str) -> list[int]:
    client = Client(raise_request_exception=False, headers=headers)
    client.force_login(user)
    return [client.get(path).status_code for _ in range(n)]


def async_statuses(user: User, path: str, n: int, **headers: str) -> list[int]:
    async def run() -> list[int]:
        client = AsyncClient(raise_request_exception=False, headers=headers)
        await client.aforce_login(user)
        return [(await client.get(path)).status_code for _ in range(n)]

    # In this thread, where the test's transaction (and its users) is seen.
    return async_to_sync(run)()


def test_a_key_function_that_reads_the_user_counts_alike_sync_and_async(
    site_redis: Any,
) -> None:
    """A policy that records nothing (so nothing else makes planning read the user)
    and counts by a key function reading ``request.user``: the async path answered
    500 to every signed-in request, where the sync path counts each user."""
    functions = [*settings.DJANGO_RATELIMITS["KEY_FUNCTIONS"], USER_KEY]  # type: ignore[misc]
    with override_settings(
        DJANGO_RATELIMITS={**settings.DJANGO_RATELIMITS, "KEY_FUNCTIONS": functions}
    ):
        policy(
            name="per-account",
            rates="2/m",
            key="callable",
            key_arg=USER_KEY,
            path=r"^/api/",
            record_metadata="none",
        )
        erin, fred = User.objects.create_user("erin"), User.objects.create_user("fred")
        assert sync_statuses(erin, "/api/hello", 3) == [200, 200, 429]
        assert async_statuses(fred, "/api/hello", 3) == [200, 200, 429]


def test_a_cost_function_that_reads_the_user_charges_alike_sync_and_async(
    site_redis: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A cost function that charges signed-in users more: on the async path its read
    of ``request.user`` raised, so every request was charged the policy's own cost
    (a third of it here): three times the requests the sync path lets through."""

    def heavier_when_signed_in(request: HttpRequest) -> int:
        return 3 if request.user.is_authenticated else 1

    monkeypatch.setitem(costs._functions, "costly", heavier_when_signed_in)
    policy(
        name="costly",
        rates="3/m",
        key="header",
        key_arg="X-Client",
        path=r"^/api/",
        record_metadata="none",
    )
    erin, fred = User.objects.create_user("erin"), User.objects.create_user("fred")
    assert sync_statuses(erin, "/api/hello", 2, x_client="erin") == [200, 429]
    assert async_statuses(fred, "/api/hello", 2, x_client="fred") == [200, 429]
