"""A drop-in for django-ratelimit 4.x, backed by this package's engine.

Switch a project by changing its imports::

    from django_ratelimit.decorators import ratelimit          # before
    from django_ratelimits.compat import ratelimit             # after

``is_ratelimited``, ``get_usage``, ``Ratelimited``, ``ALL`` and ``UNSAFE`` come
from here too. Each decision is one engine call (one round trip) on a fixed
window aligned to the epoch; the counter of a decision is named by the group,
the rate, the counted methods and the key's value, as in django-ratelimit.
``docs/migrating-from-django-ratelimit.md`` lists what differs.
"""

from __future__ import annotations

import functools
import hashlib
import math
import re
import time
from collections.abc import Callable, Sequence
from typing import Any, Final, TypeAlias, TypedDict, TypeVar

from asgiref.sync import iscoroutinefunction, sync_to_async
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured, PermissionDenied
from django.http import HttpRequest
from django.utils.module_loading import import_string

from django_ratelimits.conf import get_settings
from django_ratelimits.decide import Planned, RateLimited, Verdict, gate_of
from django_ratelimits.engine import Algorithm, Check, Identity, active_test_clock, get_engine
from django_ratelimits.identity import ip_identity, meta_key
from django_ratelimits.policies.spec import PolicySpec, covers_method
from django_ratelimits.rates import Rate

__all__ = ["ALL", "UNSAFE", "Ratelimited", "Usage", "get_usage", "is_ratelimited", "ratelimit"]

ALL: Final = (None,)
"""Count every HTTP method (django-ratelimit's sentinel)."""
UNSAFE: Final = ["DELETE", "PATCH", "POST", "PUT"]
"""Count only the methods that change state."""

Methods: TypeAlias = str | Sequence[str | None]
RateArg: TypeAlias = str | tuple[int, int] | Callable[[str, HttpRequest], Any] | None
KeyArg: TypeAlias = str | Callable[[str, HttpRequest], str] | None
View = TypeVar("View", bound=Callable[..., Any])

_PERIODS: Final = {"s": 1, "m": 60, "h": 3600, "d": 86_400}
_RATE_RE: Final = re.compile(r"\s*(\d+)\s*/\s*(\d*)\s*(?:([smhd])[a-z]*)?\s*", re.IGNORECASE)
_SAFE_NAME: Final = re.compile(r"[A-Za-z0-9._:@/+=-]{1,64}")


class Ratelimited(PermissionDenied, RateLimited):
    """Raised by :func:`ratelimit` with ``block=True`` when the request is limited.

    A ``PermissionDenied``, as in django-ratelimit, so existing handlers keep
    working (without one, Django answers 403). ``RateLimitMiddleware`` answers
    it like any denial: 429 with ``Retry-After`` and the RateLimit fields.
    """

    def __init__(
        self, *args: object, verdict: Verdict | None = None, retry_after: int | None = None
    ) -> None:
        Exception.__init__(self, *args)
        self.verdict = verdict
        self.retry_after = retry_after


class Usage(TypedDict):
    """What :func:`get_usage` returns (a plain dict at run time)."""

    count: int
    limit: int
    should_limit: bool
    time_left: int


def ratelimit(
    group: str | None = None,
    key: KeyArg = None,
    rate: RateArg = None,
    method: Methods = ALL,
    block: bool = True,
) -> Callable[[View], View]:
    """Count every request to the view; with ``block``, raise :class:`Ratelimited` over the limit.

    Sets ``request.limited`` (True once any decorator on the request limited it).
    Works on function views, async views and, with ``method_decorator``,
    class-based views.
    """

    def decorator(fn: View) -> View:
        if iscoroutinefunction(fn):

            @functools.wraps(fn)
            async def async_wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> Any:
                decide = sync_to_async(_usage)
                usage, verdict = await decide(request, group, fn, key, rate, method, True, block)
                _enforce(request, usage, verdict, block)
                return await fn(request, *args, **kwargs)

            return async_wrapper  # type: ignore[return-value]

        @functools.wraps(fn)
        def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> Any:
            usage, verdict = _usage(request, group, fn, key, rate, method, True, block)
            _enforce(request, usage, verdict, block)
            return fn(request, *args, **kwargs)

        return wrapper  # type: ignore[return-value]

    return decorator


ratelimit.ALL = ALL  # type: ignore[attr-defined]  # django-ratelimit's ratelimit.ALL
ratelimit.UNSAFE = UNSAFE  # type: ignore[attr-defined]


