"""What the example project's test settings say (tests/kit)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from django.conf import settings
from django.test import override_settings


@contextmanager
def project_settings(redis: object) -> Iterator[None]:
    """The project's Redis (``DJANGO_RATELIMITS["REDIS"]``: here, the harness'), its URLs,
    and ``RateLimitMiddleware``: a project's test settings say so once."""
    with override_settings(
        DJANGO_RATELIMITS={**settings.DJANGO_RATELIMITS, "REDIS": redis},
        ROOT_URLCONF="tests.kit.urls",
        MIDDLEWARE=[*settings.MIDDLEWARE, "django_ratelimits.middleware.RateLimitMiddleware"],
    ):
        yield
