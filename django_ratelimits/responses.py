"""What a limited request gets back, and the headers every checked response carries.

Header fields follow the IETF httpapi RateLimit draft (structured fields)::

    RateLimit-Policy: "api";q=120;w=60, "login";q=5;w=300
    RateLimit: "api";r=0;t=17

``RateLimit-Policy`` lists each enforced (policy, rate); ``RateLimit`` reports
the one closest to denying. A policy with several rates names each item
``<policy>-<period>s``. Shadow-mode policies never appear. The rates are the
ones the request was checked against: an identity override's or a tier's
when one applied (``docs/tiers.md``).

``RESPONSE_VIEW`` and ``BLOCKED_RESPONSE_VIEW`` are a project's views: one that
cannot be imported (system check E012 says so) or that raises is logged, and the
built-in answer is given instead. A refusal never becomes a 500.
"""

from __future__ import annotations

import functools
import logging
import math
import threading
from collections.abc import Callable
from typing import Any

from django.apps import apps
from django.contrib.sites.shortcuts import get_current_site  # imports the model only if installed
from django.core.exceptions import DisallowedHost, ObjectDoesNotExist
from django.db import DatabaseError
from django.http import HttpRequest, HttpResponse, HttpResponseBase, JsonResponse
from django.template.loader import render_to_string
from django.utils.http import url_has_allowed_host_and_scheme
from django.utils.module_loading import import_string
from django.utils.translation import gettext as _
from django.utils.translation import ngettext

from django_ratelimits.conf import get_settings
from django_ratelimits.decide import RateLimited, Verdict
from django_ratelimits.engine import Limit
from django_ratelimits.offenders.text import words

logger = logging.getLogger("django_ratelimits")

_JSON_TYPES = ("application/json", "application/problem+json")

# The dotted paths whose import failed and was logged, in this process: a flood of
# refusals logs each once (the view is still tried on each, so a fix of the module
# on disk is picked up once Django is reloaded).
_unimportable: set[str] = set()
_unimportable_lock = threading.Lock()


def custom_response(
    setting: str, path: str, request: HttpRequest, exception: Exception
) -> HttpResponseBase | None:
    """``path(request, exception)``: the response of the view a setting names, or None
    (logged) when it cannot be imported, raises or returns no response; the caller
    then gives the built-in one. ``setting`` is the key, for the log."""
    try:
        view: Callable[..., Any] = import_string(path)
    except Exception:  # ImportError, or whatever the module raised while imported
        with _unimportable_lock:
            first = path not in _unimportable
            _unimportable.add(path)
        if first:
            logger.exception(
                "DJANGO_RATELIMITS['%s'] = %r cannot be imported: refusals get the "
                "built-in response instead (system check django_ratelimits.E012)",
                setting,
                path,
            )
        return None
    try:
        response = view(request, exception)
    except Exception:
        logger.exception(
            "DJANGO_RATELIMITS['%s'] = %r raised: this refusal gets the built-in response",
            setting,
            path,
        )
        return None
    if not isinstance(response, HttpResponseBase):
        logger.error(
            "DJANGO_RATELIMITS['%s'] = %r returned %s, not a response: this refusal gets "
            "the built-in response",
            setting,
            path,
            type(response).__name__,
        )
        return None
    return response


@functools.lru_cache(maxsize=1024)
def _item(limit: Limit, multi: bool) -> str:
    """The name of ``limit``'s item in the fields (one of several rates of its policy,
    when ``multi``): the same on every request, so quoted once."""
    name = f"{limit.policy}-{limit.rate.period}s" if multi else limit.policy
    return '"' + name.replace("\\", "\\\\").replace('"', '\\"') + '"'


def rate_limit_headers(verdict: Verdict) -> dict[str, str]:
    """``RateLimit-Policy`` and ``RateLimit`` for the enforced policies of ``verdict``."""
    headline = verdict.headline()
    if headline is None:
        return {}
    policy = verdict.policy(headline.limit.policy)
    wait = headline.reset_after_us if headline.allowed else headline.retry_after_us
    current = (
        f"{_item(headline.limit, len(verdict.limits_of(policy)) > 1)};"
        f"r={max(0, headline.remaining)};t={math.ceil(wait / 1_000_000)}"
    )
    limits = tuple(verdict.limits_of(p) for p in verdict.policies if not p.shadow)
    return {"RateLimit-Policy": _policy_field(limits), "RateLimit": current}


@functools.lru_cache(maxsize=1024)
def _policy_field(limits: tuple[tuple[Limit, ...], ...]) -> str:
    """``RateLimit-Policy`` of the enforced policies' ``limits``: the same on every
    request of those policies, so formatted once."""
    items = [
        f"{_item(lim, len(group) > 1)};q={lim.rate.limit};w={lim.rate.period}"
        for group in limits
        for lim in group
    ]
    return ", ".join(dict.fromkeys(items))


def add_headers(response: HttpResponseBase, verdict: Verdict | None) -> HttpResponseBase:
    """Put the RateLimit fields on an allowed response, if the settings ask for it."""
    if verdict is not None and get_settings().headers_on_allowed:
        _set_headers(response, verdict)
    return response


def _set_headers(response: HttpResponseBase, verdict: Verdict) -> None:
    """The RateLimit fields of ``verdict``, where the response has none of its own."""
    for name, value in rate_limit_headers(verdict).items():
        response.headers.setdefault(name, value)


