"""The database failing under a worker: at its first read of the policies, at a
refresh after, and under the commands that report on it."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.db import Error, InterfaceError, OperationalError, connection
from django.test import Client
from prometheus_client import CollectorRegistry

from django_ratelimits.metrics import observing
from django_ratelimits.metrics.prometheus import PREFIX, PrometheusMetrics
from django_ratelimits.models import Policy, PolicyVersion
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


@pytest.fixture
def gauges() -> Iterator[CollectorRegistry]:
    """A Prometheus observer on a registry of this test's own."""
    fresh = CollectorRegistry()
    with observing(PrometheusMetrics(fresh)):
        yield fresh


def unread(gauges: CollectorRegistry) -> float | None:
    return gauges.get_sample_value(f"{PREFIX}_policies_unread")


def test_the_metrics_say_while_a_worker_cannot_read_its_policies(
    fresh: policies.PolicyRegistry, gauges: CollectorRegistry
) -> None:
    # A worker that never read the database matches no request to a policy of its
    # rows, so no decision is counted: only the gauge says its limits are not applied.
    client = Client()
    assert unread(gauges) == 0
    with connection.execute_wrapper(failing(OperationalError)):
        assert [client.get("/api/hello").status_code for _ in range(3)] == [200] * 3
    assert unread(gauges) == 1
    fresh._refreshed_at = None  # the interval has passed: the database answers again
    assert [client.get("/api/hello").status_code for _ in range(3)] == [200, 200, 429]
    assert unread(gauges) == 0
    fresh._refreshed_at = None  # and fails again at a later refresh: the loaded ones hold
    with connection.execute_wrapper(failing(InterfaceError)):
        assert client.get("/api/hello").status_code == 429
    assert unread(gauges) == 1


def test_an_async_request_tells_the_metrics_too(
    fresh: policies.PolicyRegistry, gauges: CollectorRegistry, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The async refresh reads the database in a worker thread (its own connection).
    def down() -> None:
        raise OperationalError("server closed the connection unexpectedly")

    async def refreshed() -> policies.PolicyRegistry:
        return await policies.acurrent()

    with monkeypatch.context() as patch:
        patch.setattr(PolicyVersion, "current", down)
        assert asyncio.run(refreshed()) is fresh and not fresh.loaded
    assert unread(gauges) == 1
    fresh._refreshed_at = None  # (the sync path: this test's database is in a transaction
    assert policies.current().loaded  # that a worker thread's connection cannot read)
    assert unread(gauges) == 0
