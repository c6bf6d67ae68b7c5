"""What the example project's test settings say (tests/kit)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from django.conf import settings
from django.test import override_settings

from django_ratelimits.policies import registry
from django_ratelimits.policies.registry import PolicyRegistry

# The example project's registry: its views' @ratelimit defaults are declared here (on
# the first request of a kit test, which imports tests.kit.urls), never in the registry
# of the rest of the suite, whose pages (the identity page's quotas, the policy list)
# would else show them in whichever worker ran a kit test first.
_PROJECT_REGISTRY = PolicyRegistry()


@contextmanager
def project_settings(redis: object) -> Iterator[None]:
    """The project's Redis (``DJANGO_RATELIMITS["REDIS"]``: here, the harness'), its URLs,
    and ``RateLimitMiddleware``: a project's test settings say so once. The project's
    policies are its own registry's, apart from the rest of the suite's."""
    previous = registry._registry
    registry._registry = _PROJECT_REGISTRY
    try:
        with override_settings(
            DJANGO_RATELIMITS={**settings.DJANGO_RATELIMITS, "REDIS": redis},
            ROOT_URLCONF="tests.kit.urls",
            MIDDLEWARE=[*settings.MIDDLEWARE, "django_ratelimits.middleware.RateLimitMiddleware"],
        ):
            yield
    finally:
        registry._registry = previous
