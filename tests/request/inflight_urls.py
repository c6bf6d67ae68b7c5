"""Views of the concurrency tests: each reports how many slots its client holds while
it runs, streams, raises, or is decorated with a concurrency policy of its own."""

from __future__ import annotations

from collections.abc import AsyncIterator

from django.http import HttpRequest, HttpResponse, JsonResponse, StreamingHttpResponse
from django.urls import path

from django_ratelimits.decorators import ratelimit
from django_ratelimits.engine import Check, Identity, get_engine
from django_ratelimits.policies import get_registry


def in_flight(policy: str, ip: str = "127.0.0.1") -> int:
    """The slots ``ip`` holds under ``policy`` now (a peek: takes none)."""
    limit = get_registry().get(policy).limits[0]  # type: ignore[union-attr]
    result = get_engine().peek([Check(Identity("ip", ip), [limit])]).results[0]
    return limit.rate.limit - result.remaining


def report(request: HttpRequest) -> HttpResponse:
    return JsonResponse({"in_flight": in_flight("cc")})


def stream(request: HttpRequest) -> StreamingHttpResponse:
    return StreamingHttpResponse(iter([b"first ", b"second"]))


async def astream(request: HttpRequest) -> StreamingHttpResponse:
    async def chunks() -> AsyncIterator[bytes]:
        yield b"first "
        yield b"second"

    return StreamingHttpResponse(chunks())


def boom(request: HttpRequest) -> HttpResponse:
    raise ValueError("the view failed")


async def aboom(request: HttpRequest) -> HttpResponse:
    raise ValueError("the view failed")


@ratelimit("t-cc-deco", rate="1", algorithm="concurrency", lease=30)
def decorated(request: HttpRequest) -> HttpResponse:
    return JsonResponse({"in_flight": in_flight("t-cc-deco")})


@ratelimit("t-cc-adeco", rate="1/concurrent", algorithm="concurrency")
async def adecorated(request: HttpRequest) -> HttpResponse:
    return StreamingHttpResponse(iter([b"streamed"]))


@ratelimit("t-cc-raise", rate="1", algorithm="concurrency")
def decorated_boom(request: HttpRequest) -> HttpResponse:
    raise ValueError("the view failed")


urlpatterns = [
    path("inflight/report", report),
    path("inflight/stream", stream),
    path("inflight/astream", astream),
    path("inflight/boom", boom),
    path("inflight/aboom", aboom),
    path("decorated", decorated),
    path("adecorated", adecorated),
    path("decorated-boom", decorated_boom),
]
