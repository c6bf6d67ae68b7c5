"""Django settings for the test suite (pytest-django reads them via pyproject.toml).

The demo's settings, with what a test run needs instead: an in-memory database, a
local-memory cache and no Redis. The Redis servers are started by the harness on free
ports (see ``tests/conftest.py``); tests that need the limiter point
``DJANGO_RATELIMITS`` at them with ``override_settings``.
"""

from __future__ import annotations

from demo_project.settings import *  # noqa: F403

SECRET_KEY = "django-ratelimits-tests-only-not-secret"
DEBUG = False
ALLOWED_HOSTS = ["testserver", "localhost", "127.0.0.1"]

# "other" is created only for the tests that ask for it (pytest-django sets up the
# databases the collected tests name): tests/policies/test_policy_version_database.py.
DATABASES = {
    "default": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"},
    "other": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"},
}

CACHES = {
    "default": {
        "BACKEND": "django.core.cache.backends.locmem.LocMemCache",
        "LOCATION": "django-ratelimits-tests",
    }
}
DJANGO_RATELIMITS: dict[str, object] = {
    # The key functions the tests' policies name, as a project lists its own; some
    # are missing or not callable on purpose, for the tests of those errors.
    "KEY_FUNCTIONS": [
        "tests.request.test_identity.key_from_query",
        "tests.request.test_identity.key_as_int",
        "tests.request.test_identity.missing",
        "tests.request.test_identity.NOT_CALLABLE",
        "tests.policies.test_models.key_for_tests",
        "tests.policies.test_models.missing",
        "tests.policies.test_models.NOT_CALLABLE",
        "tests.nowhere.key",
        "tests.request.test_hostile.who",
    ],
    # The default 0.25 s is for production; on a busy CI machine (two cores shared with
    # Redis servers, gunicorn and Chromium) a Redis answer can take longer, and the
    # request would fail open where a test expects a decision. Tests of timeouts and
    # outages set their own (tests/server_settings.py, tests/operations/test_checks.py).
    "SOCKET_TIMEOUT": 5.0,
    "SOCKET_CONNECT_TIMEOUT": 5.0,
}
# Django's default logging; the demo's console handler would only add noise.
LOGGING: dict[str, object] = {"version": 1, "disable_existing_loggers": False}
# Fast hashing: the tests create users, they do not test password storage.
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
