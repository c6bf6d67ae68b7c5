"""Settings of the benchmarks that run Django, in process and in the servers they start.

The demo's base settings with, from the environment (``benchmarks.site`` sets it):

* ``RATELIMITS_BENCH_DB``: the SQLite file (migrated by the benchmark) that
  holds the policies;
* ``RATELIMITS_BENCH_REDIS``: the benchmark's Redis, for the limiter and for
  the django-redis cache that django-ratelimit and DRF count in;
* ``RATELIMITS_BENCH_MIDDLEWARE``: ``1`` to put ``RateLimitMiddleware`` in
  ``MIDDLEWARE`` (the in-process benchmark builds its handlers with and
  without it itself).

``AuthenticationMiddleware`` gives way to :class:`benchmarks.site.BenchUser`,
which makes the ``X-Bench-User`` header the user without a database query,
so that per-user limits have users and the database is not what is measured.
Policies are loaded once: ``POLICY_REFRESH`` is an hour.
"""

from __future__ import annotations

import os

from demo_project.settings import *  # noqa: F403
from demo_project.settings import MIDDLEWARE as BASE_MIDDLEWARE
from devtools.server_logging import SERVER_LOGGING

SECRET_KEY = "django-ratelimits-benchmarks-only-not-secret"
DEBUG = False
ALLOWED_HOSTS = ["testserver", "127.0.0.1", "localhost"]
ROOT_URLCONF = "benchmarks.urls"

DATABASES = {
    "default": {"ENGINE": "django.db.backends.sqlite3", "NAME": os.environ["RATELIMITS_BENCH_DB"]}
}
REDIS_URL = os.environ["RATELIMITS_BENCH_REDIS"]
CACHES = {
    "default": {
        "BACKEND": "django_redis.cache.RedisCache",
        "LOCATION": REDIS_URL,
        "OPTIONS": {"CLIENT_CLASS": "django_redis.client.DefaultClient"},
    }
}
DJANGO_RATELIMITS = {"REDIS": REDIS_URL, "POLICY_REFRESH": 3600}
RATELIMIT_USE_CACHE = "default"  # django-ratelimit's cache: the same Redis

_AUTH = "django.contrib.auth.middleware.AuthenticationMiddleware"
MIDDLEWARE = [name if name != _AUTH else "benchmarks.site.BenchUser" for name in BASE_MIDDLEWARE]
RATE_LIMIT_MIDDLEWARE = "django_ratelimits.middleware.RateLimitMiddleware"
if os.environ.get("RATELIMITS_BENCH_MIDDLEWARE") == "1":
    _AT = MIDDLEWARE.index("benchmarks.site.BenchUser") + 1
    MIDDLEWARE = [*MIDDLEWARE[:_AT], RATE_LIMIT_MIDDLEWARE, *MIDDLEWARE[_AT:]]

LOGGING = SERVER_LOGGING
