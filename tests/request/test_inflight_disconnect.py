"""Concurrency slots when an ASGI client goes away mid-request (Django's ``ASGIHandler``
driven with a real ``http.disconnect``, real Redis): the slot is given back when the
view's work has ended, never before, and not a lease after.

Django cancels the request's task on a disconnect. An async view stops there; a sync
view goes on in its thread (nothing can stop it), so its slot must stay taken until it
returns; and the response it returns then reaches nobody, never closed, so its slot
must not wait for a ``close()`` that never comes."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, ClassVar

import pytest
from django.conf import settings
from django.core.handlers.asgi import ASGIHandler
from django.core.signals import request_finished, request_started
from django.db import close_old_connections
from django.http import HttpRequest, HttpResponseBase
from django.test import Client, override_settings

from django_ratelimits.models import Policy
from django_ratelimits.policies import get_registry
from tests.request.inflight_urls import gate, in_flight

pytestmark = pytest.mark.django_db

WITHOUT_MIDDLEWARE = [m for m in settings.MIDDLEWARE if "ratelimits" not in m]


def _scope(path: str) -> dict[str, Any]:
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "root_path": "",
        "query_string": b"",
        "headers": [(b"host", b"testserver")],
        "client": ("127.0.0.1", 40000),
        "server": ("testserver", 80),
    }


class Connection:
    """One ASGI connection: its request's body, then a disconnect when told."""

    def __init__(self) -> None:
        self.inbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self.inbox.put_nowait({"type": "http.request", "body": b"", "more_body": False})
        self.sent: list[Mapping[str, Any]] = []
        self.heard = asyncio.Event()  # the handler has read the disconnect

    async def receive(self) -> dict[str, Any]:
        message = await self.inbox.get()
        if message["type"] == "http.disconnect":
            self.heard.set()
        return message

    async def send(self, message: Mapping[str, Any]) -> None:
        self.sent.append(message)

    def go_away(self) -> None:
        self.inbox.put_nowait({"type": "http.disconnect"})

    def status(self) -> int | None:
        starts = [m for m in self.sent if m["type"] == "http.response.start"]
        return starts[0]["status"] if starts else None


async def _get(handler: ASGIHandler, path: str) -> int | None:
    """The status of one whole request to ``path``."""
    connection = Connection()
    await asyncio.wait_for(handler(_scope(path), connection.receive, connection.send), 10)
    return connection.status()


def _start(handler: ASGIHandler, path: str) -> tuple[Connection, asyncio.Task[None]]:
    connection = Connection()
    task = asyncio.create_task(handler(_scope(path), connection.receive, connection.send))
    return connection, task


async def _until(condition: Callable[[], bool], what: str) -> None:
    """Wait for ``condition`` (checked in a thread: it may ask Redis), failing after 10 s."""
    deadline = time.monotonic() + 10
    while not await asyncio.to_thread(condition):
        assert time.monotonic() < deadline, f"still not {what} after 10 s"
        await asyncio.sleep(0.01)


class _Deferred(logging.Handler):
    """Notes the log line of a release left to a view still running."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.seen = False

    def emit(self, record: logging.LogRecord) -> None:
        if "given back when its sync work" in record.getMessage():
            self.seen = True


@contextmanager
def inflight_site(lease: int) -> Iterator[None]:
    """One slot per client IP on /inflight/ (``lease`` seconds), with Django's database
    signals off: the views run in threads of their own, outside the test's transaction."""
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    try:
        with override_settings(ROOT_URLCONF="tests.request.inflight_urls"):
            Policy.objects.create(
                name="cc", algorithm="concurrency", rates="1", lease=lease, path=r"^/inflight/"
            )
            get_registry().refresh()
            yield
    finally:
        request_started.connect(close_old_connections)
        request_finished.connect(close_old_connections)


@pytest.fixture
def asgi(site_redis: Any) -> Iterator[_Deferred]:
    """:func:`inflight_site` (lease 30 s), the held views reset. Yields what notes a
    deferred release."""
    gate.reset()
    logger = logging.getLogger("django_ratelimits")
    deferred = _Deferred()
    level = logger.level
    logger.setLevel(logging.DEBUG)
    logger.addHandler(deferred)
    try:
        with inflight_site(lease=30):
            yield deferred
    finally:
        gate.go.set()  # a failed test must not leave a view blocked
        logger.removeHandler(deferred)
        logger.setLevel(level)


