"""Admin searches an editor types: a long one is a clear message, never a 500."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from django_ratelimits.admin_search import MAX_SEARCH_WORDS
from django_ratelimits.models import Policy

pytestmark = pytest.mark.django_db

CHANGELISTS = [
    "admin:django_ratelimits_policy_changelist",
    "admin:django_ratelimits_rateoverride_changelist",
    "admin:django_ratelimits_blockednetwork_changelist",
]


@pytest.mark.parametrize("url", CHANGELISTS)
def test_a_search_of_thousands_of_words_is_refused_with_a_message(
    admin_client: Client, url: str
) -> None:
    response = admin_client.get(reverse(url), {"q": " ".join(["api"] * 2_000)})
    assert response.status_code == 200
    assert f"at most {MAX_SEARCH_WORDS} words" in response.content.decode()


@pytest.mark.parametrize("words", [2, MAX_SEARCH_WORDS])
def test_a_search_up_to_the_bound_still_finds(admin_client: Client, words: int) -> None:
    Policy.objects.create(name="api-search", rates="10/m", path="^/api/")
    Policy.objects.create(name="other", rates="10/m", path="^/web/")
    response = admin_client.get(
        reverse("admin:django_ratelimits_policy_changelist"),
        {"q": " ".join(["api", *["search"] * (words - 1)])},
    )
    assert response.status_code == 200
    body = response.content.decode()
    assert "api-search" in body
    assert ">other<" not in body
