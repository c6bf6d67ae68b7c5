"""Bans declared in code and held in rows: compiled, or reported by check E010."""

from __future__ import annotations

import pytest
from django.core.checks import CheckMessage, run_checks
from django.http import HttpRequest, HttpResponse

from django_ratelimits import decorators
from django_ratelimits.checks import TAG, bans
from django_ratelimits.decorators import ratelimit
from django_ratelimits.engine import Ban
from django_ratelimits.models import Policy
from django_ratelimits.policies.registry import PolicyRegistry

pytestmark = pytest.mark.django_db


@pytest.fixture
def registry(monkeypatch: pytest.MonkeyPatch) -> PolicyRegistry:
    """A registry of this test's own: declarations do not outlive it."""
    fresh = PolicyRegistry()
    monkeypatch.setattr(decorators, "get_registry", lambda: fresh)
    monkeypatch.setattr(bans, "get_registry", lambda: fresh)
    return fresh


def view(request: HttpRequest) -> HttpResponse:
    return HttpResponse()


def e009() -> list[CheckMessage]:
    return [m for m in run_checks(tags=[TAG]) if m.id == "django_ratelimits.E010"]


def test_the_decorator_declares_a_ban(registry: PolicyRegistry) -> None:
    ratelimit("login", rate="5/m", ban_after=5, ban_within="10m", ban_for="15m", ban_max="1d")(view)
    spec = registry.get("login")
    assert spec is not None and spec.ban == Ban(5, 600, 900, 86_400)
    assert e009() == []


@pytest.mark.parametrize(
    "ban",
    [
        {"ban_after": 5, "ban_within": "10m"},  # no ban_for
        {"ban_after": 5, "ban_within": "10m", "ban_for": "1000000000000d"},
        {"ban_after": 500, "ban_within": "10m", "ban_for": "1h"},
        {"ban_after": 5, "ban_within": "10m", "ban_for": "1h", "ban_max": "1m"},
    ],
)
def test_an_inconsistent_ban_in_code_is_check_e009_not_an_import_error(
    registry: PolicyRegistry, ban: dict[str, object]
) -> None:
    ratelimit("login", rate="5/m", **ban)(view)
    spec = registry.get("login")
    assert spec is not None and spec.ban is None, "the policy still limits, without a ban"
    (error,) = e009()
    assert "'login'" in error.msg and "without a ban" in error.msg and error.hint


def test_a_row_whose_ban_was_saved_around_admin_is_e009_and_skipped(
    registry: PolicyRegistry,
) -> None:
    Policy.objects.create(name="ok", rates="1/s", ban_after=3, ban_within="1m", ban_for="1h")
    Policy.objects.create(name="broken", rates="1/s")
    Policy.objects.filter(name="broken").update(ban_after=3, ban_within="1m", ban_for="99d")
    (error,) = e009()
    assert "'broken'" in error.msg and "ban_for" in error.msg and "limits nothing" in error.msg
    registry.refresh()
    assert registry.get("broken") is None and registry.get("ok") is not None
