"""Settings of the real gunicorn and uvicorn servers that ``tests/load/test_servers.py`` starts.

The test settings, with what a server process needs instead: a file-based SQLite
database (``RATELIMITS_SERVER_DB``, migrated by the test) that every worker
shares, the harness's Redis (``RATELIMITS_SERVER_REDIS``), ``RateLimitMiddleware``
after ``AuthenticationMiddleware`` and the views of ``tests.urls``. Every
response names the process that served it (``X-Worker-Pid``), so that the test
can tell gunicorn's two workers apart.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from django.http import HttpRequest, HttpResponse

from devtools.server_logging import SERVER_LOGGING
from tests.settings import *  # noqa: F403
from tests.settings import MIDDLEWARE

DATABASES = {
    "default": {"ENGINE": "django.db.backends.sqlite3", "NAME": os.environ["RATELIMITS_SERVER_DB"]}
}


def worker_pid(
    get_response: Callable[[HttpRequest], HttpResponse],
) -> Callable[[HttpRequest], HttpResponse]:
    def middleware(request: HttpRequest) -> HttpResponse:
        response = get_response(request)
        response["X-Worker-Pid"] = str(os.getpid())
        return response

    return middleware


MIDDLEWARE = [
    "tests.server_settings.worker_pid",
    *MIDDLEWARE,
    "django_ratelimits.middleware.RateLimitMiddleware",
]
ROOT_URLCONF = "tests.urls"

DJANGO_RATELIMITS = {
    "REDIS": os.environ["RATELIMITS_SERVER_REDIS"],
    # The defaults, spelled out: what the outage test's latency bound rests on.
    "SOCKET_TIMEOUT": 0.25,
    "SOCKET_CONNECT_TIMEOUT": 0.25,
    "BREAKER_FAILURES": 3,
    # Shorter than the default 5 s, so that recovery is seen quickly.
    "BREAKER_COOLDOWN": 1.0,
    # The default unless a test's servers say otherwise (RATELIMITS_SERVER_DENIAL_CACHE).
    "DENIAL_CACHE": int(os.environ.get("RATELIMITS_SERVER_DENIAL_CACHE", "10000")),
}

LOGGING = SERVER_LOGGING
