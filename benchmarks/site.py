"""The Django side of the benchmarks: set-up, the policies, the user and one WSGI call.

:func:`setup` configures Django in this process with ``benchmarks.settings``
(SQLite in ``workdir``, the benchmark's Redis), migrates, and makes every
redis-py connection the limiter and the cache open count its writes
(:class:`benchmarks.kit.CountingConnection`). :func:`environment` is the
same configuration for a server process.

:func:`policy_rows` is the policy set of the request and server benchmarks:
``n`` policies, of which only ``api`` applies to ``GET /api/items/<n>``.
"""

from __future__ import annotations

import functools
import io
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from django.http import HttpRequest
from django.utils.deprecation import MiddlewareMixin

if TYPE_CHECKING:
    from django.contrib.auth.models import User

    from devtools.redis_harness import RedisServer

SEED_000_RATES = "10/s, 120/m, 240/h"
# The same three rates, never reached: for load from one client (a server, a busy client).
LOAD_RATES = "100000/s, 1000000/m, 1000000/h"
LIMITED = 5  # per minute and address, on /limited/: shows a server really limits


def environment(server: RedisServer, workdir: Path, *, middleware: bool) -> dict[str, str]:
    """Environment variables of a process running ``benchmarks.settings``."""
    return {
        "DJANGO_SETTINGS_MODULE": "benchmarks.settings",
        "RATELIMITS_BENCH_DB": str(workdir / "bench.sqlite3"),
        "RATELIMITS_BENCH_REDIS": server.url,
        "RATELIMITS_BENCH_MIDDLEWARE": "1" if middleware else "0",
    }


def setup(server: RedisServer, workdir: Path) -> None:
    """Django in this process (without the middleware in ``MIDDLEWARE``), migrated."""
    os.environ.update(environment(server, workdir, middleware=False))
    import django
    from django.conf import settings
    from django.core.management import call_command
    from django.test.utils import override_settings

    from benchmarks.kit import CountingConnection

    django.setup()
    cache: dict[str, Any] = settings.CACHES["default"]
    options = {
        **cache["OPTIONS"],
        "CONNECTION_POOL_KWARGS": {"connection_class": CountingConnection},
    }
    override_settings(
        CACHES={"default": {**cache, "OPTIONS": options}},
        DJANGO_RATELIMITS={
            **settings.DJANGO_RATELIMITS,
            "REDIS": {"URL": server.url, "OPTIONS": {"connection_class": CountingConnection}},
        },
    ).enable()
    call_command("migrate", verbosity=0)


def policy_rows(n: int, api_rates: str = SEED_000_RATES) -> list[dict[str, Any]]:
    """``n`` policies; on ``GET /api/items/<n>`` only ``api`` applies: 2 identities x 3 rates.

    The others, as a site might have them: ``limited`` (``/limited/``, 5/m per
    address), then prefixes of other sections with every key kind and
    algorithm, one in ten on ``^/api/`` for POST only (the path matches, the
    method does not), and one in fifty unanchored (searched in every path).
    """
    rows: list[dict[str, Any]] = [
        {
            "name": "api",
            "rates": api_rates,
            "key": "ip_and_user",
            "path": r"^/api/",
            "record_metadata": "every",
            "priority": 10,
        },
        {
            "name": "limited",
            "rates": f"{LIMITED}/m",
            "algorithm": "sliding_log",
            "path": "^/limited/",
        },
    ]
    algorithms = ("fixed_window", "sliding_window", "token_bucket", "gcra")
    keys = ("ip", "user", "user_or_ip", "ip_and_user")
    for k in range(2, n):
        row = {
            "name": f"other-{k}",
            "rates": f"{k % 50 + 1}/m, {k + 100}/h",
            "algorithm": algorithms[k % len(algorithms)],
            "key": keys[k % len(keys)],
            "path": rf"^/section-{k}/",
        }
        if k % 10 == 5:
            row.update(path="^/api/", methods="POST")
        elif k % 50 == 7:
            row.update(path=rf"/export-{k}\.csv$")
        rows.append(row)
    return rows[:n]


def store_policies(rows: list[dict[str, Any]]) -> None:
    """Make the database hold exactly ``rows``."""
    from django_ratelimits.models import Policy

    Policy.objects.all().delete()
    for fields in rows:
        policy = Policy(**fields)
        policy.full_clean()
        policy.save()


def bites(statuses: list[int], limit: int) -> bool:
    """The first allowed, at least one refused, no other status: a limiter counted and
    refused. Requests at ``limit`` an hour (or a minute) span one window, or two if one
    ends among them: from ``limit`` to ``2 * limit`` pass, however slow the machine."""
    allowed = statuses.count(200)
    refused = statuses.count(403) + statuses.count(429)
    return statuses[0] == 200 and allowed >= limit and refused == len(statuses) - allowed > 0


@functools.cache
def _user(pk: int) -> User:
    from django.contrib.auth.models import User

    return User(pk=pk, username=f"bench-{pk}")


class BenchUser(MiddlewareMixin):
    """``request.user``: the user whose id ``X-Bench-User`` names, else anonymous."""

    def process_request(self, request: HttpRequest) -> None:
        from django.contrib.auth.models import AnonymousUser

        header = request.META.get("HTTP_X_BENCH_USER", "")
        request.user = _user(int(header)) if header.isdigit() else AnonymousUser()


WSGICall = Callable[[str, str, int | None], int]


def wsgi_caller(handler: Callable[..., Any]) -> WSGICall:
    """``call(path, client address, user id) -> status`` through a WSGI ``handler``."""

    def call(path: str, address: str, user: int | None) -> int:
        environ = {
            "REQUEST_METHOD": "GET",
            "PATH_INFO": path,
            "SCRIPT_NAME": "",
            "QUERY_STRING": "",
            "SERVER_NAME": "testserver",
            "SERVER_PORT": "80",
            "SERVER_PROTOCOL": "HTTP/1.1",
            "HTTP_HOST": "testserver",
            "REMOTE_ADDR": address,
            "wsgi.version": (1, 0),
            "wsgi.url_scheme": "http",
            "wsgi.input": io.BytesIO(),
            "wsgi.errors": sys.stderr,
            "wsgi.multithread": False,
            "wsgi.multiprocess": False,
            "wsgi.run_once": False,
        }
        if user is not None:
            environ["HTTP_X_BENCH_USER"] = str(user)
        status: list[str] = []
        body = handler(environ, lambda line, headers, exc_info=None: status.append(line))
        try:
            for _ in body:
                pass
        finally:
            body.close()
        return int(status[0].split()[0])

    return call
