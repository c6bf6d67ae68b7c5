"""URLs of the benchmark site: one trivial view, bare, under each decorator, and after
one PING (the floor of any limiter that asks Redis once per request)."""

from __future__ import annotations

import functools
from collections.abc import Callable

from django.http import HttpRequest, HttpResponse
from django.urls import path
from django_ratelimit.decorators import ratelimit as django_ratelimit

from django_ratelimits import compat
from django_ratelimits.engine import get_engine

PEER_RATE = "10/s"
# The limits-bite check's rate: an hour, so that its requests span at most two windows
# however slow the machine (at 10/s a slow run crosses a window and lets them all through).
CHECK_RATE = "10/h"
# The rate of the view that a server benchmark loads: never reached, so every request is
# counted and allowed.
LOAD_RATE = "1000000/s"


def item(request: HttpRequest, n: int) -> HttpResponse:
    return HttpResponse(b"ok", content_type="text/plain")


def one_ping(view: Callable[[HttpRequest, int], HttpResponse]) -> Callable[..., HttpResponse]:
    """``view`` after one ``PING`` to the limiter's Redis, on the engine's own client and
    pool: what a request pays for one round trip and nothing else, the least any limiter
    that asks Redis once per request can add."""

    @functools.wraps(view)
    def pinged(request: HttpRequest, n: int) -> HttpResponse:
        get_engine().client.ping()
        return view(request, n)

    return pinged


urlpatterns = [
    path("api/items/<int:n>", item),
    path("limited/<int:n>", item),
    path("django-ratelimit/items/<int:n>", django_ratelimit(key="ip", rate=PEER_RATE)(item)),
    path("compat/items/<int:n>", compat.ratelimit(key="ip", rate=PEER_RATE)(item)),
    path("django-ratelimit/check/<int:n>", django_ratelimit(key="ip", rate=CHECK_RATE)(item)),
    path("django-ratelimit/load/<int:n>", django_ratelimit(key="ip", rate=LOAD_RATE)(item)),
    path("compat/check/<int:n>", compat.ratelimit(key="ip", rate=CHECK_RATE)(item)),
    path("ping/items/<int:n>", one_ping(item)),
]
