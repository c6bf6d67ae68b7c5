"""A policy may only call the key functions the settings list or code names:
admin text cannot make the app import or call any other function."""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from django.conf import settings
from django.core.checks import run_checks
from django.http import HttpRequest, HttpResponse
from django.test import Client, override_settings

from django_ratelimits import identity, key_functions
from django_ratelimits.checks import TAG
from django_ratelimits.decorators import ratelimit
from django_ratelimits.models import Policy
from django_ratelimits.policies import current
from tests.dashboard.test_admin import add_url, form
from tests.key_functions import CALLED, IMPORTED

pytestmark = pytest.mark.django_db

TENANT = "tests.key_functions.tenant"
PROBE = "tests.key_function_probe.log_everyone_out"
UNLISTED = "tests.key_functions.never_listed"


@pytest.fixture(autouse=True)
def listed() -> Iterator[None]:
    """Only ``tenant`` is listed; nothing was imported or called yet."""
    sys.modules.pop("tests.key_function_probe", None)
    IMPORTED.clear()
    CALLED.clear()
    with override_settings(
        DJANGO_RATELIMITS={**settings.DJANGO_RATELIMITS, "KEY_FUNCTIONS": [TENANT]}
    ):
        yield


def posted(client: Client, key_arg: str) -> Any:
    return client.post(add_url(), form(name="who", key="callable", key_arg=key_arg, rates="2/m"))


@pytest.mark.parametrize("path", [PROBE, "django.contrib.auth.logout"])
def test_admin_refuses_an_unlisted_key_function_without_importing_it(
    admin_client: Client, path: str
) -> None:
    response = posted(admin_client, path)
    assert response.status_code == 200
    [error] = response.context["adminform"].form.errors["key_arg"]
    assert error == f"{path} is not one of the key functions this site allows: {TENANT}."
    assert not Policy.objects.exists()
    assert IMPORTED == [] and "tests.key_function_probe" not in sys.modules


def test_admin_offers_the_listed_key_functions(admin_client: Client) -> None:
    page = admin_client.get(add_url()).content.decode()
    assert 'list="id_key_arg_functions"' in page
    assert f'<datalist id="id_key_arg_functions"><option value="{TENANT}">' in page


def test_without_key_functions_admin_says_where_to_list_them(admin_client: Client) -> None:
    with override_settings(DJANGO_RATELIMITS={"KEY_FUNCTIONS": []}):
        response = posted(admin_client, TENANT)
    [error] = response.context["adminform"].form.errors["key_arg"]
    assert "This site allows no key functions" in error and "KEY_FUNCTIONS" in error


def test_a_listed_key_function_counts_requests(site_redis: Any, admin_client: Client) -> None:
    with override_settings(
        DJANGO_RATELIMITS={**settings.DJANGO_RATELIMITS, "KEY_FUNCTIONS": [TENANT]}
    ):
        assert posted(admin_client, TENANT).status_code == 302  # saved
        Policy.objects.filter(name="who").update(path="^/api/")
        current().refresh()
        client = Client()
        a = [client.get("/api/hello", headers={"X-Tenant": "a"}).status_code for _ in range(3)]
        assert a == [200, 200, 429]
        assert client.get("/api/hello", headers={"X-Tenant": "b"}).status_code == 200


def unlisted_rows() -> None:
    """Rows written outside admin (or before KEY_FUNCTIONS existed)."""
    for name, path in (("legacy", UNLISTED), ("sneaky", PROBE)):
        Policy.objects.create(name=name, rates="2/m", key="callable", key_arg=path, path="^/api/")


def test_rows_with_unlisted_key_functions_fail_the_check_one_error_each() -> None:
    unlisted_rows()
    Policy.objects.create(name="fine", rates="2/m", key="callable", key_arg=TENANT)
    errors = [m for m in run_checks(tags=[TAG], databases=["default"]) if m.id.endswith("E008")]
    assert [(e.obj.name, e.id) for e in errors] == [  # type: ignore[union-attr]
        ("legacy", "django_ratelimits.E008"),
        ("sneaky", "django_ratelimits.E008"),
    ]
    assert f"names the key function {PROBE!r}" in errors[1].msg
    assert "counts by client IP instead" in errors[1].msg
    assert IMPORTED == []  # checking imports nothing either


def test_a_row_with_an_unlisted_key_function_counts_by_ip_and_never_calls_it(
    site_redis: Any, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(identity, "_reported", set())  # logged once per process
    with override_settings(
        DJANGO_RATELIMITS={**settings.DJANGO_RATELIMITS, "KEY_FUNCTIONS": [TENANT]}
    ):
        unlisted_rows()
        current().refresh()
        with caplog.at_level(logging.ERROR, "django_ratelimits"):
            office = Client(REMOTE_ADDR="198.51.100.10")
            assert [office.get("/api/hello").status_code for _ in range(3)] == [200, 200, 429]
            assert Client(REMOTE_ADDR="198.51.100.11").get("/api/hello").status_code == 200
    assert CALLED == [] and IMPORTED == []
    logged = [r.getMessage() for r in caplog.records if "KEY_FUNCTIONS does not list" in r.message]
    assert len(logged) == 2  # once per policy, not once per request
    assert any(PROBE in line and "counts by client IP" in line for line in logged)


def test_a_key_function_named_in_code_is_trusted_without_being_listed(
    admin_client: Client,
) -> None:
    path = "tests.key_functions.tenant_named_in_code"

    @ratelimit("coded", rate="2/m", key=f"callable:{path}")
    def view(request: HttpRequest) -> HttpResponse:
        return HttpResponse()

    assert key_functions.is_allowed(path) and path in key_functions.allowed()
    assert posted(admin_client, path).status_code == 302  # admin may choose it too
    assert not [m for m in run_checks(tags=[TAG], databases=["default"]) if m.obj is not None]
