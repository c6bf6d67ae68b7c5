"""Giving back the concurrency slots a request holds, when its response ends.

A request a concurrency policy admitted holds a slot (``Decision.held``) from
its decision until its response is over: a response's ``close()``, which
Django's WSGI and ASGI handlers call once the last byte is sent (a streaming
response: once its iterator is exhausted or the client went away), and which
runs the closers :func:`release_when_done` adds; or, for a response dropped
without being closed, once it is gone (garbage). Django turns a view's
exception into a 500 response, closed like any other; a view that raises past
the decorator (no response to close) is given :func:`release` at once.

One rule: a slot is given back once the view's work has ended, never before,
and not a lease later. On ASGI a client that goes away makes Django cancel the
request's task: an async view stops there, but a sync view goes on in its
thread (nothing can stop a thread), so :func:`arelease_after` queues the
release behind it; and the response the sync view returns then reaches nobody
and is never closed, so it gives its slots back when it is dropped.

Releasing is one small script call (:meth:`Engine.release
<django_ratelimits.engine.core.Engine.release>`); a Redis failure is logged
and never raised: the slot's lease frees it. Requests that hold no slot cost
nothing here.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import queue
import threading
import weakref

from asgiref.sync import sync_to_async
from django.http import HttpResponseBase

from django_ratelimits.decide import Verdict
from django_ratelimits.engine import get_engine
from django_ratelimits.engine.concurrency import Held
from django_ratelimits.engine.errors import BackendError

__all__ = ["arelease_after", "release", "release_when_done"]

logger = logging.getLogger("django_ratelimits")


def _held(verdict: Verdict | None) -> tuple[Held, ...]:
    decision = verdict.decision if verdict is not None else None
    return decision.held if decision is not None else ()


def release_when_done(response: HttpResponseBase, verdict: Verdict | None) -> HttpResponseBase:
    """``response``, made to give back ``verdict``'s slots when it is closed, or
    when it is dropped unclosed (a response exists once its view has returned)."""
    held = _held(verdict)
    if held:
        # Dropped unclosed: on ASGI, a sync view's response when the client went
        # away while it ran; or a response a middleware above replaced.
        dropped = weakref.finalize(response, _releaser.hand_over, held)
        dropped.atexit = False
        _releaser.start()
        # Django's own hook for what a response must free when it is closed
        # (FileResponse closes its file there): close() runs each closer once.
        closers = response._resource_closers  # type: ignore[attr-defined]
        closers.append(functools.partial(_closed, dropped, held))
    return response


def _closed(dropped: weakref.finalize, held: tuple[Held, ...]) -> None:
    if dropped.detach() is not None:  # else already handed over as dropped
        _give_back(held)


class _Releaser:
    """The thread that gives back the slots of responses dropped unclosed.

    A finalizer runs in whatever thread lets go of the response, wherever it
    stands (within the Redis client holding its pool's lock, say), so it makes
    no call: it puts the slots on a ``SimpleQueue`` (whose ``put`` is safe there)
    and this thread releases them. Started with the first response that holds a
    slot, again in a forked child (the parent's thread is not there)."""

    def __init__(self) -> None:
        self.queue: queue.SimpleQueue[tuple[Held, ...]] = queue.SimpleQueue()
        self.thread: threading.Thread | None = None
        self.lock = threading.Lock()

    def hand_over(self, held: tuple[Held, ...]) -> None:
        self.queue.put(held)

    def start(self) -> None:
        if self.thread is not None and self.thread.is_alive():
            return
        with self.lock:
            if self.thread is None or not self.thread.is_alive():
                self.thread = threading.Thread(
                    target=self._run, name="django-ratelimits-release", daemon=True
                )
                self.thread.start()

    def after_fork(self) -> None:
        self.lock = threading.Lock()

    def _run(self) -> None:
        while True:
            held = self.queue.get()
            try:
                _give_back(held)
            except Exception:  # the thread must live on; the lease frees these slots
                logger.exception("could not release the slots of a dropped response")


_releaser = _Releaser()
os.register_at_fork(after_in_child=_releaser.after_fork)


def release(verdict: Verdict | None) -> None:
    """Give back ``verdict``'s slots now (the view raised: there is no response)."""
    held = _held(verdict)
    if held:
        _give_back(held)


async def _agive_back(held: tuple[Held, ...]) -> None:
    for slots in held:
        try:
            await get_engine().arelease(slots)
        except BackendError as error:
            _failed(slots, error)


async def arelease_after(verdict: Verdict | None, error: BaseException) -> None:
    """Give back ``verdict``'s slots once the view that raised ``error`` past the
    caller has stopped: at once, unless ``error`` is the request's cancellation.

    A cancelled request (on ASGI, the client went away) may still run sync code: a
    sync view, or sync code an async view awaited, goes on in the request's
    thread. Django runs that code with ``sync_to_async(thread_sensitive=True)``,
    whose calls in one request run one at a time, in order, on one thread; the
    release is queued behind them there, so it runs once they have returned (at
    once when none runs: an async view's cancellation ends its work). The
    cancelled caller waits for it, as Django's handler waits for that thread
    anyway; should the wait itself be cancelled, the release still runs (else
    the lease frees the slots).
    """
    held = _held(verdict)
    if not held:
        return
    if not isinstance(error, asyncio.CancelledError):
        await _agive_back(held)
        return
    logger.debug(
        "request cancelled (the client went away?): its %d concurrency slot group(s) "
        "are given back when its sync work, if any, returns",
        len(held),
    )
    await asyncio.shield(sync_to_async(_give_back, thread_sensitive=True)(held))


def _give_back(held: tuple[Held, ...]) -> None:
    for slots in held:
        try:
            get_engine().release(slots)
        except BackendError as error:
            _failed(slots, error)


def _failed(slots: Held, error: BackendError) -> None:
    logger.warning(
        "could not release %d concurrency slot(s), their lease will: %s", len(slots.keys), error
    )
