"""What Django's resolver says of a request's path, as far as limiting needs it.

Two questions are asked of every limited request: which policies the view names
with ``@ratelimit`` (the middleware decides them with the path's own), which of
them refuse nothing when they deny (``block=False``), and
whether the view belongs to an admin site (the way back from a block,
:mod:`django_ratelimits.way_back`). One resolve answers both. It costs about a
tenth of a Redis round trip, and Django resolves again for the view, so
answers are cached per (URLconf, path); a path longer than
:data:`~django_ratelimits.policies.matching.CACHE_PATH_MAX` (rare, often
hostile) is resolved without being cached.
"""

from __future__ import annotations

import functools
from typing import Final, Literal, NamedTuple

from django.conf import settings
from django.core.signals import setting_changed
from django.dispatch import receiver
from django.http import Http404, HttpRequest
from django.urls import resolve

from django_ratelimits.policies.matching import CACHE_PATH_MAX

__all__ = ["VIEW_POLICIES", "VIEW_SOFT", "AdminView", "Resolved", "resolved"]

VIEW_POLICIES: Final = "ratelimit_policies"
"""Attribute ``@ratelimit`` sets on a view: the names of the policies it applies."""
VIEW_SOFT: Final = "ratelimit_soft_policies"
"""Attribute ``@ratelimit`` sets on a view: the policies it applies with ``block=False``."""

AdminView = Literal["login", "other"] | None


class Resolved(NamedTuple):
    policies: tuple[str, ...]
    """The policies the view names with ``@ratelimit``."""
    admin: AdminView
    """``"login"``, ``"other"`` (another view of an admin site) or ``None``."""
    soft: frozenset[str] = frozenset()
    """Those of :attr:`policies` whose denial the view lets through (``block=False``)."""


_NOWHERE: Final = Resolved((), None)


def resolved(request: HttpRequest) -> Resolved:
    """What the resolver says of ``request``'s path."""
    urlconf = getattr(request, "urlconf", None) or settings.ROOT_URLCONF
    path = request.path_info
    if len(path) > CACHE_PATH_MAX:
        return _resolve.__wrapped__(urlconf, path)
    return _resolve(urlconf, path)


@functools.lru_cache(maxsize=4096)
def _resolve(urlconf: str, path: str) -> Resolved:
    try:
        match = resolve(path, urlconf)
    except Http404:
        return _NOWHERE
    policies = getattr(match.func, VIEW_POLICIES, ())
    soft = frozenset(getattr(match.func, VIEW_SOFT, ()))
    if match.app_name != "admin":  # every AdminSite's URLs have the app name "admin"
        return Resolved(policies, None, soft)
    return Resolved(policies, "login" if match.url_name == "login" else "other", soft)


@receiver(setting_changed)
def _forget_views(*, setting: str, **kwargs: object) -> None:
    if setting == "ROOT_URLCONF":
        _resolve.cache_clear()
