"""The failed-login backend's place in ``AUTHENTICATION_BACKENDS`` (W005)."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.checks import CheckMessage, Warning, register

from django_ratelimits.checks.common import TAG
from django_ratelimits.logins import BACKEND


@register(TAG)
def check_login_backend(**kwargs: Any) -> list[CheckMessage]:
    """Listed after another backend, ``FailedLoginBackend`` runs only once that one has
    refused the password: a locked-out attacker with the right password gets in."""
    backends = list(getattr(settings, "AUTHENTICATION_BACKENDS", ()))
    if BACKEND not in backends or backends[0] == BACKEND:
        return []
    return [
        Warning(
            f"{BACKEND} is not first in AUTHENTICATION_BACKENDS: the backends before it "
            "check passwords before a failed-login policy can refuse the login.",
            hint=f"Move {BACKEND!r} to the top of AUTHENTICATION_BACKENDS (docs/logins.md).",
            id="django_ratelimits.W005",
        )
    ]
