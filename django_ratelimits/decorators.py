"""``@ratelimit``: apply a named policy to a view.

::

    @ratelimit("login", rate="5/m", key="ip", methods=["POST"])
    def login(request): ...

The policy lives in the database (admin); the arguments after the name are
code defaults that create the row if it is missing, and the row wins when it
exists. Without defaults the policy must exist in admin (else nothing is
limited). Works on function views, async views and, with ``method_decorator``,
class-based views (async ones too, decorated on ``dispatch``). With ``block=False``
the view always runs and decides itself from ``request.ratelimit`` (a
:class:`~django_ratelimits.decide.Verdict`); such a policy's denial never stops the
request's other policies from counting it.

A request from a blocked network is refused (403) before anything else, even
with ``block=False``: a blocklist entry is an admin's decision, not a policy's
verdict (:mod:`django_ratelimits.blocklist`).

Stacked on one view, the first decorator a request reaches decides every policy
of the stack in one round trip, all or nothing per identity (a policy an inner
decorator refuses costs the outer ones nothing), and refuses for any of them
applied with ``block=True``. When ``RateLimitMiddleware`` is installed it decides
the view's policies together with its own in one round trip, and refuses the
request itself when a policy the view applies with ``block=True`` denies it (so
that a decorator an outer one never reaches, as ``@login_required``'s redirect,
still refuses); the decorator then only enforces the verdict.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from asgiref.sync import iscoroutinefunction
from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponseBase
from django.views import View as ClassBasedView

from django_ratelimits import blocklist, costs
from django_ratelimits.decide import Verdict, adecide_policy, decide_policy
from django_ratelimits.engine import Algorithm
from django_ratelimits.inflight import arelease_after, release, release_when_done
from django_ratelimits.policies.declare import declared
from django_ratelimits.policies.parse import parse_ban
from django_ratelimits.policies.registry import acurrent, current, get_registry
from django_ratelimits.policies.spec import Mode, Recording
from django_ratelimits.resolved import VIEW_POLICIES, VIEW_SOFT
from django_ratelimits.responses import refusal

View = TypeVar("View", bound=Callable[..., Any])


def ratelimit(
    name: str,
    *,
    rate: str | None = None,
    key: str = "ip",
    methods: Iterable[str] = (),
    algorithm: Algorithm | str = Algorithm.SLIDING_WINDOW,
    burst: int | None = None,
    lease: int | None = None,
    mode: Mode | str = Mode.ENFORCE,
    identity_budget: str = "",
    record_metadata: Recording | str = Recording.DENIALS,
    fail_closed: bool = False,
    exempt_staff: bool = False,
    exempt_superusers: bool = False,
    allow_cidrs: Iterable[str] = (),
    path: str = "",
    priority: int = 0,
    description: str = "",
    cost: int | costs.CostFunction = 1,
    ban_after: int = 0,
    ban_within: str = "",
    ban_for: str = "",
    ban_max: str = "",
    block: bool = True,
) -> Callable[[View], View]:
    """Apply policy ``name`` to the decorated view.

    ``key`` is ``"ip"``, ``"user"``, ``"user_or_ip"``, ``"ip_and_user"``,
    ``"header:<name>"`` or ``"callable:<dotted.path>"``. ``rate`` and the rest
    (every field of a policy in admin, by its field name) are only defaults for a
    policy missing from the database; ``identity_budget`` is a rate (``"20/h"``),
    ``"off"``, or empty for ``IDENTITY_BUDGET``; ``record_metadata`` is
    ``"none"``, ``"denials"`` or ``"every"``; ``allow_cidrs`` are networks
    (``["10.0.0.0/8"]``); a ``path`` makes the middleware apply the policy there
    too. With ``algorithm="concurrency"``, ``rate`` is how many requests may be in
    flight at once (``"5"``) and ``lease`` the most seconds one holds its slot
    (default 60; docs/concurrency.md). ``ban_after`` and the ban's periods
    (``"10m"``) declare an escalating ban, whose inconsistency is a system check
    error (E010), not an import error. A callable named here is trusted (code,
    unlike admin text, may name any function): policies may use it without
    ``KEY_FUNCTIONS`` listing it.

    ``cost`` is what one request charges each of the policy's limits: a whole
    number (a default, like ``rate``: admin may change it), or a function
    ``cost(request) -> int`` called on every request (see
    :mod:`django_ratelimits.costs` for what it may return). A policy has at most
    one cost function.
    """
    if callable(cost):
        costs.register(name, cost)
        cost = 1
    elif rate is None and cost != 1:
        raise ValueError(
            f"@ratelimit({name!r}, cost={cost!r}) without rate=: a cost, like a rate, is "
            "a default of the policy; give rate= too, or set the cost in admin"
        )
    if rate is not None:
        registry = get_registry()
        try:
            ban = parse_ban(ban_after, ban_within, ban_for, ban_max)
        except ValidationError as exc:
            ban = None
            registry.refuse_ban(name, exc)
        registry.declare(
            declared(
                name,
                rate=rate,
                key=key,
                methods=methods,
                algorithm=algorithm,
                burst=burst,
                lease=lease,
                mode=mode,
                identity_budget=identity_budget,
                record_metadata=record_metadata,
                fail_closed=fail_closed,
                exempt_staff=exempt_staff,
                exempt_superusers=exempt_superusers,
                allow_cidrs=allow_cidrs,
                path=path,
                priority=priority,
                description=description,
                cost=cost,
                ban=ban,
            )
        )

    def decorator(view: View) -> View:
        # The policies of the decorators this one wraps: the first one a request reaches
        # decides them all in one call, and refuses for any of them applied with
        # block=True, as the middleware does (an inner one may never be reached).
        chain: tuple[str, ...] = getattr(view, VIEW_POLICIES, ())
        soft = frozenset((*getattr(view, VIEW_SOFT, ()), *(() if block else (name,))))
        refusing = {n for n in (name, *chain) if n not in soft}
        if _is_async(view):

            @functools.wraps(view)
            async def async_wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> Any:
                if (blocked := await blocklist.arefusal(request, await acurrent())) is not None:
                    return blocked
                verdict = await adecide_policy(request, name, chain=chain, soft=soft)
                if refusing and verdict.blocked(refusing):
                    return release_when_done(refusal(request, verdict, refusing), verdict)
                try:
                    response = await view(request, *args, **kwargs)
                except BaseException as error:
                    await arelease_after(verdict, error)
                    raise
                return _finish(response, verdict)

            wrapper: Any = async_wrapper
        else:

            @functools.wraps(view)
            def sync_wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> Any:
                if (blocked := blocklist.refusal(request, current())) is not None:
                    return blocked
                verdict = decide_policy(request, name, chain=chain, soft=soft)
                if refusing and verdict.blocked(refusing):
                    return release_when_done(refusal(request, verdict, refusing), verdict)
                try:
                    response = view(request, *args, **kwargs)
                except BaseException:
                    release(verdict)
                    raise
                return _finish(response, verdict)

            wrapper = sync_wrapper
        setattr(wrapper, VIEW_POLICIES, (*chain, name))
        if soft:
            setattr(wrapper, VIEW_SOFT, tuple(soft))
        return wrapper  # type: ignore[no-any-return]

    return decorator


def _is_async(view: Callable[..., Any]) -> bool:
    """Whether ``view`` is async: a coroutine function, or the ``dispatch`` of an async
    class-based view as ``method_decorator(..., name="dispatch")`` hands it over: a sync
    method, bound to the view (in a ``functools.partial``), that returns the coroutine of
    the view's async handler. Its policies are then decided off the event loop and its
    concurrency slots held until its response ends, as for an async function view."""
    if iscoroutinefunction(view):
        return True
    bound = view.func if isinstance(view, functools.partial) else view
    owner = getattr(bound, "__self__", None)
    return isinstance(owner, ClassBasedView) and bool(owner.view_is_async)


def _finish(response: Any, verdict: Verdict) -> Any:
    """The view's response, giving back the request's concurrency slots when it
    ends (at once if the view returned no response to close)."""
    if isinstance(response, HttpResponseBase):
        return release_when_done(response, verdict)
    release(verdict)
    return response
