"""Views of the concurrency tests: each reports how many slots its client holds while
it runs, streams, raises, or is decorated with a concurrency policy of its own; the
held views run until the test lets them go (``Gate``)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator

from asgiref.sync import sync_to_async
from django.http import HttpRequest, HttpResponse, JsonResponse, StreamingHttpResponse
from django.urls import path
from django.utils.decorators import method_decorator
from django.views import View

from django_ratelimits.decorators import ratelimit
from django_ratelimits.engine import Check, Identity, get_engine
from django_ratelimits.policies import get_registry


def in_flight(policy: str, ip: str = "127.0.0.1") -> int:
    """The slots ``ip`` holds under ``policy`` now (a peek: takes none)."""
    limit = get_registry().get(policy).limits[0]  # type: ignore[union-attr]
    result = get_engine().peek([Check(Identity("ip", ip), [limit])]).results[0]
    return limit.rate.limit - result.remaining


class Gate:
    """What a held view tells the test and waits for: ``started`` once it runs, then it
    blocks until ``go``; ``finished`` once it returns."""

    def __init__(self) -> None:
        self.started = threading.Event()
        self.go = threading.Event()
        self.finished = threading.Event()

    def reset(self) -> None:
        for event in (self.started, self.go, self.finished):
            event.clear()


gate = Gate()


def held(request: HttpRequest) -> HttpResponse:
    gate.started.set()
    gate.go.wait(30)
    gate.finished.set()
    return HttpResponse("done")


async def aheld(request: HttpRequest) -> HttpResponse:
    gate.started.set()
    try:
        await asyncio.Event().wait()  # until the request is cancelled
    finally:
        gate.finished.set()
    return HttpResponse("never")


def quick(request: HttpRequest) -> HttpResponse:
    return HttpResponse("quick")


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


@ratelimit("t-cc-held", rate="1", algorithm="concurrency", lease=30)
def decorated_held(request: HttpRequest) -> HttpResponse:
    return held(request)


@ratelimit("t-cc-held", rate="1", algorithm="concurrency", lease=30)
def decorated_quick(request: HttpRequest) -> HttpResponse:
    return quick(request)


@ratelimit("t-cc-raise", rate="1", algorithm="concurrency")
def decorated_boom(request: HttpRequest) -> HttpResponse:
    raise ValueError("the view failed")


@method_decorator(
    ratelimit("t-cc-cbv", rate="1", algorithm="concurrency", lease=30), name="dispatch"
)
class DecoratedClassView(View):
    def get(self, request: HttpRequest) -> HttpResponse:
        return JsonResponse({"in_flight": in_flight("t-cc-cbv")})


@method_decorator(
    ratelimit("t-cc-acbv", rate="1", algorithm="concurrency", lease=30), name="dispatch"
)
class AsyncDecoratedClassView(View):
    """Its ``dispatch``, a sync method, returns the coroutine of ``get``."""

    async def get(self, request: HttpRequest) -> HttpResponse:
        return JsonResponse({"in_flight": await sync_to_async(in_flight)("t-cc-acbv")})


urlpatterns = [
    path("inflight/report", report),
    path("inflight/stream", stream),
    path("inflight/astream", astream),
    path("inflight/boom", boom),
    path("inflight/held", held),
    path("inflight/aheld", aheld),
    path("inflight/quick", quick),
    path("decorated-held", decorated_held),
    path("decorated-quick", decorated_quick),
    path("inflight/aboom", aboom),
    path("decorated", decorated),
    path("adecorated", adecorated),
    path("decorated-boom", decorated_boom),
    path("decorated-cbv", DecoratedClassView.as_view()),
    path("adecorated-cbv", AsyncDecoratedClassView.as_view()),
]
