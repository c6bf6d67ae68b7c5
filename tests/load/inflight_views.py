"""The view of ``tests/load/test_servers_inflight.py``'s servers: ``/held`` blocks until
the test lets it go.

``/held`` pops one token from the Redis list :data:`GATE` (``BLPOP``), waiting for
it: the test decides when each request ends by pushing tokens, so how many are in
flight at a time never depends on the machine's speed.
"""

from __future__ import annotations

import os

import redis
from django.http import HttpRequest, HttpResponse
from django.urls import path

GATE = "inflight-test-gate"
WAIT_MAX = 60  # seconds a held view waits for its token at most


def held(request: HttpRequest) -> HttpResponse:
    with redis.Redis.from_url(os.environ["RATELIMITS_SERVER_REDIS"]) as client:
        token = client.blpop([GATE], timeout=WAIT_MAX)
    return HttpResponse("released" if token else "gave up", status=200 if token else 504)


urlpatterns = [path("held", held)]
