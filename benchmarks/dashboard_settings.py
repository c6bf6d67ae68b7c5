"""Settings of the dashboard benchmark (``benchmarks.dashboard_page``), in process.

The demo's base settings (admin, the dashboard, ``demo_project.urls``) with an in-memory
database and a local-memory cache; the benchmark points ``DJANGO_RATELIMITS`` at its own
Redis with ``override_settings``.
"""

from __future__ import annotations

from demo_project.settings import *  # noqa: F403

SECRET_KEY = "django-ratelimits-benchmarks-only-not-secret"
DEBUG = False
ALLOWED_HOSTS = ["testserver", "127.0.0.1", "localhost"]
ROOT_URLCONF = "demo_project.urls"
DATABASES = {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}}
CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}
LOGGING = {"version": 1, "disable_existing_loggers": False}
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