def _wants_json(request: HttpRequest) -> bool:
    preferred = request.get_preferred_type(["text/html", *_JSON_TYPES])
    return preferred in _JSON_TYPES


#: The HTML body of a 429 (and of the fail-closed 503): projects override it by a
#: template of the same name that comes first (their ``DIRS``, or an app listed before).
TEMPLATE = "django_ratelimits/429.html"


def _host(request: HttpRequest) -> str:
    try:
        return request.get_host()
    except DisallowedHost:  # ALLOWED_HOSTS refused it: name no host at all
        return ""


def site_name(request: HttpRequest) -> str:
    """The site's name: ``django.contrib.sites``' current site if installed, else the host."""
    if apps.is_installed("django.contrib.sites"):
        try:
            return str(get_current_site(request).name) or _host(request)
        except (DatabaseError, ObjectDoesNotExist, DisallowedHost):  # no table, no row, bad host
            pass
    return _host(request)


def _back_url(request: HttpRequest) -> str | None:
    """The referring page if it is on this site (same host, and https if this is), else None."""
    referer = request.headers.get("Referer", "")
    host = _host(request)
    if (
        not referer
        or not host
        or len(referer) > 2000
        or not referer.startswith(("http:", "https:"))
    ):
        return None
    if url_has_allowed_host_and_scheme(
        referer, allowed_hosts={host}, require_https=request.is_secure()
    ):
        return referer
    return None


def _home(request: HttpRequest) -> str:
    """The site's home page: ``/`` below the prefix the site is mounted under
    (``FORCE_SCRIPT_NAME``, or the server's ``SCRIPT_NAME``). Read off the request, which
    has it whatever the server: ``path`` is the prefix and then ``path_info``."""
    path, below = request.path, request.path_info
    prefix = path[: len(path) - len(below)] if below and path.endswith(below) else ""
    return prefix.rstrip("/") + "/"


def problem(
    request: HttpRequest, status: int, title: str, detail: str, retry: int | None = None
) -> HttpResponse:
    """A refusal's body: RFC 9457 problem details for API clients, else the HTML page
    (:data:`TEMPLATE`) with the wait in words and a link back: to the referring page,
    else to the site's home, which is the script prefix of a site mounted under one
    (``FORCE_SCRIPT_NAME``, or the server's ``SCRIPT_NAME``), not the host's ``/``."""
    if _wants_json(request):
        body = {"type": "about:blank", "title": title, "status": status, "detail": detail}
        return JsonResponse(body, status=status, content_type="application/problem+json")
    back = _back_url(request)
    html = render_to_string(
        TEMPLATE,
        {
            "status": status,
            "title": title,
            "detail": detail,
            "site_name": site_name(request),
            "retry_after": retry,
            "retry_after_words": words(retry) if retry is not None else "",
            "back_url": back or _home(request),
            "back_is_referer": back is not None,
            # Also without the request context processor: the template reads django-csp's
            # nonce from it (docs/deployment.md, "Content-Security-Policy").
            "request": request,
        },
        request=request,
    )
    return HttpResponse(html, status=status)


def too_many_requests(request: HttpRequest, exception: RateLimited) -> HttpResponseBase:
    """The response to a limited request: 429 with ``Retry-After`` and the RateLimit fields.

    ``RESPONSE_VIEW`` replaces the body; the status and headers are set here
    unless that view set them.
    """
    verdict = exception.verdict
    retry = exception.retry_after or (verdict.retry_after() if verdict else 1)
    view = get_settings().response_view
    custom = custom_response("RESPONSE_VIEW", view, request, exception) if view else None
    if custom is not None:
        response: HttpResponseBase = custom
        if "status_code" not in vars(response) and response.status_code == 200:
            # The view left the status out (HttpResponse's default, as render() gives):
            # a refusal is a 429, never a 200. A status it chose is kept.
            response.status_code = 429
    else:
        detail = ngettext(
            "Too many requests. Try again in %(seconds)d second.",
            "Too many requests. Try again in %(seconds)d seconds.",
            retry,
        ) % {"seconds": retry}
        response = problem(request, 429, _("Too Many Requests"), detail, retry)
    response.headers.setdefault("Retry-After", str(retry))
    if verdict is not None:
        _set_headers(response, verdict)
    return response


def unavailable(request: HttpRequest, verdict: Verdict) -> HttpResponseBase:
    """The answer of a fail-closed policy while Redis is unreachable."""
    status = get_settings().fail_closed_status
    retry = verdict.retry_after()
    if status == 429:
        return too_many_requests(request, RateLimited(verdict, retry_after=retry))
    detail = _("The service cannot check its rate limits right now. Try again later.")
    response = problem(request, 503, _("Service Unavailable"), detail, retry)
    response.headers["Retry-After"] = str(retry)
    return response


def refusal(
    request: HttpRequest, verdict: Verdict, names: set[str] | None = None
) -> HttpResponseBase:
    """The response for a blocked verdict: 429 for a denial, else the fail-closed answer."""
    if verdict.blocking(names):
        return too_many_requests(
            request, RateLimited(verdict, retry_after=verdict.retry_after(names))
        )
    return unavailable(request, verdict)