def test_a_client_gone_away_keeps_the_slot_until_its_sync_view_returns(asgi: _Deferred) -> None:
    """Middleware, sync view: the view runs on after the disconnect, so its slot stays
    taken (the same client's next request is refused) until it returns."""

    async def run() -> None:
        handler = ASGIHandler()
        first, task = _start(handler, "/inflight/held")
        assert await asyncio.to_thread(gate.started.wait, 10), "the held view never started"
        assert await asyncio.to_thread(in_flight, "cc") == 1
        first.go_away()
        # Django cancels the request's task: the middleware either leaves the release
        # to the view's end (and says so) or, wrongly, gives the slot back at once.
        await _until(lambda: asgi.seen or in_flight("cc") == 0, "reacted to the disconnect")
        assert not gate.finished.is_set(), "the view ended before the probe: proves nothing"
        held = await asyncio.to_thread(in_flight, "cc")
        status = await _get(handler, "/inflight/quick")
        assert (held, status) == (1, 429), (
            f"slot given back while the view still runs: held={held}, next request {status}"
        )
        gate.go.set()
        await asyncio.wait_for(task, 10)  # the handler waits for the view's thread
        assert gate.finished.is_set()
        assert await asyncio.to_thread(in_flight, "cc") == 0, "not given back at the view's end"
        assert await _get(handler, "/inflight/quick") == 200

    asyncio.run(run())


def test_a_client_gone_away_frees_an_async_views_slot_at_once(asgi: _Deferred) -> None:
    """Middleware, async view: the cancellation ends the view, and with it its slot."""

    async def run() -> None:
        handler = ASGIHandler()
        first, task = _start(handler, "/inflight/aheld")
        assert await asyncio.to_thread(gate.started.wait, 10)
        assert await asyncio.to_thread(in_flight, "cc") == 1
        first.go_away()
        await asyncio.wait_for(task, 10)
        assert gate.finished.is_set(), "the async view was not cancelled"
        assert await asyncio.to_thread(in_flight, "cc") == 0
        assert await _get(handler, "/inflight/quick") == 200

    asyncio.run(run())


def test_a_client_gone_away_frees_the_decorators_slot_once_its_sync_view_returns(
    asgi: _Deferred,
) -> None:
    """``@ratelimit`` alone, sync view: held while the view runs on after the disconnect;
    given back once it returns, although its response reaches nobody and is never
    closed (it was held for the whole lease)."""

    async def run() -> None:
        with override_settings(MIDDLEWARE=WITHOUT_MIDDLEWARE):
            handler = ASGIHandler()
        first, task = _start(handler, "/decorated-held")
        assert await asyncio.to_thread(gate.started.wait, 10)
        first.go_away()
        await asyncio.wait_for(first.heard.wait(), 10)
        # Django 5.2 then cancels the request's task and gives the request up, in a few
        # turns of the loop (no thread, no clock); Django 6 waits for the view's thread.
        for _ in range(100):
            await asyncio.sleep(0)
        assert not gate.finished.is_set()
        held = await asyncio.to_thread(in_flight, "t-cc-held")
        assert (held, await _get(handler, "/decorated-quick")) == (1, 429), "freed too soon"
        gate.go.set()
        await asyncio.wait_for(task, 10)
        await _until(lambda: in_flight("t-cc-held") == 0, "given back after the view ended")
        assert await _get(handler, "/decorated-quick") == 200

    asyncio.run(run())


class ReplacingMiddleware:
    """A middleware that answers with a response of its own and drops the view's
    without closing it."""

    inner: ClassVar[list[int]] = []  # the statuses of the responses it dropped

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponseBase]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponseBase:
        from django.http import HttpResponse

        self.inner.append(self.get_response(request).status_code)
        return HttpResponse("replaced")


def test_a_response_dropped_unclosed_gives_its_slot_back(asgi: _Deferred) -> None:
    """A middleware above that replaces the view's response without closing it: the
    slot is given back when the dropped response goes, not at the end of its lease."""
    middleware = [f"{__name__}.ReplacingMiddleware", *settings.MIDDLEWARE]
    ReplacingMiddleware.inner.clear()
    with override_settings(MIDDLEWARE=middleware):
        client = Client()
        client.get("/inflight/quick")
        deadline = time.monotonic() + 10
        while in_flight("cc"):
            assert time.monotonic() < deadline, "the dropped response's slot leaked"
            time.sleep(0.01)
        client.get("/inflight/quick")
    assert ReplacingMiddleware.inner == [200, 200]  # the slot was free for the second
