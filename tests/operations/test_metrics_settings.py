"""``METRICS`` and ``METRICS_TOKEN``: validated like every setting, and check E009 when the
backend's library is missing (docs/metrics.md)."""

from __future__ import annotations

import sys

import pytest
from django.conf import settings
from django.core.checks import run_checks
from django.core.exceptions import ImproperlyConfigured
from django.test import override_settings

from django_ratelimits.checks import TAG
from django_ratelimits.conf import _from_setting as settings_from


def test_metrics_are_off_or_prometheus() -> None:
    assert settings_from({}).metrics is False
    assert settings_from({"METRICS": "prometheus"}).metrics == "prometheus"
    for wrong in (True, 0, None, "statsd", "Prometheus"):
        with pytest.raises(ImproperlyConfigured, match="'METRICS'] must be False or 'prometheus'"):
            settings_from({"METRICS": wrong})


@pytest.mark.parametrize("token", ["short", b"x" * 40, 12345])
def test_a_weak_metrics_token_is_refused_without_being_shown(token: object) -> None:
    with pytest.raises(ImproperlyConfigured, match="METRICS_TOKEN'] must be None or a str") as bad:
        settings_from({"METRICS_TOKEN": token})
    assert str(token) not in str(bad.value)
    assert "x" * 40 not in repr(settings_from({"METRICS_TOKEN": "x" * 40}))


def e009() -> list[str]:
    return [str(m.msg) for m in run_checks(tags=[TAG]) if m.id == "django_ratelimits.E009"]


def test_e009_when_metrics_are_on_and_prometheus_client_is_missing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    on = {**settings.DJANGO_RATELIMITS, "METRICS": "prometheus"}
    with override_settings(DJANGO_RATELIMITS=on):
        assert e009() == []  # installed (the test extra)
        monkeypatch.setitem(sys.modules, "prometheus_client", None)  # as if not installed
        assert e009() == [
            "DJANGO_RATELIMITS['METRICS'] is 'prometheus' but prometheus_client is not installed."
        ]
    assert e009() == []  # metrics off: nothing to install
