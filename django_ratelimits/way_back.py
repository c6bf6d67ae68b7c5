"""The way back from a block: the requests a block by staff never refuses.

Staff who block their own address (or user) must still be able to lift it
from admin. So a block or allow-listing set by staff does not decide:

- the login view of any admin site, for anyone: it is how a blocked admin
  gets back in;
- every other view of an admin site, for an active staff user who may lift
  blocks (:data:`LIFT_PERMISSION`), who could lift the block anyway.

Their rate limits still count these requests as any other's: a blocked
address gets no more login attempts than the login's policy gives anyone.
``docs/dashboard.md`` says so for staff. Which view a path is comes from
Django's resolver, cached per (URLconf, path) as the middleware does.
"""

from __future__ import annotations

import functools
from typing import Final, Literal

from django.conf import settings
from django.http import Http404, HttpRequest
from django.urls import resolve

LIFT_PERMISSION: Final = "django_ratelimits.block_offenders"
_CACHED_PATH_MAX: Final = 2048

AdminView = Literal["login", "other"] | None


def way_back(request: HttpRequest) -> bool:
    """Whether a block or allow-listing must not decide ``request``."""
    view = _admin_view(
        getattr(request, "urlconf", None) or settings.ROOT_URLCONF, request.path_info
    )
    if view == "login":
        return True
    if view is None:
        return False
    user = getattr(request, "user", None)
    return bool(
        user is not None and user.is_active and user.is_staff and user.has_perm(LIFT_PERMISSION)
    )


def _admin_view(urlconf: str, path: str) -> AdminView:
    if len(path) > _CACHED_PATH_MAX:  # rare, often hostile: resolved without being cached
        return _resolve.__wrapped__(urlconf, path)
    return _resolve(urlconf, path)


@functools.lru_cache(maxsize=4096)
def _resolve(urlconf: str, path: str) -> AdminView:
    """``"login"``, ``"other"`` (another view of an admin site) or ``None``."""
    try:
        match = resolve(path, urlconf)
    except Http404:
        return None
    if match.app_name != "admin":  # every AdminSite's URLs have the app name "admin"
        return None
    return "login" if match.url_name == "login" else "other"
