"""A request cancelled while its engine call is out (real Redis, standalone and cluster):
what the call took in Redis, a concurrency slot or a failed login's place in flight, is
given back, not kept until its lease ends.

Django cancels a request's task when its ASGI client goes away; the task may then be
waiting for the check's reply, the check sent, the slot perhaps taken. Nothing here
waits for a time, only for a state (each wait bounded by 10 s):

* ``CLIENT PAUSE <ms> WRITE`` makes Redis hold the check (FCALL, or EVALSHA on Redis 6,
  is a write command) until ``CLIENT UNPAUSE``; ``CLIENT LIST`` shows it held (flag
  ``b``), so the test knows it was sent;
* ``replied``: Redis runs the check and answers, and the reply waits unread: from
  ``CLIENT UNPAUSE`` to the cancellation the test's own code holds the event loop (it
  asks Redis with a blocking client), so the request's task cannot read it;
* ``held``: the task is cancelled while Redis still holds the check, then Redis runs it.

Both on the package's asyncio client and on the sync client in a worker thread (the
engine's way where there is no asyncio client: Sentinel-backed cache aliases).
"""

from __future__ import annotations

import asyncio
import io
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis
from django.conf import settings
from django.contrib.auth import aauthenticate
from django.core.handlers.asgi import ASGIHandler
from django.test import RequestFactory, override_settings
from redis.cluster import RedisCluster

from django_ratelimits import signals
from django_ratelimits.engine import get_engine
from django_ratelimits.logins import BACKEND, _planned
from django_ratelimits.models import Policy
from django_ratelimits.policies import get_registry
from django_ratelimits.policies.registry import current
from tests.request.inflight_urls import in_flight
from tests.request.test_inflight_disconnect import (
    WITHOUT_MIDDLEWARE,
    _get,
    _scope,
    _until,
    inflight_site,
)
from tests.request.test_logins import LOGIN, policy

pytestmark = pytest.mark.django_db

PAUSE_MS = 30_000  # CLIENT PAUSE's own end, should a failed test not reach its unpause
CHECK_COMMANDS = frozenset({"fcall", "evalsha", "eval"})


class Nodes:
    """A plain client of each primary: pauses their writes, says when one holds a check."""

    def __init__(self, clients: list[redis.Redis]) -> None:
        self.clients = clients

    def pause(self) -> None:
        for client in self.clients:
            client.execute_command("CLIENT", "PAUSE", PAUSE_MS, "WRITE")

    def unpause(self) -> None:
        for client in self.clients:
            client.execute_command("CLIENT", "UNPAUSE")

    def holding(self) -> bool:
        """Whether a node holds a check sent to it (a client blocked by the pause)."""
        return any(
            "b" in entry["flags"] and entry["cmd"] in CHECK_COMMANDS
            for client in self.clients
            for entry in client.client_list()
        )


@pytest.fixture
def nodes(site_redis: Any, request: pytest.FixtureRequest) -> Iterator[Nodes]:
    """The site's Redis (``site_redis``: standalone, then cluster), a plain client per
    primary; never left paused. The engine's socket timeout is 30 s, so a check that
    Redis holds while a busy machine runs the test does not fail open."""
    if isinstance(site_redis, RedisCluster):
        clients = request.getfixturevalue("redis_cluster").node_clients()
    else:
        clients = [request.getfixturevalue("redis_standalone").client()]
    held = Nodes(clients)
    try:
        with override_settings(
            DJANGO_RATELIMITS={**settings.DJANGO_RATELIMITS, "SOCKET_TIMEOUT": 30.0}
        ):
            yield held
    finally:
        held.unpause()
        for client in clients:
            client.close()


@pytest.fixture(params=["asyncio", "thread"])
def way(
    request: pytest.FixtureRequest, nodes: Nodes, monkeypatch: pytest.MonkeyPatch
) -> Iterator[str]:
    """How the engine asks Redis in async code: its asyncio client, or (``thread``) the
    sync client in a worker thread, as where the settings give no asyncio client."""
    engine = get_engine()
    if request.param == "thread":
        monkeypatch.setattr(engine, "_async_client", None)
    yield str(request.param)
    assert get_engine() is engine, "the test ran on another engine than the one chosen"


@pytest.fixture
def site(nodes: Nodes) -> Iterator[ASGIHandler]:
    """The concurrency tests' site (:func:`inflight_site`, lease 60 s). Yields an ASGI
    handler of it (``RateLimitMiddleware`` included)."""
    with inflight_site(lease=60):
        yield ASGIHandler()


def _wait(condition: Callable[[], bool], what: str) -> None:
    """Wait for ``condition`` in this thread, holding the event loop: nothing of the
    request's task runs meanwhile."""
    deadline = time.monotonic() + 10
    while not condition():
        assert time.monotonic() < deadline, f"still not {what} after 10 s"
        time.sleep(0.005)


