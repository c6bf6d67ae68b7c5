"""Settings of the demo site (``make demo``): ``demo_project.settings`` plus rate limiting.

``demo_project.settings`` is the base that the test suite shares
(``tests/settings.py``), so what would change the tests' behaviour is added
here: the shop app (its views, templates and the migration that seeds example
policies) and ``RateLimitMiddleware``, right after ``AuthenticationMiddleware``
so that per-user policies see the user. Not for production.
"""

from __future__ import annotations

from demo_project.settings import *  # noqa: F403
from demo_project.settings import INSTALLED_APPS, MIDDLEWARE

INSTALLED_APPS = [*INSTALLED_APPS, "demo_project.shop"]

_AUTH = "django.contrib.auth.middleware.AuthenticationMiddleware"
MIDDLEWARE = [
    *MIDDLEWARE[: MIDDLEWARE.index(_AUTH) + 1],
    "django_ratelimits.middleware.RateLimitMiddleware",
    *MIDDLEWARE[MIDDLEWARE.index(_AUTH) + 1 :],
]

ROOT_URLCONF = "demo_project.shop.urls"
LOGIN_REDIRECT_URL = "/"
LOGOUT_REDIRECT_URL = "/"
