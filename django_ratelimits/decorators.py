"""``@ratelimit``: apply a named policy to a view.

::

    @ratelimit("login", rate="5/m", key="ip", methods=["POST"])
    def login(request): ...

The policy lives in the database (admin); the arguments after the name are
code defaults that create the row if it is missing, and the row wins when it
exists. Without defaults the policy must exist in admin (else nothing is
limited). Works on function views, async views and, with ``method_decorator``,
class-based views. With ``block=False`` the view always runs and decides
itself from ``request.ratelimit`` (a :class:`~django_ratelimits.limiter.Verdict`).

When ``RateLimitMiddleware`` is installed it decides the view's policies
together with its own in one round trip; the decorator then only enforces
the verdict.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from asgiref.sync import iscoroutinefunction, sync_to_async
from django.http import HttpRequest

from django_ratelimits.engine import Algorithm
from django_ratelimits.limiter import Verdict, aevaluate, evaluate
from django_ratelimits.middleware import VIEW_POLICIES
from django_ratelimits.policies import PolicyRegistry, current, get_registry
from django_ratelimits.rates import parse_rates
from django_ratelimits.responses import refusal
from django_ratelimits.spec import KeyKind, Mode, PolicySpec

View = TypeVar("View", bound=Callable[..., Any])


def ratelimit(
    name: str,
    *,
    rate: str | None = None,
    key: str = "ip",
    methods: Iterable[str] = (),
    algorithm: Algorithm | str = Algorithm.SLIDING_WINDOW,
    burst: int | None = None,
    mode: Mode | str = Mode.ENFORCE,
    block: bool = True,
) -> Callable[[View], View]:
    """Apply policy ``name`` to the decorated view.

    ``key`` is ``"ip"``, ``"user"``, ``"user_or_ip"``, ``"ip_and_user"``,
    ``"header:<name>"`` or ``"callable:<dotted.path>"``. ``rate`` and the rest
    are only defaults for a policy missing from the database.
    """
    if rate is not None:
        kind, _, arg = key.partition(":")
        get_registry().declare(
            PolicySpec(
                name,
                parse_rates(rate),
                Algorithm(algorithm),
                burst,
                Mode(mode),
                KeyKind(kind),
                arg,
                methods=frozenset(m.upper() for m in methods),
            )
        )

    def decorator(view: View) -> View:
        if iscoroutinefunction(view):

            @functools.wraps(view)
            async def async_wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> Any:
                registry = get_registry()
                if registry.is_stale():
                    await sync_to_async(registry.refresh)()
                verdict, spec = _pending(registry, request, name)
                if spec is not None:
                    verdict = _store(request, verdict, await aevaluate(request, [spec]))
                if block and verdict.blocked({name}):
                    return refusal(request, verdict, {name})
                return await view(request, *args, **kwargs)

            wrapper: Any = async_wrapper
        else:

            @functools.wraps(view)
            def sync_wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> Any:
                verdict, spec = _pending(current(), request, name)
                if spec is not None:
                    verdict = _store(request, verdict, evaluate(request, [spec]))
                if block and verdict.blocked({name}):
                    return refusal(request, verdict, {name})
                return view(request, *args, **kwargs)

            wrapper = sync_wrapper
        setattr(wrapper, VIEW_POLICIES, (*getattr(view, VIEW_POLICIES, ()), name))
        return wrapper  # type: ignore[no-any-return]

    return decorator


def _pending(
    registry: PolicyRegistry, request: HttpRequest, name: str
) -> tuple[Verdict, PolicySpec | None]:
    """The request's verdict so far, and the policy still to decide (None if decided)."""
    verdict: Verdict = getattr(request, "ratelimit", None) or Verdict(())
    if verdict.covers(name):
        return verdict, None
    spec = registry.get(name)
    if spec is None or not spec.applies_to_method(request.method or "GET"):
        return verdict, None
    return verdict, spec


def _store(request: HttpRequest, before: Verdict, new: Verdict) -> Verdict:
    request.ratelimit = merged = before.merge(new)  # type: ignore[attr-defined]
    return merged
