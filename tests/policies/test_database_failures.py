"""The database failing under a worker: at its first read of the policies, at a
refresh after, and under the commands that report on it."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.db import Error, InterfaceError, OperationalError, connection
from django.test import Client

from django_ratelimits.models import Policy
from django_ratelimits.policies import registry as policies
from tests.operations.test_command import run, run_json

pytestmark = pytest.mark.parametrize("redis_client", ["standalone"], indirect=True)

Wrapper = Callable[..., Any]


def failing(error: type[Error]) -> Wrapper:
    """A connection wrapper under which every query raises ``error``."""

    def wrapper(*args: Any) -> Any:
        raise error("server closed the connection unexpectedly")

    return wrapper


@pytest.fixture
def fresh(site_redis: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[policies.PolicyRegistry]:
    """A worker's registry that has read nothing yet, as after a restart."""
    registry = policies.PolicyRegistry()
    monkeypatch.setattr(policies, "_registry", registry)
    Policy.objects.create(name="api", path="^/api/", rates="2/m", fail_closed=True)
    yield registry


@pytest.mark.parametrize("error", [OperationalError, InterfaceError])
def test_a_failing_database_at_a_refresh_keeps_the_policies_and_never_500s(
    fresh: policies.PolicyRegistry, error: type[Error], caplog: pytest.LogCaptureFixture
) -> None:
    # InterfaceError (psycopg's "connection already closed") is no DatabaseError: it
    # was a 500 on every request until the refresh caught every database error.
    client = Client()
    assert client.get("/api/hello").status_code == 200
    assert client.get("/api/hello").status_code == 200
    fresh._refreshed_at = None  # the interval has passed
    logs = caplog.at_level(logging.ERROR, logger="django_ratelimits.policies")
    with logs, connection.execute_wrapper(failing(error)):
        codes = [client.get("/api/hello").status_code for _ in range(3)]
    assert codes == [429, 429, 429]  # 2/m, both spent before
    assert "could not refresh rate-limit policies, keeping the " in caplog.text
    assert "loaded: server closed the connection unexpectedly" in caplog.text
    assert (
        fresh.loaded
        and fresh.failure == f"{error.__name__}: server closed the connection unexpectedly"
    )


@pytest.mark.parametrize("error", [OperationalError, InterfaceError])
def test_a_database_unreachable_since_start_is_logged_and_reported_by_status(
    fresh: policies.PolicyRegistry, error: type[Error], caplog: pytest.LogCaptureFixture
) -> None:
    # No policy was ever read: the worker cannot know the database's policies, fail-
    # closed ones among them, and limits by code defaults alone (as before: documented).
    client = Client()
    logs = caplog.at_level(logging.ERROR, logger="django_ratelimits.policies")
    with logs, connection.execute_wrapper(failing(error)):
        codes = [client.get("/api/hello").status_code for _ in range(3)]
        data = run_json("status")
        text = run("status")
    assert codes == [200, 200, 200]
    assert "keeping the 0 loaded (none: the database was never read)" in caplog.text
    assert data["policies_loaded"] is False
    assert data["database_error"].startswith(error.__name__)
    assert "(code defaults only: the database could not be read, " in text
    assert "database policies and blocked networks do not apply" in text
    # Once the database answers, the next refresh loads the policies and says so.
    fresh._refreshed_at = None
    codes = [client.get("/api/hello").status_code for _ in range(3)]
    assert codes == [200, 200, 429]
    assert run_json("status")["database_error"] is None and fresh.loaded