def is_ratelimited(
    request: HttpRequest,
    group: str | None = None,
    fn: Callable[..., Any] | None = None,
    key: KeyArg = None,
    rate: RateArg = None,
    method: Methods = ALL,
    increment: bool = False,
) -> bool:
    """Whether ``request`` is over the limit; counts it only with ``increment``."""
    usage = get_usage(request, group, fn, key, rate, method, increment)
    return usage is not None and usage["should_limit"]


def get_usage(
    request: HttpRequest,
    group: str | None = None,
    fn: Callable[..., Any] | None = None,
    key: KeyArg = None,
    rate: RateArg = None,
    method: Methods = ALL,
    increment: bool = False,
) -> Usage | None:
    """``count``, ``limit``, ``should_limit`` and ``time_left`` for ``request``.

    ``None`` when nothing limits it: limiting disabled, a method that is not
    counted, no rate, or Redis unreachable while failing open.
    """
    return _usage(request, group, fn, key, rate, method, increment)[0]


is_ratelimited.ALL = get_usage.ALL = ALL  # type: ignore[attr-defined]  # as in django-ratelimit
is_ratelimited.UNSAFE = get_usage.UNSAFE = UNSAFE  # type: ignore[attr-defined]


def _enforce(
    request: HttpRequest, usage: Usage | None, verdict: Verdict | None, block: bool
) -> None:
    limited = usage is not None and usage["should_limit"]
    request.limited = limited or getattr(request, "limited", False)  # type: ignore[attr-defined]
    if usage is not None and limited and block:
        error = _exception_class()()
        if isinstance(error, RateLimited):  # the middleware answers it with 429
            error.verdict = verdict
            error.retry_after = None if verdict is not None else max(1, usage["time_left"])
        raise error


def _exception_class() -> type[Exception]:
    """``RATELIMIT_EXCEPTION_CLASS`` (a class or its dotted path), else :class:`Ratelimited`."""
    chosen = getattr(settings, "RATELIMIT_EXCEPTION_CLASS", Ratelimited)
    return import_string(chosen) if isinstance(chosen, str) else chosen


