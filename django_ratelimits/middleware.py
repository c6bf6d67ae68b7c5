"""``RateLimitMiddleware``: every policy of a request, decided in one round trip.

It serves sync and async stacks alike (Django picks the mode from the
middleware below it). Before the view runs it gathers the policies whose path
and method match the request and the policies the resolved view names with
``@ratelimit``, decides them all in one engine call, stores the verdict on
``request.ratelimit``, and refuses the request if a path policy denies it
(a decorated view's own policies are refused by its decorator, which may say
``block=False``). Allowed responses get the RateLimit header fields. A
``RateLimited`` exception raised by a view becomes the same 429 response.

Place it after ``AuthenticationMiddleware``, so per-user policies see the user.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable

from asgiref.sync import iscoroutinefunction, markcoroutinefunction
from django.conf import settings
from django.core.signals import setting_changed
from django.dispatch import receiver
from django.http import Http404, HttpRequest, HttpResponseBase
from django.urls import resolve

from django_ratelimits.decide import VIEW_POLICIES, RateLimited, Verdict, adecide, decide
from django_ratelimits.inflight import arelease, release, release_when_done
from django_ratelimits.policies.registry import CACHE_PATH_MAX, PolicyRegistry, acurrent, current
from django_ratelimits.policies.spec import PolicySpec
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
        path_names, policies = _policies(current(), request)
        verdict = request.ratelimit = decide(request, policies)  # type: ignore[attr-defined]
        if verdict.blocked(path_names):
            return release_when_done(refusal(request, verdict, path_names), verdict)
        try:
            response = self.get_response(request)
        except BaseException:
            release(request.ratelimit)  # type: ignore[attr-defined]
            raise
        assert isinstance(response, HttpResponseBase)
        return _finish(response, request.ratelimit)  # type: ignore[attr-defined]

    async def __acall__(self, request: HttpRequest) -> HttpResponseBase:
        path_names, policies = _policies(await acurrent(), request)
        verdict = request.ratelimit = await adecide(request, policies)  # type: ignore[attr-defined]
        if verdict.blocked(path_names):
            return release_when_done(refusal(request, verdict, path_names), verdict)
        try:
            response = await self.get_response(request)  # type: ignore[misc]
        except BaseException:
            await arelease(request.ratelimit)  # type: ignore[attr-defined]
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


def _policies(registry: PolicyRegistry, request: HttpRequest) -> tuple[set[str], list[PolicySpec]]:
    """The path policies' names, and every policy to decide: path ones, then the view's."""
    method = request.method or "GET"
    policies = list(registry.match(request.path_info, method))
    path_names = {p.name for p in policies}
    for name in _view_policies(request):
        spec = registry.get(name)
        if spec is not None and spec.name not in path_names and spec.applies_to_method(method):
            policies.append(spec)
    return path_names, policies


def _view_policies(request: HttpRequest) -> tuple[str, ...]:
    """The policies the view of this path names with ``@ratelimit``.

    Resolving costs about as much as a tenth of a Redis round trip and Django
    resolves again for the view, so answers are cached per (URLconf, path).
    """
    urlconf = getattr(request, "urlconf", None) or settings.ROOT_URLCONF
    path = request.path_info
    if len(path) > CACHE_PATH_MAX:  # rare, often hostile: resolved without being cached
        return _resolve_policies.__wrapped__(urlconf, path)
    return _resolve_policies(urlconf, path)


@functools.lru_cache(maxsize=4096)
def _resolve_policies(urlconf: str, path: str) -> tuple[str, ...]:
    try:
        match = resolve(path, urlconf)
    except Http404:
        return ()
    return getattr(match.func, VIEW_POLICIES, ())


@receiver(setting_changed)
def _forget_views(*, setting: str, **kwargs: object) -> None:
    if setting == "ROOT_URLCONF":
        _resolve_policies.cache_clear()
