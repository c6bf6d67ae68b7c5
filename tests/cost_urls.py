"""Views whose requests cost more than 1 (tests/request/test_cost.py)."""

from __future__ import annotations

import json

from django.http import HttpRequest, HttpResponse
from django.urls import path

from django_ratelimits.decorators import ratelimit


def cost_from_query(request: HttpRequest) -> int:
    """What the client asks, as JSON (``?cost=5``, ``?cost=2.5``, ``?cost=null``), raising
    for ``?cost=raise``: a cost function whose answer an outsider controls."""
    text = request.GET.get("cost", "1")
    if text == "raise":
        raise RuntimeError("the cost function failed")
    return json.loads(text)  # type: ignore[no-any-return]


@ratelimit("c-report", rate="10/h", algorithm="fixed_window", cost=5)
def report(request: HttpRequest) -> HttpResponse:
    return HttpResponse("an expensive report")


@ratelimit("c-search", rate="10/h", algorithm="fixed_window", cost=cost_from_query)
def search(request: HttpRequest) -> HttpResponse:
    return HttpResponse("results")


@ratelimit("c-costly", rate="10/h", algorithm="fixed_window", cost=cost_from_query)
async def costly_async(request: HttpRequest) -> HttpResponse:
    return HttpResponse("async results")


@ratelimit("c-gcra", rate="10/h", algorithm="gcra", burst=2, cost=cost_from_query)
def bucket_gcra(request: HttpRequest) -> HttpResponse:
    return HttpResponse("a bucket of 2, refilled at 10 an hour")


@ratelimit("c-tb", rate="10/h", algorithm="token_bucket", burst=2, cost=cost_from_query)
def bucket_tb(request: HttpRequest) -> HttpResponse:
    return HttpResponse("a bucket of 2, refilled at 10 an hour")


urlpatterns = [
    path("cost/report", report),
    path("cost/search", search),
    path("cost/async", costly_async),
    path("cost/gcra", bucket_gcra),
    path("cost/tb", bucket_tb),
]
