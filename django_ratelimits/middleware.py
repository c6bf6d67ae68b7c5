"""``RateLimitMiddleware``: every policy of a request, decided in one round trip.

It serves sync and async stacks alike (Django picks the mode from the
middleware below it). Before the view runs it gathers the policies whose path
and method match the request and the policies the resolved view names with
``@ratelimit``, decides them all in one engine call, stores the verdict on
``request.ratelimit``, and refuses the request if a path policy denies it, or
a policy the view applies with ``block=True`` (its decorator would refuse it
too, when reached: an outer decorator, as ``@login_required``'s redirect, may
answer first, and the request must not then go uncounted). A policy the view
applies with ``block=False`` refuses nothing: it is decided apart, so that its
denial never stops the other policies from counting the request (the view
decides from ``request.ratelimit``). Allowed responses get the RateLimit header
fields. A
``RateLimited`` exception raised by a view becomes the same 429 response.

Place it after ``AuthenticationMiddleware``, so per-user policies see the user.

A request from a blocked network is refused first, with no Redis call
(:mod:`django_ratelimits.blocklist`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from asgiref.sync import iscoroutinefunction, markcoroutinefunction
from django.http import HttpRequest, HttpResponseBase

from django_ratelimits import blocklist
from django_ratelimits.decide import RateLimited, Verdict, adecide, decide
from django_ratelimits.inflight import arelease_after, release, release_when_done
from django_ratelimits.policies.registry import PolicyRegistry, acurrent, current
from django_ratelimits.policies.spec import PolicySpec
from django_ratelimits.resolved import resolved, unprefixed
from django_ratelimits.responses import add_headers, refusal, too_many_requests

GetResponse = Callable[[HttpRequest], HttpResponseBase | Awaitable[HttpResponseBase]]


class RateLimitMiddleware:
    sync_capable = True
    async_capable = True

    def __init__(self, get_response: GetResponse) -> None:
        self.get_response = get_response
        self.async_mode = iscoroutinefunction(get_response)
        if self.async_mode:
            markcoroutinefunction(self)

    def __call__(self, request: HttpRequest) -> HttpResponseBase | Awaitable[HttpResponseBase]:
        if self.async_mode:
            return self.__acall__(request)
        registry = current()
        if (blocked := blocklist.refusal(request, registry)) is not None:
            return blocked
        refusing, soft, policies = _policies(registry, request)
        verdict = request.ratelimit = decide(request, policies, soft)  # type: ignore[attr-defined]
        if verdict.blocked(refusing):
            return release_when_done(refusal(request, verdict, refusing), verdict)
        try:
            response = self.get_response(request)
        except BaseException:
            release(request.ratelimit)  # type: ignore[attr-defined]
            raise
        assert isinstance(response, HttpResponseBase)
        return _finish(response, request.ratelimit)  # type: ignore[attr-defined]

    async def __acall__(self, request: HttpRequest) -> HttpResponseBase:
        registry = await acurrent()
        if (blocked := await blocklist.arefusal(request, registry)) is not None:
            return blocked
        refusing, soft, policies = _policies(registry, request)
        verdict = request.ratelimit = await adecide(request, policies, soft)  # type: ignore[attr-defined]
        if verdict.blocked(refusing):
            return release_when_done(refusal(request, verdict, refusing), verdict)
        try:
            response = await self.get_response(request)  # type: ignore[misc]
        except BaseException as error:
            await arelease_after(request.ratelimit, error)  # type: ignore[attr-defined]
            raise
        return _finish(response, request.ratelimit)  # type: ignore[attr-defined]

    def process_exception(
        self, request: HttpRequest, exception: Exception
    ) -> HttpResponseBase | None:
        if isinstance(exception, RateLimited):
            return too_many_requests(request, exception)
        return None


def _finish(response: HttpResponseBase, verdict: Verdict) -> HttpResponseBase:
    """The view's response with the RateLimit fields, giving back the request's
    concurrency slots (the middleware's, and any a decorator took) when it ends."""
    return release_when_done(add_headers(response, verdict), verdict)


def _policies(
    registry: PolicyRegistry, request: HttpRequest
) -> tuple[set[str], frozenset[str], list[PolicySpec]]:
    """The names of the policies whose denial refuses the request (the path's, and the
    view's with ``block=True``), of those whose denial does not (the view's with
    ``block=False``, unless the path applies them too), and every policy to decide:
    path ones, then the view's."""
    method = request.method or "GET"
    policies = list(registry.match(request.path_info, method, unprefixed(request)))
    refusing = {p.name for p in policies}
    view = resolved(request)
    soft: set[str] = set()
    for name in view.policies:
        spec = registry.get(name)
        if (
            spec is not None
            and spec.name not in refusing
            and spec.name not in soft
            and spec.counts_request(method)
        ):
            policies.append(spec)
            (soft if name in view.soft else refusing).add(name)
    return refusing, frozenset(soft), policies