async def _cancel_during_the_call(
    nodes: Nodes, when: str, start: Callable[[], asyncio.Task[Any]], taken: Callable[[], bool]
) -> None:
    """Start a task that makes an engine call that ``taken`` says took its slot or
    place; cancel it while Redis holds the call (``held``) or once Redis has answered
    but before the task read the reply (``replied``); the cancellation reaches its
    awaiter, as Django's handler awaits the request's cancelled task.

    The engine's code must be in Redis already (a call of the engine made first), so
    that the check is one command: not a "function not found" error, then the code
    loaded, then the check, which the task would send only once it reads the error."""
    assert not await asyncio.to_thread(taken)
    nodes.pause()
    task = start()
    await _until(nodes.holding, "holding the check")
    if when == "replied":
        # From here to task.cancel() the event loop runs nothing: Redis runs the check
        # (the slot is taken) and answers, and the reply waits unread in the socket.
        nodes.unpause()
        _wait(taken, "taken by the check")
        task.cancel()
    else:
        task.cancel()
        # The loop runs its ready callbacks in order: the task's wake-up with the
        # cancellation, queued by cancel(), runs before this coroutine resumes.
        await asyncio.sleep(0)
        nodes.unpause()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, 10)


@pytest.mark.parametrize("when", ["replied", "held"])
def test_a_request_cancelled_during_its_check_gives_its_slot_back(
    site: ASGIHandler, nodes: Nodes, way: str, when: str
) -> None:
    """The middleware: the same client's next request is admitted, not refused for the
    lease's 60 s."""
    handler = site

    def start() -> asyncio.Task[Any]:
        request, _ = handler.create_request(_scope("/inflight/quick"), io.BytesIO())
        assert request is not None
        return asyncio.create_task(handler.run_get_response(request))

    async def run() -> None:
        # in_flight() peeks with the engine: its code is loaded before the pause.
        await _cancel_during_the_call(nodes, when, start, lambda: in_flight("cc") == 1)
        await _until(lambda: in_flight("cc") == 0, "given back")
        assert await _get(handler, "/inflight/quick") == 200

    asyncio.run(run())


@pytest.mark.parametrize("when", ["replied", "held"])
def test_an_async_decorated_view_cancelled_during_its_check_gives_its_slot_back(
    site: ASGIHandler, nodes: Nodes, when: str
) -> None:
    """``@ratelimit`` on an async view (a class-based one's ``dispatch``), without the
    middleware."""
    with override_settings(MIDDLEWARE=WITHOUT_MIDDLEWARE):
        handler = ASGIHandler()

    def start() -> asyncio.Task[Any]:
        request, _ = handler.create_request(_scope("/adecorated-cbv"), io.BytesIO())
        assert request is not None
        return asyncio.create_task(handler.run_get_response(request))

    async def run() -> None:
        taken = lambda: in_flight("t-cc-acbv") == 1  # noqa: E731
        await _cancel_during_the_call(nodes, when, start, taken)
        await _until(lambda: in_flight("t-cc-acbv") == 0, "given back")
        assert await _get(handler, "/adecorated-cbv") == 200

    asyncio.run(run())


@pytest.mark.parametrize("when", ["replied", "held"])
def test_a_login_cancelled_during_its_look_gives_its_place_back(
    nodes: Nodes, site_redis: Any, way: str, when: str
) -> None:
    """``aauthenticate``: the look before the password reserves the login's place among
    the logins in flight; cancelled, the login tests no password and must keep none."""
    policy(key="ip")  # 3/15m
    request = RequestFactory().post(LOGIN, REMOTE_ADDR="198.51.100.7")
    planned = _planned(current(), request, "alice")
    assert planned is not None
    engine = get_engine()
    places = [engine.keys.of(check.identity).attempts for check in planned.checks]
    engine.peek(planned.checks)  # the engine's code loaded (a plain peek takes no place)

    def in_flight_logins() -> int:
        return sum(site_redis.zcard(key) for key in places)

    def start() -> asyncio.Task[Any]:
        login = aauthenticate(request, username="alice", password="wrong")
        return asyncio.create_task(login)

    async def run() -> None:
        backends = [BACKEND, "django.contrib.auth.backends.ModelBackend"]
        with override_settings(AUTHENTICATION_BACKENDS=backends):
            await _cancel_during_the_call(nodes, when, start, lambda: in_flight_logins() == 1)
        await _until(lambda: in_flight_logins() == 0, "given back")

    asyncio.run(run())


def test_a_request_cancelled_while_a_receiver_awaits_gives_its_slot_back(
    site: ASGIHandler,
) -> None:
    """After the check's reply: the verdict, holding the slot, waits while an async
    ``rate_limited`` receiver runs (a shadow policy denied), and the request is
    cancelled there."""
    # GCRA: the second request is denied however slow the machine (a fixed window would
    # start again if the hour turned between the two).
    Policy.objects.create(
        name="watch", mode="shadow", algorithm="gcra", rates="1/h", path=r"^/inflight/"
    )
    get_registry().refresh()
    handler = site
    entered = asyncio.Event()

    async def receiver(**_: Any) -> None:
        entered.set()
        await asyncio.Event().wait()  # until the request is cancelled

    async def run() -> None:
        assert await _get(handler, "/inflight/quick") == 200  # spends "watch"
        signals.rate_limited.connect(receiver)
        try:
            request, _ = handler.create_request(_scope("/inflight/quick"), io.BytesIO())
            assert request is not None
            task = asyncio.create_task(handler.run_get_response(request))
            await asyncio.wait_for(entered.wait(), 10)
            assert await asyncio.to_thread(in_flight, "cc") == 1
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await asyncio.wait_for(task, 10)
        finally:
            signals.rate_limited.disconnect(receiver)
        await _until(lambda: in_flight("cc") == 0, "given back")
        assert await _get(handler, "/inflight/quick") == 200

    asyncio.run(run())
