"""Giving back the concurrency slots a request holds, when its response ends.

A request a concurrency policy admitted holds a slot (``Decision.held``) from
its decision until its response is over: a response's ``close()``, which
Django's WSGI and ASGI handlers call once the last byte is sent (a streaming
response: once its iterator is exhausted or the client went away), and which
runs the closers :func:`release_when_done` adds. Django turns a view's
exception into a 500 response, closed like any other; a view that raises past
the decorator (no response to close) is given :func:`release` at once.

One rule: a slot is given back once the view's work has ended, never before.
On ASGI a client that goes away makes Django cancel the request's task: an
async view stops there, but a sync view goes on in its thread (nothing can stop
a thread), so :func:`arelease_after` queues the release behind it.

Releasing is one small script call (:meth:`Engine.release
<django_ratelimits.engine.core.Engine.release>`); a Redis failure is logged
and never raised: the slot's lease frees it. Requests that hold no slot cost
nothing here.
"""

from __future__ import annotations

import asyncio
import functools
import logging

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
    """``response``, made to give back ``verdict``'s slots when it is closed."""
    held = _held(verdict)
    if held:
        # Django's own hook for what a response must free when it is closed
        # (FileResponse closes its file there): close() runs each closer once.
        closers = response._resource_closers  # type: ignore[attr-defined]
        closers.append(functools.partial(_give_back, held))
    return response


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