def _usage(
    request: HttpRequest,
    group: str | None,
    fn: Callable[..., Any] | None,
    key: KeyArg,
    rate: RateArg,
    method: Methods,
    increment: bool,
    refuses: bool = False,
) -> tuple[Usage | None, Verdict | None]:
    """The usage, and the verdict behind it (None when Redis was not asked). ``refuses``:
    the caller raises when limited (``@ratelimit(block=True)``); else it decides itself."""
    if group is None:
        if fn is None:
            raise ImproperlyConfigured(
                "get_usage must be called with either `group` or `fn` arguments"
            )
        group = f"{fn.__module__}.{fn.__qualname__}"
    if not (get_settings().enabled and getattr(settings, "RATELIMIT_ENABLE", True)):
        return None, None
    if not _counts(request, method):
        return None, None
    resolved = _rate(group, request, rate)
    if resolved is None:
        return None, None
    limit, period = resolved
    identity = _identity(group, request, key)
    if limit == 0:  # django-ratelimit's "0/s": always limited, nothing to count
        left = period - _now_s() % period
        return Usage(count=0, limit=0, should_limit=True, time_left=left), None
    fail_closed = not getattr(settings, "RATELIMIT_FAIL_OPEN", True)
    spec = _spec(_policy_name(group, method), limit, period, fail_closed)
    verdict = _decide(request, spec, identity, increment, refuses)
    if verdict.decision is None:
        if not spec.fail_closed:
            return None, verdict
        return Usage(count=0, limit=0, should_limit=True, time_left=-1), verdict
    result = verdict.decision.results[0]
    count = limit - result.remaining
    window_us = result.limit.rate.window_us
    now_us = verdict.decision.now_us
    left = math.ceil(((now_us // window_us + 1) * window_us - now_us) / 1_000_000)
    should_limit = not result.allowed if increment else count >= limit
    return Usage(count=count, limit=limit, should_limit=should_limit, time_left=left), verdict


def _now_s() -> int:
    """The time a 0 limit's window is read on, in whole seconds, without asking Redis:
    the test kit's clock while one is on (``docs/testing.md``), as for every other
    limit, else the web server's."""
    clock = active_test_clock()
    return clock.now_us() // 1_000_000 if clock is not None else int(time.time())


def _methods(method: Methods) -> frozenset[str]:
    """The counted methods, upper-case (``method`` is not ``ALL``)."""
    methods = [method] if isinstance(method, str) else method
    return frozenset(m.upper() for m in methods if m is not None)


def _every(method: Methods) -> bool:
    """Whether ``method`` counts every method: ``ALL``, or any list holding ``None``
    (``[None]`` would otherwise count nothing, silently)."""
    return method == ALL or (not isinstance(method, str) and None in method)


def _counts(request: HttpRequest, method: Methods) -> bool:
    """Whether ``method`` counts the request: HEAD counts where GET does, unlike
    django-ratelimit (Django answers HEAD with the view's GET code)."""
    return _every(method) or covers_method(_methods(method), request.method or "GET")


def _rate(group: str, request: HttpRequest, rate: RateArg) -> tuple[int, int] | None:
    """``(limit, period in seconds)``, or None for no limit."""
    value: Any = rate
    if callable(rate):
        value = rate(group, request)
    elif isinstance(rate, str) and "." in rate:
        value = import_string(rate)(group, request)
    if value is None:
        return None
    if isinstance(value, tuple):
        limit, period = value
    else:
        match = _RATE_RE.fullmatch(value) if isinstance(value, str) else None
        if match is None:
            raise ImproperlyConfigured(f"Could not understand ratelimit rate: {value!r}")
        count, multiplier, unit = match.groups()
        limit, period = int(count), int(multiplier or 1) * _PERIODS[(unit or "s").lower()]
    if period <= 0:
        raise ImproperlyConfigured("Ratelimit period must be greater than 0")
    return limit, period


def _identity(group: str, request: HttpRequest, key: KeyArg) -> Identity:
    if not key:
        raise ImproperlyConfigured("Ratelimit key must be specified")
    if callable(key):
        return Identity("key", key(group, request))
    if key == "ip":
        return ip_identity(request)
    if key == "user":
        return Identity("user", str(request.user.pk))  # anonymous users share "None"
    if key == "user_or_ip":
        if request.user.is_authenticated:
            return Identity("user", str(request.user.pk))
        return ip_identity(request)
    accessor, colon, name = key.partition(":")
    if colon:
        if accessor == "header":
            value = request.META.get(meta_key(name), "")
        elif accessor == "get":
            value = request.GET.get(name, "")
        elif accessor == "post":
            value = request.POST.get(name, "")
        else:
            raise ImproperlyConfigured(f"Unknown ratelimit key: {key}")
        return Identity(accessor, value)
    if "." in key:
        return Identity("key", import_string(key)(group, request))
    raise ImproperlyConfigured(f"Could not understand ratelimit key: {key}")


def _policy_name(group: str, method: Methods) -> str:
    """The group, with the counted methods when not all: ``views.login@POST``.

    A name that is long or holds other characters than ``A-Za-z0-9._:@/+=-``
    becomes a readable start and a digest of the whole, so different groups
    never share a name.
    """
    if not _every(method):
        group += "@" + "+".join(sorted(_methods(method)))
    if _SAFE_NAME.fullmatch(group):
        return group
    readable = re.sub(r"[^A-Za-z0-9._-]+", "-", group)[:48]
    return f"{readable}~{hashlib.blake2b(group.encode(), digest_size=6).hexdigest()}"


@functools.lru_cache(maxsize=512)
def _spec(name: str, limit: int, period: int, fail_closed: bool) -> PolicySpec:
    try:
        rate = Rate(limit, period)
    except (TypeError, ValueError) as exc:
        raise ImproperlyConfigured(f"ratelimit rate {limit}/{period}s: {exc}") from exc
    return PolicySpec(name, (rate,), Algorithm.FIXED_WINDOW, fail_closed=fail_closed)


def _decide(
    request: HttpRequest, spec: PolicySpec, identity: Identity, increment: bool, refuses: bool
) -> Verdict:
    """One engine call: charge (``increment``) or look; a Redis failure becomes a verdict.
    A block a charge finds is logged as a refusal only if the caller ``refuses`` on it.

    A value the client chooses (a header, a query or form field, a callable's answer, a
    user) passes the client address's identity budget (``IDENTITY_BUDGET``) first, as
    everywhere in the package: past it, it counts against the address, so that rotating
    it escapes nothing (``docs/client-ip.md``)."""
    gate = gate_of(request, identity, get_settings().identity_budget_rate)
    check = Check(identity, spec.limits, gate=gate)
    planned = Planned(
        request, (spec,), [check], observed=increment, looks=not increment, refuses=refuses
    )
    return planned.run(
        lambda checks: (get_engine().check if increment else get_engine().peek)(checks),
        charge=increment,
    )
