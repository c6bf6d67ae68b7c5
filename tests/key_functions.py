"""Key functions for the tests of KEY_FUNCTIONS, and what they record."""

from __future__ import annotations

from django.http import HttpRequest

IMPORTED: list[str] = []
"""Modules of key functions that were imported (see tests.key_function_probe)."""
CALLED: list[str] = []
"""Paths of the requests that called a function that must never run."""


def tenant(request: HttpRequest) -> str | None:
    """The ``X-Tenant`` header: a listed key function."""
    return request.headers.get("X-Tenant")


def tenant_named_in_code(request: HttpRequest) -> str | None:
    """The same, named only by a ``@ratelimit`` in code."""
    return request.headers.get("X-Tenant")


def never_listed(request: HttpRequest) -> str:
    """Importable, but no setting lists it and no code names it."""
    CALLED.append(request.path)
    return "everyone"


def signed_in_user(request: HttpRequest) -> str | None:
    """The signed-in user's id, read from ``request.user``: a key function a project
    writes for a per-account key (``None``, not counted, when anonymous)."""
    user = request.user
    return str(user.pk) if user.is_authenticated else None
